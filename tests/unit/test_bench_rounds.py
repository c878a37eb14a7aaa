"""The bench's judging of ratio goals, from synthetic rounds: nothing here is timed.

A ratio goal is judged on alternating rounds; a round whose reference moved, or
during which the rest of the machine was busy, is re-run and not used; short of
usable rounds the goal is UNKNOWN, which exits non-zero (decision 0073).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from bench.common import EXIT_FAILED, EXIT_UNKNOWN, Goal, Verdict, exit_code
from bench.rounds import (
    Measured,
    Reading,
    Round,
    Rule,
    alternate,
    enough,
    judge,
    judging_rule,
    kept_data,
    run_rounds,
    usable,
)

CALM = Reading(others_cores=0.1, cores=2, load=1.0)
BUSY = Reading(others_cores=1.6, cores=2, load=5.2)


def rounds(*pairs: tuple[float, float], machine: Reading = CALM) -> list[Round[None]]:
    """Rounds of (ratio, reference) on one machine reading."""
    return [Round(ratio, reference, None, machine) for ratio, reference in pairs]


def test_rounds_alternate_which_side_goes_first() -> None:
    ran: list[str] = []

    def side(name: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(name)
            return name

        return run

    results = [alternate(i, side("R"), side("H")) for i in range(4)]
    assert ran == ["R", "H", "H", "R", "R", "H", "H", "R"]
    assert results == [("R", "H")] * 4  # (reference, harness) whatever the order


def test_a_round_whose_reference_moved_past_the_bound_is_not_used() -> None:
    found = rounds((1.0, 100), (1.02, 104), (0.6, 115), (0.98, 96))
    kept = usable(found, Rule(3))
    assert [r.reference for r in kept] == [100, 104, 96]  # 115 is 12% from the median of 102


def test_busy_rounds_are_not_used_and_do_not_move_the_yardstick() -> None:
    calm = rounds((1.0, 100), (1.0, 102), (1.0, 98))
    busy = rounds((0.5, 40), (0.5, 45), (0.5, 41), (0.5, 39), machine=BUSY)
    # With the busy rounds in it, the median reference would be 45 and the calm rounds "moved".
    assert usable([*busy, *calm], Rule(3)) == calm


def test_the_busy_bound_is_a_share_of_the_machine_s_cores() -> None:
    half_of_eight = Reading(others_cores=1.6, cores=8, load=3.0)
    assert usable(rounds((1.0, 100), machine=half_of_eight), Rule(1)) != []
    assert usable(rounds((1.0, 100), machine=BUSY), Rule(1)) == []


def test_a_goal_has_enough_rounds_when_it_has_its_usable_ones_or_has_run_its_limit() -> None:
    rule = Rule(3, reruns=2)
    assert not enough(rounds((1.0, 100), (1.0, 100)), rule)
    assert enough(rounds((1.0, 100), (1.0, 101), (1.0, 99)), rule)
    assert not enough(rounds((1.0, 100), (1.0, 101), (1.0, 150)), rule)  # one moved: re-run
    assert enough(rounds((1.0, 100), (1.0, 101), (1.0, 150), (1.0, 160), (1.0, 170)), rule)  # limit 5
    assert Rule(3).limit == 6  # by default as many re-runs as rounds


def fake_reader(
    readings: Iterator[Reading],
) -> Callable[[Callable[[], Measured[int]]], tuple[Measured[int], Reading]]:
    """A machine reader that runs the round and returns the next reading given, as if measured."""

    def read(work: Callable[[], Measured[int]]) -> tuple[Measured[int], Reading]:
        return work(), next(readings)

    return read


def test_a_moved_round_is_re_run_and_not_averaged_in() -> None:
    references = iter([100.0, 101.0, 160.0, 99.0])
    ratios = iter([1.0, 1.0, 0.5, 1.0])
    calls: list[int] = []

    def one(index: int) -> Measured[int]:
        calls.append(index)
        return next(ratios), next(references), index

    found = run_rounds(Rule(3), one, fake_reader(iter([CALM] * 4)))
    assert calls == [0, 1, 2, 3]  # the fourth replaces the third
    assert kept_data(found, Rule(3)) == [0, 1, 3]
    goal = judge("g", found, Rule(3), 0.9, "×", higher_is_better=True)
    assert goal.measured == 1.0  # the moved round's 0.5 is not in the median
    assert goal.verdict is Verdict.PASS
    assert "1 re-run" in goal.spread


def test_a_busy_machine_makes_the_goal_unknown_not_failed() -> None:
    readings = iter([CALM, BUSY, BUSY, BUSY, BUSY, BUSY])

    def one(index: int) -> Measured[int]:
        return 0.6, 100.0, index  # a ratio that would fail the goal

    found = run_rounds(Rule(3), one, fake_reader(readings))
    assert len(found) == 6  # 3 rounds and the 3 re-runs the rule allows, then it stops
    goal = judge("driver vs wrk", found, Rule(3), 0.9, "×", higher_is_better=True)
    assert goal.verdict is Verdict.UNKNOWN
    line = goal.line()
    assert line.startswith("UNKNOWN  driver vs wrk: 0.6×")
    assert "machine too busy to judge: 1 of 6 rounds usable, 3 needed" in line
    assert "others took up to 1.6 of 2 cores" in line
    assert "load 5.2" in line


def test_an_unknown_is_never_a_pass_even_when_the_figure_would_pass() -> None:
    found = rounds((1.2, 100), (1.1, 62), (1.3, 138))  # each 38% from the others' median
    goal = judge("g", found, Rule(3, reruns=0), 0.9, "×", higher_is_better=True)
    assert goal.measured > goal.limit
    assert goal.verdict is Verdict.UNKNOWN
    assert "reference moved up to 38%" in goal.unknown


def test_a_quiet_machine_still_fails_a_slow_harness() -> None:
    goal = judge("g", rounds((1.6, 2.2), (1.7, 2.3), (1.65, 2.25)), Rule(3), 1.5)
    assert goal.verdict is Verdict.FAIL
    assert goal.line().startswith("FAIL  g: 1.65×")
    assert "median of 3 alternating, 1.6-1.7×, reference ±2%" in goal.spread


@pytest.mark.parametrize(
    ("verdicts", "code"),
    [
        ([Verdict.PASS, Verdict.PASS], 0),
        ([Verdict.PASS, Verdict.UNKNOWN], EXIT_UNKNOWN),
        ([Verdict.UNKNOWN, Verdict.FAIL, Verdict.PASS], EXIT_FAILED),
        ([Verdict.FAIL], EXIT_FAILED),
    ],
)
def test_the_exit_code_fails_on_a_failure_first_and_on_an_unknown_next(
    verdicts: list[Verdict], code: int
) -> None:
    goals = [
        Goal("g", 2.0 if v is Verdict.FAIL else 1.0, 1.5, unknown="busy" if v is Verdict.UNKNOWN else "")
        for v in verdicts
    ]
    assert [g.verdict for g in goals] == verdicts
    assert exit_code(goals) == code
    assert EXIT_UNKNOWN not in (0, EXIT_FAILED, 2)  # 2 is argparse's bad usage


def test_benchmarks_md_states_the_bounds() -> None:
    text = " ".join(judging_rule(Rule(3, reruns=2)).split())
    assert "more than 25% of the machine's CPU" in text
    assert "moved more than 10% from the median reference" in text
    assert "up to 2 extra rounds replace such rounds" in text
    assert "UNKNOWN" in text
