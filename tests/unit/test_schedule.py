"""The fault schedule is a pure function of scenario and seed."""

from __future__ import annotations

from typing import Any

import pytest

from harness.faultkinds.kill import MAX_TIMED_FAULTS
from harness.faults.schedule import build_schedule
from harness.scenario import parse_scenario


def schedule(data: dict[str, Any], *overrides: str) -> list[Any]:
    return build_schedule(parse_scenario(data, overrides=overrides))


def test_same_seed_same_schedule(scenario_data: dict[str, Any]) -> None:
    assert schedule(scenario_data) == schedule(scenario_data)
    assert schedule(scenario_data) != schedule(scenario_data, "seed=8")


def test_counted_kills_are_stratified_inside_the_window(scenario_data: dict[str, Any]) -> None:
    faults = schedule(scenario_data, "workload.intents=1000", "faults.kill.count=8")
    assert len(faults) == 8
    points = [f.after_intents for f in faults]
    assert points == sorted(points)
    # One kill in each eighth of the window [50, 950).
    for k, p in enumerate(points):
        assert 50 + 112.5 * k <= p < 50 + 112.5 * (k + 1)


def test_jitter_is_bounded(scenario_data: dict[str, Any]) -> None:
    faults = schedule(scenario_data, "faults.kill.jitter_s=0.25")
    assert all(0 <= f.delay_s <= 0.25 for f in faults)
    assert len({f.delay_s for f in faults}) > 1


def test_timed_kills_stop_at_the_run_bound(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"]["kill"] = {"mean_interval_s": 2.0}
    faults = schedule(scenario_data, "workload.max_duration_s=100")
    times = [f.at_s for f in faults]
    assert all(t is not None and 0 < t < 100 for t in times)
    assert 25 <= len(faults) <= 80  # ~50 expected; a Poisson count this far off would be a bug
    assert len(faults) <= MAX_TIMED_FAULTS


def test_no_faults(scenario_data: dict[str, Any]) -> None:
    del scenario_data["faults"]
    assert schedule(scenario_data) == []


@pytest.mark.parametrize("count", [0, 1, 3])
def test_small_counts(scenario_data: dict[str, Any], count: int) -> None:
    assert len(schedule(scenario_data, f"faults.kill.count={count}")) == count
