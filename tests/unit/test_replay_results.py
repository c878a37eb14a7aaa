"""What a replay concludes from its tries, without processes: the grouping of findings, the exit code,
and a FIXED at a guessed point (no point of the call was seen) that the run's own build does not back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from harness.audit.stories import Passed, Step, Story, lost_to_another_call
from harness.replay import Finding, Replayed, Result, _confirm, exit_code, group, replay_scenario
from harness.scenario import parse_scenario
from harness.wiped import Wiped, _cut_short
from tests.helpers.scenarios import invoice_scenario


def finding(intent: int, point: str | None, verdict: str = "duplicate", *, guessed: bool = False) -> Finding:
    return Finding(intent, verdict, "kill", point, "where", guessed=guessed)


def test_findings_at_one_point_with_one_verdict_share_a_replay() -> None:
    replays = group(
        [
            finding(1, "db_commit#2"),
            finding(2, "db_commit#2"),
            finding(3, "db_commit#2", "lost"),
            finding(4, "response", guessed=True),
            finding(5, None),
        ]
    )
    shapes = [(r.point, r.verdict, r.guessed, [f.intent for f in r.findings]) for r in replays]
    assert shapes == [
        ("db_commit#2", "duplicate", False, [1, 2]),
        ("db_commit#2", "lost", False, [3]),
        ("response", "duplicate", True, [4]),
        (None, "duplicate", False, [5]),
    ]
    assert replays[-1].result is Result.COULD_NOT_REPRODUCE  # no pod kill made it: never run


def test_exit_codes_say_the_worst() -> None:
    def r(result: Result) -> Replayed:
        return Replayed("response", "duplicate", [], result, "")

    assert exit_code([r(Result.FIXED), r(Result.FIXED)]) == 0
    assert exit_code([r(Result.FIXED), r(Result.STILL_FAILING), r(Result.COULD_NOT_REPRODUCE)]) == 1
    assert exit_code([r(Result.FIXED), r(Result.COULD_NOT_REPRODUCE)]) == 2


def test_a_fixed_at_a_guessed_point_on_the_runs_own_build_is_no_fix(tmp_path: Path) -> None:
    """The run's own build, killed before its answer, took effect once: the kill is not where the window
    was (a keyed design's duplicate between its commits), so nothing says it is fixed; the window is looked
    for inside the call, where a target with replicas cannot be explored."""
    replayed = Replayed(
        "response",
        "duplicate",
        [],
        Result.FIXED,
        "killed at response, exactly once in 3 of 3 tries",
        guessed=True,
    )
    replicas = parse_scenario(invoice_scenario(target={**invoice_scenario()["target"], "replicas": 2}))
    asyncio.run(_confirm(replayed, replicas, None, 3, tmp_path, None))
    assert replayed.result is Result.COULD_NOT_REPRODUCE
    assert replayed.why.startswith(
        "killed before its answer, exactly once in 3 of 3 tries: the window is inside the call, "
        "where this run saw no point, and it cannot be explored: crash points hold one pod"
    ), replayed.why


def test_findings_a_fault_on_another_call_lost_share_a_replay_of_their_own() -> None:
    """Lost with a store another call's kill tore: replayed (an exploration finds the point where none was
    seen), apart from lost intents whose own attempt the kill caught at the same point."""
    torn = Wiped("crash#1 pod-0 @2.49s", "notes.jsonl", 3)
    replays = group(
        [
            Finding(0, "lost", "lost_across_restart", None, torn.sentence(), wiped=torn),
            Finding(1, "lost", "lost_across_restart", None, torn.sentence(), wiped=torn),
            finding(2, None, "lost"),
            finding(4, "fs_write#1", "lost"),
            Finding(
                5, "lost", "vanished", "fs_write#1", "where", wiped=Wiped("kill#1", "s", 6, "fs_write#1")
            ),
        ]
    )
    shapes = [(r.point, r.wiped, [f.intent for f in r.findings]) for r in replays]
    assert shapes == [
        (None, True, [0, 1]),
        ("fs_write#1", False, [4]),
        ("fs_write#1", True, [5]),
        (None, False, [2]),
    ]
    assert torn.sentence() == "lost when crash#1 tore notes.jsonl mid-rewrite of intent 3"
    assert (
        Wiped("kill#2 pod-0 @1.00s", "the store").sentence()
        == "lost when kill#2 hit the store with no call in flight"
    )


def test_a_wiped_replay_stores_an_intent_then_kills_the_next_call() -> None:
    made = replay_scenario(parse_scenario(invoice_scenario()), "fs_write#1", 3, wiped=True)
    assert made.workload.intents == 6
    assert made.faults.crash_points is not None
    (hold,) = made.faults.crash_points.holds
    assert (hold.at, hold.intents) == ("fs_write#1", [1, 3, 5])


def step(attempt: int, outcome: str, faults: list[str], points: Sequence[Passed] = ()) -> Step:
    """An attempt of an intent's story, as the fold tells it (``faults``: the labels of those that hit it)."""
    start = float(attempt)
    return Step(
        attempt, attempt, "pod-0", start, start + 0.5, outcome, None, None, None, False, faults, list(points)
    )


def story(intent: int, verdict: str, vanished_after: str, *steps: Step) -> Story:
    return Story(
        intent, f"m{intent}", f"k{intent}", verdict, "", "ok", 0, list(steps), [], 1, vanished_after, None
    )


def test_a_lost_intent_is_told_from_the_fault_that_hit_another_call() -> None:
    """Lost after a kill none of its own attempts saw: the fault on another call made it. The call it cut
    short is the attempt it broke (not one that answered first), at the last point it was seen to reach
    for itself (not one that may be another attempt's)."""
    fault = "kill#1 pod-0 @2.00s"
    assert lost_to_another_call(story(0, "lost", fault, step(1, "ok", [])))
    assert not lost_to_another_call(story(0, "lost", fault, step(1, "transport_error", [fault])))
    assert not lost_to_another_call(story(0, "lost", "", step(1, "ok", [])))
    assert not lost_to_another_call(story(0, "duplicate", fault, step(1, "ok", [])))
    points = [
        Passed("db_commit#1", False),
        Passed("db_commit#2", False),
        Passed("db_commit#3", False, ambiguous=True),
    ]
    candidates = {
        1: story(1, "exactly_once", "", step(1, "ok", [fault])),
        3: story(3, "exactly_once", "", step(2, "transport_error", [fault], points)),
    }
    assert _cut_short(fault, candidates, "notes.jsonl") == Wiped(fault, "notes.jsonl", 3, "db_commit#2")
    assert _cut_short("kill#2 pod-0 @3.00s", candidates, "x") == Wiped("kill#2 pod-0 @3.00s", "x")
