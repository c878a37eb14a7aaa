"""A store that a fault left empty or unreadable, found in the checkpoint reads (harness/audit/emptied.py),
and a pod log's repeated lines shown once with their count (harness/audit/podlogs.py)."""

from __future__ import annotations

from pathlib import Path

from harness.audit.accumulators import CheckpointRead, PodFault
from harness.audit.emptied import Emptied, emptied
from harness.audit.findings import findings
from harness.audit.podlogs import evidence
from harness.audit.stats import Rate
from harness.history import Verdict

KILL = PodFault(seq=10, t=3.0, kind="kill", pod="pod-0", number=1, start=1)


def read(
    seq: int, when: str, seen: bytes = b"", error: str | None = None, foreign: int = 0
) -> CheckpointRead:
    return CheckpointRead(
        seq=seq,
        t=float(seq),
        when=when,
        pod="pod-0",
        fault_seq=None,
        seen=seen,
        counts={},
        foreign=foreign,
        error=error,
        took_s=0.01,
    )


def test_a_read_after_a_restart_that_finds_nothing_of_what_was_there_is_the_store_emptied() -> None:
    reads = [read(9, "before_fault", b"\x0f"), read(12, "after_restart")]
    assert emptied(reads, [KILL]) == Emptied(KILL, held=4)


def test_an_unreadable_store_counts_only_when_no_later_read_could_read_it() -> None:
    failing = [read(9, "before_fault", b"\x01"), read(12, "after_restart", error="file is not a database")]
    assert emptied(failing, [KILL]) == Emptied(KILL, held=1, unreadable="file is not a database")
    recovered = [*failing, read(20, "before_fault", b"\x01")]
    assert emptied(recovered, [KILL]) is None


def test_no_story_without_a_read_that_had_found_effects_first() -> None:
    assert emptied([read(9, "before_fault"), read(12, "after_restart")], [KILL]) is None
    assert emptied([read(9, "before_fault", b"\x01"), read(12, "after_restart", b"\x01")], [KILL]) is None


def test_the_story_opens_the_lost_finding_before_its_counts_and_causes() -> None:
    story = Emptied(KILL, held=66).sentence(acked_after=234, stored_after=0)
    assert story == (
        "the store was empty after kill#1 pod-0 @3.00s, where a read before it had found 66 intents "
        "stored; every later write was acknowledged and not stored (234 intents)"
    )
    partly = Emptied(KILL, held=66, foreign=True).sentence(acked_after=10, stored_after=4)
    assert partly.startswith("the store held none of this run's effects after kill#1")
    assert partly.endswith("of the 10 writes acknowledged after it, 6 were not stored")
    verdicts = {Verdict.LOST: 300, Verdict.EXACTLY_ONCE: 0}
    rates = {v: Rate(n, 300) for v, n in verdicts.items()}
    causes = {Verdict.LOST: {"no_fault": 118, "lost_across_restart": 108}}
    [lost] = findings(verdicts, rates, causes, [], "with 2 kills", story=story)
    assert lost.sentence.startswith(f"LOST: {story}. 300 of 300 intents")
    assert lost.sentence.index("causes:") > lost.sentence.index("every later write")


def test_a_repeated_stack_trace_in_a_pod_log_is_one_line_with_its_count(tmp_path: Path) -> None:
    (tmp_path / "pods").mkdir()
    trace = [
        f"[12:00:{i:02d}] Traceback (most recent call last):\nValueError: roots/list refused (id {i})\n"
        for i in range(40)
    ]
    log = "--- pod-0: start #1 at 12:00:00 ---\nok\n--- pod-0: start #2 at 12:00:01 ---\n" + "".join(trace)
    (tmp_path / "pods" / "pod-0.log").write_text(log)
    [found] = evidence(tmp_path, [KILL])
    assert found.after == [
        "[12:00:00] Traceback (most recent call last): (repeated 40×)",
        "ValueError: roots/list refused (id 0) (repeated 40×)",
    ]
