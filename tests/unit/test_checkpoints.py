"""Checkpoint reads: their compact record, and that a read never raises into the run.

The reads of real effect sources around real kills are in
``tests/integration/test_checkpoints.py``; here the source is a coroutine that
answers, fails or never answers, so the recording rules are shown one by one.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.effects.base import Sample
from harness.errors import AuditError, HistoryError, ScenarioError
from harness.history import CheckpointWhen, EventType, HistoryWriter, SeenEffects, read_history
from harness.run import checkpoints as checkpoints_module
from harness.run.checkpoints import Checkpoints, Reader
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario

NS = "ns1"


def marker(index: int) -> str:
    return f"{NS}-m{index:07d}"


def test_seen_effects_are_a_bitmap_counts_and_foreign() -> None:
    effects = {marker(0): 1, marker(9): 3, marker(10): 1, "other-m0000001": 2, marker(2): 0}
    seen = SeenEffects.of(effects, NS, intents=20)
    assert list(seen.indices()) == [0, 9, 10]
    assert [seen.count(i) for i in (0, 1, 2, 9, 10, 19, 500)] == [1, 0, 0, 3, 1, 0, 0]
    assert seen.foreign == 2
    fields = seen.fields()
    # Bit i % 8 of byte i // 8, least significant first; the trailing zero byte is dropped.
    assert base64.b64decode(fields["seen"]) == bytes([0b00000001, 0b00000110])
    assert fields["counts"] == {"9": 3}
    assert SeenEffects.from_event(fields) == seen


def test_markers_not_of_this_run_are_only_counted() -> None:
    effects = {
        f"{NS}-m1": 1,  # not the workload's padding: another writer's
        f"{NS}-m00000001": 1,
        f"{NS}-m0000020": 1,  # past the run's intents
        f"{NS}-m000000x": 1,
        f"{NS}-m000000\u0661": 1,  # an Arabic-Indic digit: a digit to str.isdigit, not to the workload
        f"x{NS}-m0000001": 1,
        marker(19): 1,
    }
    seen = SeenEffects.of(effects, NS, intents=20)
    assert (list(seen.indices()), seen.foreign) == ([19], 6)


def test_large_indices_keep_their_digits() -> None:
    seen = SeenEffects.of({f"{NS}-m12345678": 2}, NS, intents=20_000_000)
    assert list(seen.indices()) == [12_345_678]
    assert seen.count(12_345_678) == 2
    assert len(seen.bitmap) == 12_345_678 // 8 + 1


def test_nothing_seen_is_an_empty_bitmap() -> None:
    seen = SeenEffects.of({}, NS, intents=1000)
    assert seen.fields() == {"seen": "", "counts": {}, "foreign": 0}
    assert list(seen.indices()) == []


def test_a_failed_read_has_no_seen_and_a_damaged_one_is_named() -> None:
    assert SeenEffects.from_event({"error": "no such table"}) is None
    with pytest.raises(HistoryError, match="#7 is damaged"):
        SeenEffects.from_event({"seq": 7, "seen": "not base64!"})


def test_audit_checkpoints_is_a_switch_or_a_section() -> None:
    data = invoice_scenario()
    assert parse_scenario(data).audit.checkpoints.enabled
    assert parse_scenario(data).audit.checkpoints.timeout_s == 5
    data["audit"]["checkpoints"] = False
    assert not parse_scenario(data).audit.checkpoints.enabled
    data["audit"]["checkpoints"] = {"timeout_s": 0.5}
    scenario = parse_scenario(data)
    assert (scenario.audit.checkpoints.enabled, scenario.audit.checkpoints.timeout_s) == (True, 0.5)
    assert "checkpoints:" in scenario.dump_yaml()
    data["audit"]["checkpoints"] = {"timeout_s": 0}
    with pytest.raises(ScenarioError, match=r"audit\.checkpoints\.timeout_s"):
        parse_scenario(data)


def checkpoint_events(path: Path) -> list[dict[str, Any]]:
    return [e for e in read_history(path) if e["type"] == EventType.EFFECTS_CHECKPOINT]


def reads(tmp_path: Path, read: Reader, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Before a fault (its event would be the next) and after a restart (ready at seq 42), then close."""
    path = tmp_path / "history.jsonl"

    async def main() -> None:
        with HistoryWriter(path) as history:
            checkpoints = Checkpoints(read, history, namespace=NS, intents=10, timeout_s=timeout_s)
            record = await checkpoints.before_fault("pod-0")
            history.emit_fields(EventType.RUN_STARTED)
            record()
            checkpoints.after_restart("pod-0", 42)
            for _ in range(500):  # until the read after the restart is recorded (or 5 s went by)
                if len(checkpoint_events(path)) == 2:
                    break
                await asyncio.sleep(0.01)
            await checkpoints.close()

    asyncio.run(main())
    return checkpoint_events(path)


