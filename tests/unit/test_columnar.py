"""The columnar fold (DuckDB's parse, numpy per batch) yields what the Python fold yields, field for field.

The Python fold (``harness.audit.fold``) is the reference: on the benchmark's synthetic
pod-kill history and on seeded random histories that take every branch (replicas,
graceful stops, rollouts, pauses, crashes, stream faults, sessions, errors, replies that
read as failures, partial runs), the columnar fold must give the same per-intent rows and
the same run record, with batches cut anywhere (a batch of a few events splits intents and
attempts in flight). It must also decline, not misread, a history it cannot take exactly.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pytest

from bench import audit as bench_audit
from harness.audit import columnar, parse, scan
from harness.audit.effects import EffectTable
from harness.audit.fold import Fold, fold_history
from harness.audit.verdicts import ClientStatus
from harness.errors import HistoryError
from harness.history import read_batches
from tests.helpers.quick import seeds
from tests.unit.histories import random_history


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(ev) + b"\n" for ev in events))
    return path


def both(path: Path) -> tuple[Fold, pd.DataFrame, Fold, pd.DataFrame]:
    """(the Python fold, its started rows, the columnar fold, its rows); fails if the columnar declined."""
    python = fold_history(read_batches(path), str(path))
    started = python.intents[python.intents["client_status"] != ClientStatus.NOT_STARTED]
    folded = columnar.fold_columnar(path)
    assert folded is not None, "the columnar fold declined a history the harness could have written"
    fold, rows = folded
    try:
        frame = rows.frame()
    finally:
        rows.close()
    return python, started.reset_index(drop=True), fold, frame


def assert_same(path: Path) -> pd.DataFrame:
    python, expected, fold, frame = both(path)
    if not len(expected):
        assert frame.empty
    else:
        # Text columns are Arrow-backed in the columnar frame, Python objects in the other: same values.
        pd.testing.assert_frame_equal(frame, expected, check_dtype=False, check_exact=True)
        assert list(frame.columns) == list(expected.columns)
    for f in dataclasses.fields(Fold):
        if f.name != "intents":
            assert getattr(fold, f.name) == getattr(python, f.name), f.name
    return frame


def test_the_benchmark_history(tmp_path: Path) -> None:
    bench_audit.synthesize(tmp_path, 5_000)
    frame = assert_same(tmp_path / "history.jsonl")
    assert len(frame) == 5_000
    assert frame["n_transport_error"].sum() > 0


@pytest.mark.parametrize("batch", [3, 17, 1 << 15])
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("seed", seeds(12))
def test_random_histories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, replicas: int, batch: int
) -> None:
    monkeypatch.setattr(parse, "BATCH_ROWS", batch)
    history = random_history(seed, replicas=replicas)
    frame = assert_same(write(tmp_path / "history.jsonl", history.events))
    assert len(frame) >= 50  # some runs end early: the rest of their intents never started


def test_the_random_histories_reach_the_rare_branches(tmp_path: Path) -> None:
    """What the comparison above is worth: the histories it passes on take the fold's rare branches."""
    frames = []
    folds = []
    for seed in range(12):
        for replicas in (1, 3):
            events = random_history(seed, replicas=replicas).events
            path = write(tmp_path / f"h{seed}-{replicas}.jsonl", events)
            _, _, fold, frame = both(path)
            frames.append(frame)
            folds.append(fold)
    faults = {kind for f in frames for cell in f["faults"] for kind in cell.split(";") if kind}
    assert faults >= {"kill", "rollout", "pause", "crash", "sever_response", "stall"}
    assert any(f["attempts_hit_by_pod_fault"].sum() for f in frames)
    assert any("pods" in f.columns for f in frames)
    assert any(f.errors for f in folds)
    assert any(f.resumed for f in folds)
    assert any(f.open_attempts for f in folds)
    assert any((f["client_status"] == ClientStatus.IN_PROGRESS).any() for f in frames)


def damaged(tmp_path: Path, change: Any) -> Path:
    events = random_history(3).events
    change(events)
    return write(tmp_path / "history.jsonl", events)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda evs: evs.insert(10, {**evs[10]}), id="an event twice"),
        pytest.param(lambda evs: evs.insert(20, evs.pop(12)), id="lines out of seq order"),
        pytest.param(
            lambda evs: next(e for e in evs if e["type"] == "attempt_started").update(intent=10**9),
            id="an intent past the plan",
        ),
        pytest.param(
            lambda evs: evs.remove(next(e for e in evs if e["type"] == "attempt_started")),
            id="an end without its start",
        ),
        pytest.param(
            lambda evs: next(e for e in evs if e["type"] == "intent_started").pop("marker"),
            id="a start without its marker",
        ),
        pytest.param(
            lambda evs: next(e for e in evs if e["type"] == "attempt_ended").update(outcome="maybe"),
            id="an outcome the harness does not write",
        ),
    ],
)
def test_it_declines_what_it_cannot_read_exactly(tmp_path: Path, change: Any) -> None:
    assert columnar.fold_columnar(damaged(tmp_path, change)) is None


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda evs: next(e for e in evs if e["type"] == "fault").pop("fault"),
            id="a fault without its kind",
        ),
        pytest.param(
            lambda evs: next(e for e in evs if e["type"] == "attempt_ended").update(resumed=[1]),
            id="a resumed flag that is a list",
        ),
    ],
)
def test_an_event_an_accumulator_refuses_is_declined_and_the_python_fold_names_its_line(
    tmp_path: Path, change: Any
) -> None:
    path = damaged(tmp_path, change)
    assert columnar.fold_columnar(path) is None
    with pytest.raises(HistoryError, match=r"history\.jsonl:\d+: malformed history event"):
        fold_history(read_batches(path), str(path))


