"""What a replay concludes from its tries, without processes: the grouping of findings, the exit code,
and a FIXED at a guessed point (no point of the call was seen) that the run's own build does not back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.replay import Finding, Replayed, Result, _confirm, exit_code, group
from harness.scenario import parse_scenario
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