def test_reads_are_recorded_with_what_they_belong_to(tmp_path: Path) -> None:
    async def read() -> Sample:
        return Sample(Counter({marker(3): 1, marker(4): 2, "elsewhere": 1}))

    before, after = reads(tmp_path, read)
    assert (before["when"], before["pod"]) == (CheckpointWhen.BEFORE_FAULT, "pod-0")
    assert (before["seq"], before["fault_seq"]) == (1, 2)  # the fault is the next event
    assert (after["when"], after["fault_seq"]) == (CheckpointWhen.AFTER_RESTART, 42)
    for event in (before, after):
        seen = SeenEffects.from_event(event)
        assert seen is not None
        assert (list(seen.indices()), seen.counts, seen.foreign) == ([3, 4], {4: 2}, 1)
        assert event["took_s"] >= 0
        assert "error" not in event


def test_a_failing_read_is_recorded_not_raised(tmp_path: Path) -> None:
    async def read() -> Sample:
        raise AuditError("audit query failed on x.db: no such table: invoices")

    events = reads(tmp_path, read)
    assert [e["error"] for e in events] == ["audit query failed on x.db: no such table: invoices"] * 2
    assert all("seen" not in e for e in events)


def test_a_bug_in_a_read_is_recorded_too(tmp_path: Path) -> None:
    async def read() -> Sample:
        raise ValueError("invalid literal for int() with base 10: 'x'\nand more")

    events = reads(tmp_path, read)
    assert events[0]["error"] == "ValueError: invalid literal for int() with base 10: 'x' and more"


def test_a_read_past_its_time_is_abandoned(tmp_path: Path) -> None:
    async def read() -> Sample:
        await asyncio.Event().wait()  # a source that never answers
        raise AssertionError("unreachable")

    before, _ = reads(tmp_path, read, timeout_s=0.01)
    assert before["error"] == "abandoned after 0.01s (audit.checkpoints.timeout_s)"


def test_a_read_still_running_at_the_end_is_recorded_as_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoints_module, "CLOSE_GRACE_S", 0.05)
    path = tmp_path / "history.jsonl"
    started = asyncio.Event()

    async def read() -> Sample:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def main() -> None:
        with HistoryWriter(path) as history:
            checkpoints = Checkpoints(read, history, namespace=NS, intents=10, timeout_s=60)
            checkpoints.after_restart("pod-1", 7)
            await started.wait()
            await checkpoints.close()

    asyncio.run(main())
    (event,) = checkpoint_events(path)
    assert (event["pod"], event["fault_seq"]) == ("pod-1", 7)
    assert event["error"] == "abandoned: the run ended during the read"