def test_a_bug_in_the_fast_path_is_raised_not_taken_for_a_damaged_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fallback on any exception would show a bug as a slow audit, never as a failure."""

    def broken(self: Any, part: Any) -> None:
        raise ValueError("a bug of the fold")

    monkeypatch.setattr(columnar._Folder, "_merge", broken)
    path = write(tmp_path / "history.jsonl", random_history(3).events)
    with pytest.raises(ValueError, match="a bug of the fold"):
        columnar.fold_columnar(path)


def test_a_torn_last_line_is_left_to_the_python_fold(tmp_path: Path) -> None:
    path = write(tmp_path / "history.jsonl", random_history(1).events)
    path.write_bytes(path.read_bytes() + b'{"seq": 99999, "t": 1.0, "ty')
    assert columnar.fold_columnar(path) is None


def stretches(seqs: list[list[int]]) -> Iterator[pa.RecordBatch]:
    for part in seqs:
        yield pa.record_batch([pa.array(part, pa.int64())], names=["seq"])


def test_stretches_that_come_out_of_order_are_put_back_in_order() -> None:
    rng = random.Random(7)
    runs = [list(range(start, start + 5)) for start in range(0, 60, 5)]
    shuffled = runs[:]
    rng.shuffle(shuffled)
    batches = scan.in_order(stretches(shuffled), 0, 4)
    out = [s for batch in batches for s in batch.column("seq").to_pylist()]
    assert out == list(range(60))


def test_a_gap_in_the_seqs_is_declined_once_too_much_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "REORDER_ROWS", 10)
    runs = [list(range(start, start + 5)) for start in range(5, 60, 5)]  # 0-4 never comes
    with pytest.raises(scan.Declined):
        list(scan.in_order(stretches(runs), 0, 4))


@pytest.mark.parametrize("batch", [4, 32768])
def test_an_intent_started_twice_is_declined_in_one_batch_or_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(parse, "BATCH_ROWS", batch)
    events = random_history(3).events
    ends = {e["intent"]: i for i, e in enumerate(events) if e["type"] == "intent_ended"}
    # An intent that lasts more than a batch of 4 events: started again while in flight.
    first = next(
        i for i, e in enumerate(events) if e["type"] == "intent_started" and ends.get(e["intent"], 0) > i + 6
    )
    events.insert(first + 5, {**events[first], "marker": "another"})
    for seq, event in enumerate(events, start=events[0]["seq"]):
        event["seq"] = seq
    assert columnar.fold_columnar(write(tmp_path / "history.jsonl", events)) is None


def test_a_path_duckdb_would_read_as_a_pattern_is_left_to_the_python_fold(tmp_path: Path) -> None:
    """DuckDB reads ``*``, ``?`` and ``[...]`` in a path as a glob: ``run[1]`` would be ``run1``."""
    events = random_history(3).events
    for name, kept in (("run[1]", events), ("run1", events[:5])):
        (tmp_path / name).mkdir()
        write(tmp_path / name / "history.jsonl", kept)
    path = tmp_path / "run[1]" / "history.jsonl"
    assert columnar.fold_columnar(path) is None
    python = fold_history(read_batches(path), str(path))
    assert (python.intents["client_status"] != ClientStatus.NOT_STARTED).sum() > 5


@pytest.mark.parametrize("batch", [3, 1 << 15])
def test_the_markers_hashed_while_folding_are_those_the_effect_table_looks_up(
    tmp_path: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold's DuckDB hashes each marker as it parses: the same digests the effect table makes of the
    same text, or every effect would go unmatched (counted foreign, its intent lost)."""
    monkeypatch.setattr(parse, "BATCH_ROWS", batch)
    bench_audit.synthesize(tmp_path, 300)
    folded = columnar.fold_columnar(tmp_path / "history.jsonl")
    assert folded is not None
    _, rows = folded
    table = EffectTable.of({"b-m0000007": 2})
    try:
        chunk = pa.concat_tables(rows.chunks())
        hashes = (chunk.column("marker_hash").to_numpy(), chunk.column("marker_check").to_numpy())
        markers = chunk.column("marker").combine_chunks()
        (given_key, given_check), (own_key, own_check) = (
            table._digests(markers, hashes),
            table._digests(markers),
        )
        assert given_key.tolist() == own_key.tolist()
        assert given_check.tolist() == own_check.tolist()
        found = table.lookup(chunk.column("marker"), hashes)
        assert found.tolist() == [2 if m == "b-m0000007" else 0 for m in chunk.column("marker").to_pylist()]
    finally:
        rows.close()
        table.close()


def test_a_line_longer_than_duckdb_reads_is_left_to_the_python_fold(tmp_path: Path) -> None:
    """A 60 MB line (a server's huge reply) ended the audit in DuckDB's ``maximum_object_size`` error,
    raised through Arrow as an OSError the fast path did not take for a decline."""
    events = random_history(3).events
    ok = next(e for e in events if e["type"] == "attempt_ended" and e["outcome"] == "ok")
    ok["reply"] = "x" * (60 << 20)  # past DuckDB's maximum_object_size (16 MiB, its reads 32)
    path = write(tmp_path / "history.jsonl", events)
    assert columnar.fold_columnar(path) is None
    python = fold_history(read_batches(path), str(path))
    assert (python.intents["client_status"] != ClientStatus.NOT_STARTED).sum() > 5
