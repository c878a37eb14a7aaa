"""The history's parse, started before the fold: how far it runs ahead, and that it stops when told.

The audit starts DuckDB's parse as its first step (``harness.audit.begin``), before it
imports the rest; until the fold takes its first batch the parse may run
``HEAD_START`` batches ahead, then only ``PREFETCH``, so that the fold's memory is
what it was. An audit that fails before its fold (a broken scenario) must stop the
parse and remove its directory.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bench import audit as bench_audit
from harness.audit import parse
from harness.audit.begin import begin
from harness.errors import AuditError


def settled(p: parse.Parse, count: int) -> int:
    """How many batches the parse holds once it has stopped adding (it waits at ``count``), in 5 s."""
    deadline = time.monotonic() + 5
    while p.ahead() < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # had it not waited, it would have parsed more by now
    return p.ahead()


def test_the_parse_runs_ahead_until_the_fold_begins_then_only_a_little(tmp_path: Path) -> None:
    bench_audit.synthesize(tmp_path, 200)  # ~850 events: ~210 batches of 4
    p = parse.start(tmp_path / "history.jsonl", rows=4)
    assert p is not None
    try:
        assert settled(p, parse.HEAD_START) == parse.HEAD_START
        batches = p.batches()
        seqs = [
            s for batch in [next(batches) for _ in range(parse.HEAD_START)] for s in batch["seq"].to_pylist()
        ]
        assert settled(p, parse.PREFETCH) == parse.PREFETCH
        seqs += [s for batch in batches for s in batch["seq"].to_pylist()]
    finally:
        p.close()
    assert sorted(seqs) == list(range(len(seqs)))  # every event once (stretches may come out of order)
    assert len(seqs) == len((tmp_path / "history.jsonl").read_bytes().splitlines())


def test_a_discarded_parse_stops_and_leaves_no_directory(tmp_path: Path) -> None:
    bench_audit.synthesize(tmp_path, 2000)
    p = parse.start(tmp_path / "history.jsonl", rows=4)
    assert p is not None
    workdir = p.workdir.path
    assert workdir.is_dir()
    p.discard()
    assert not workdir.exists()
    assert not [t for t in threading.enumerate() if t.name == "mcp-chaos-parse"]
    p.discard()  # again: nothing


def test_an_audit_whose_scenario_cannot_be_read_stops_the_parse_it_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_audit.synthesize(tmp_path, 2000)
    (tmp_path / "scenario.yaml").write_text("name: [broken\n")
    started: list[parse.Parse] = []
    real_start = parse.start

    def spy(path: Path, rows: int | None = None) -> parse.Parse | None:
        p = real_start(path, rows)
        assert p is not None
        started.append(p)
        return p

    monkeypatch.setattr(parse, "start", spy)
    with pytest.raises(AuditError, match="scenario cannot be read"):
        begin(tmp_path)
    assert len(started) == 1
    assert not started[0].workdir.path.exists()
    assert not [t for t in threading.enumerate() if t.name == "mcp-chaos-parse"]