def test_the_end_of_the_run_waits_for_a_read_that_is_about_to_finish(tmp_path: Path) -> None:
    """The read after the last restart is what it kept: a run that ends while it runs lets it finish."""
    path = tmp_path / "history.jsonl"
    started = asyncio.Event()

    async def read() -> Sample:
        started.set()
        await asyncio.sleep(0.2)
        return Sample(Counter({marker(3): 1}))

    async def main() -> None:
        with HistoryWriter(path) as history:
            checkpoints = Checkpoints(read, history, namespace=NS, intents=10, timeout_s=60)
            checkpoints.after_restart("pod-1", 7)
            await started.wait()
            await checkpoints.close()

    asyncio.run(main())
    (event,) = checkpoint_events(path)
    assert "error" not in event
    assert list(seen_of(event).indices()) == [3]


def seen_of(event: dict[str, Any]) -> SeenEffects:
    seen = SeenEffects.from_event(event)
    assert seen is not None
    return seen


def scripted(*answers: dict[int, int]) -> tuple[Reader, list[int]]:
    """A source that answers these, one sample after another (the last again when they run out)."""
    served: list[int] = []

    async def read() -> Sample:
        served.append(1)
        answer = answers[min(len(served), len(answers)) - 1]
        return Sample(Counter({marker(i): n for i, n in answer.items()}))

    return read, served


def steady(tmp_path: Path, read: Reader, *, acknowledged: int) -> list[dict[str, Any]]:
    """One read before a fault, with ``acknowledged`` intents already answered ok."""
    path = tmp_path / "history.jsonl"

    async def main() -> None:
        with HistoryWriter(path) as history:
            checkpoints = Checkpoints(read, history, namespace=NS, intents=10, timeout_s=5)
            checkpoints.acknowledged = lambda: acknowledged
            (await checkpoints.before_fault("pod-0"))()

    asyncio.run(main())
    return checkpoint_events(path)


def test_a_read_is_two_samples_and_says_what_either_saw(tmp_path: Path) -> None:
    read, served = scripted({0: 1, 1: 1}, {1: 1, 2: 1})  # the first caught 2 missing, the second 0
    (event,) = steady(tmp_path, read, acknowledged=0)
    assert list(seen_of(event).indices()) == [0, 1, 2]
    assert len(served) == 2
    assert "rereads" not in event


def test_a_read_that_saw_nothing_while_intents_were_acknowledged_is_read_again(tmp_path: Path) -> None:
    # Both samples caught the file truncated; read again, whole twice in a row: recorded whole.
    read, served = scripted({}, {}, {0: 1, 1: 1})
    (event,) = steady(tmp_path, read, acknowledged=2)
    assert list(seen_of(event).indices()) == [0, 1]
    assert event["rereads"] == 2
    assert "unstable" not in event
    assert len(served) == 6


def test_a_store_that_really_holds_nothing_reads_the_same_every_time(tmp_path: Path) -> None:
    read, _ = scripted({})
    (event,) = steady(tmp_path, read, acknowledged=5)
    assert list(seen_of(event).indices()) == []
    assert event["rereads"] == 3
    assert "unstable" not in event  # what the store holds: the audit may believe it


def test_a_read_whose_re_reads_never_agree_is_unstable(tmp_path: Path) -> None:
    read, _ = scripted({}, {}, {0: 1}, {0: 1}, {}, {}, {1: 1}, {1: 1})
    (event,) = steady(tmp_path, read, acknowledged=2)
    assert event["unstable"] is True
    assert event["rereads"] == 3


def test_a_read_of_a_store_caught_mid_write_says_so(tmp_path: Path) -> None:
    """A JSON-lines store with a line that does not parse: the whole records are counted, and the torn
    line is named (a checkpoint read of it is recorded torn: its absences prove nothing)."""
    from harness.effects.registry import source_of

    store = tmp_path / "data" / "notes.jsonl"
    store.parent.mkdir()
    store.write_text(json.dumps({"title": marker(0)}) + '\n{"title": "ns1-m00')
    data = invoice_scenario()
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}}
    torn: list[int] = []
    counts = source_of(parse_scenario(data).audit.effects).count(tmp_path, torn=torn)
    assert (counts, torn) == (Counter({marker(0): 1}), [2])
