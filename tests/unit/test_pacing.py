"""Pacing decisions: where a waiting fault holds dispatch, when a held fault strikes (an injectable
clock, no sleeping), the estimate for preflight, and the report's line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harness.faults.injector import Injector
from harness.faults.pacing import LANDING_BOUND_S, Landing, advise, estimate, hold_points
from harness.faults.schedule import build_schedule
from harness.history import HistoryWriter
from harness.report.text import facts
from harness.scenario import HoldDispatch, Scenario, load_scenario, parse_scenario
from tests.helpers.paths import ROOT
from tests.unit.histories import History, audit


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- where a waiting fault holds dispatch


def test_true_holds_at_the_trigger_false_never() -> None:
    faults: list[tuple[int, HoldDispatch]] = [(10, True), (50, False), (90, True)]
    assert hold_points(faults, 100, 8) == [10, None, 90]


def test_auto_holds_at_the_next_trigger_or_before_the_end() -> None:
    faults: list[tuple[int, HoldDispatch]] = [(10, "auto"), (50, "auto"), (90, "auto")]
    # The last one: concurrency intents before the end (enough left to land on a full load).
    assert hold_points(faults, 100, 8) == [50, 90, 92]


def test_auto_never_holds_before_its_own_trigger() -> None:
    # A trigger inside the last `concurrency` intents, and two kills at one point.
    faults: list[tuple[int, HoldDispatch]] = [(40, "auto"), (40, "auto"), (97, "auto")]
    assert hold_points(faults, 100, 8) == [40, 92, 97]


def test_auto_without_a_known_end_holds_only_at_the_next_trigger() -> None:
    faults: list[tuple[int, HoldDispatch]] = [(10, "auto"), (20, "auto")]
    assert hold_points(faults, None, 8) == [20, None]


# -- when a held fault strikes


def test_landing_strikes_at_once_on_a_full_load() -> None:
    clock = Clock()
    landing = Landing(concurrency=8, clock=clock)
    assert landing.ready(in_flight=8, outstanding=500)
    assert not landing.ready(in_flight=7, outstanding=500)


def test_landing_wants_no_more_than_the_intents_left() -> None:
    landing = Landing(concurrency=8, clock=Clock())
    assert landing.wanted(3) == 3
    assert landing.ready(in_flight=3, outstanding=3)
    assert landing.wanted(0) == 1  # never a kill of an idle server on purpose


def test_landing_settles_for_one_in_flight_after_its_bound() -> None:
    clock = Clock()
    landing = Landing(concurrency=8, clock=clock)
    clock.now += LANDING_BOUND_S - 0.001
    assert not landing.ready(in_flight=2, outstanding=100)
    clock.now += 0.001
    assert landing.ready(in_flight=2, outstanding=100)
    assert not landing.ready(in_flight=0, outstanding=100)
    assert landing.waited_s == pytest.approx(LANDING_BOUND_S)


# -- the gate: a run whose kills come in time is not touched


def _gate_closes_at(scenario: Scenario, tmp_path: Path, upto: int) -> int | None:
    """Dispatch intents one by one while the first fault waits (its pod never comes): when the gate
    closes, or None."""
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        injector = Injector(
            build_schedule(scenario),
            [],
            history,
            workload_size=scenario.workload.intents,
            concurrency=scenario.workload.concurrency,
        )
        for dispatched in range(1, upto + 1):
            injector.on_dispatch(dispatched)
            if not injector.dispatch_gate.is_set():
                return dispatched
    return None


@pytest.mark.parametrize("hold", [False, "auto"])
def test_the_article_scenario_plans_and_holds_the_same_until_a_kill_is_late(
    hold: HoldDispatch, tmp_path: Path
) -> None:
    article = load_scenario(ROOT / "scenarios" / "pod-kill.yaml")
    assert article.faults.kill is not None
    assert article.faults.kill.hold_dispatch == "auto"  # the default
    scenario = load_scenario(
        ROOT / "scenarios" / "pod-kill.yaml", [f"faults.kill.hold_dispatch={str(hold).lower()}"]
    )
    schedule = build_schedule(scenario)
    unpaced = build_schedule(
        load_scenario(ROOT / "scenarios" / "pod-kill.yaml", ["faults.kill.hold_dispatch=false"])
    )
    assert [(f.after_intents, f.delay_s, f.victim) for f in schedule] == [
        (f.after_intents, f.delay_s, f.victim) for f in unpaced
    ]
    first, second = schedule[0].after_intents, schedule[1].after_intents
    assert first is not None
    assert second is not None
    # The first kill is due at its trigger; up to the next one, dispatching goes on whatever the mode.
    closes = _gate_closes_at(scenario, tmp_path, second)
    assert closes == (second if hold == "auto" else None)


def test_hold_true_closes_the_gate_at_the_trigger(scenario_data: dict[str, Any], tmp_path: Path) -> None:
    scenario_data["faults"]["kill"] = {"count": 2, "hold_dispatch": True}
    scenario = parse_scenario(scenario_data)
    first = build_schedule(scenario)[0].after_intents
    assert _gate_closes_at(scenario, tmp_path, 100) == first


class Load:
    """The driver's live counters, moved by the test."""

    def __init__(self, planned: int) -> None:
        self.planned, self.finished, self.in_flight = planned, 0, 0


def test_a_landing_lets_in_its_load_but_never_the_last_intent(
    scenario_data: dict[str, Any], tmp_path: Path
) -> None:
    # A held kill re-opens dispatching to land on work. A fast server (or a slow event loop) used to
    # let the driver dispatch and finish every intent left before the fault woke: the run ended
    # without it ("fault_missed ... while it waited for work in flight").
    scenario_data["workload"]["intents"] = 20
    scenario_data["faults"]["kill"] = {"count": 2, "hold_dispatch": True}
    scenario = parse_scenario(scenario_data)

    async def land() -> tuple[int, dict[str, Any]]:
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            injector = Injector(build_schedule(scenario), [], history, workload_size=20, concurrency=4)
            load = injector.load = Load(planned=20)
            fault = injector._progress_faults[0]
            trigger = fault.after_intents
            assert trigger is not None
            for dispatched in range(1, trigger + 1):
                injector.on_dispatch(dispatched)
            load.finished = trigger  # the drained work
            assert not injector.dispatch_gate.is_set()
            landing = asyncio.ensure_future(injector._land(fault))
            await asyncio.sleep(0)
            assert injector.dispatch_gate.is_set()  # re-opened to land on work
            dispatched = trigger
            while injector.dispatch_gate.is_set() and dispatched < 20:  # a driver that never waits
                dispatched += 1
                injector.on_dispatch(dispatched)
            load.finished = dispatched  # and they all ended before the fault looked again
            paced = await asyncio.wait_for(landing, timeout=5)
            return dispatched - trigger, dict(paced)

    let_in, paced = asyncio.run(land())
    assert let_in == 4  # the load it waits for: one intent per worker
    assert paced["dispatched"] < 20  # the workload cannot end before the kill strikes


def test_a_window_that_all_ended_unseen_is_followed_by_another_and_the_fault_lands_on_it(
    scenario_data: dict[str, Any], tmp_path: Path
) -> None:
    """A fast server answers a whole window before the fault looks: it once struck then, on an idle
    server (in flight 0: it broke no call). It opens another window, and strikes on what that one put
    in flight, the moment the window is all out."""
    scenario_data["workload"]["intents"] = 40
    scenario_data["faults"]["kill"] = {"count": 1, "hold_dispatch": True}
    scenario = parse_scenario(scenario_data)

    async def land() -> dict[str, Any]:
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            injector = Injector(build_schedule(scenario), [], history, workload_size=40, concurrency=4)
            load = injector.load = Load(planned=40)
            fault = injector._progress_faults[0]
            assert fault.after_intents is not None
            dispatched = fault.after_intents
            for n in range(1, dispatched + 1):
                injector.on_dispatch(n)
            load.finished = dispatched
            landing = asyncio.ensure_future(injector._land(fault))
            for window in range(2):
                while not injector.dispatch_gate.is_set() and not landing.done():
                    await asyncio.sleep(0.001)
                while injector.dispatch_gate.is_set() and not landing.done():
                    dispatched += 1
                    load.in_flight += 1
                    injector.on_dispatch(dispatched)
                if window == 0:  # the first window, answered before the fault looked
                    load.finished, load.in_flight = dispatched, 0
                await asyncio.sleep(0)
            return dict(await asyncio.wait_for(landing, timeout=5))

    paced = asyncio.run(land())
    assert paced["in_flight"] == 4, paced


# -- the estimate


def test_estimate_of_a_fast_server_needs_pacing() -> None:
    fit = estimate(
        intents=2000,
        concurrency=8,
        call_s=0.0005,
        startup_s=1.0,
        restart_delay_s=0.5,
        kills=4,
        min_uptime_s=0.2,
    )
    assert fit.workload_s == pytest.approx(0.125)
    assert fit.kills_s == pytest.approx(0.8)
    assert fit.downtime_s == pytest.approx(6.0)
    assert fit.intents_unpaced == 14223  # 4 x 0.2 s x 16,000 intents/s over 90% of the workload
    assert fit.paced


def test_estimate_of_the_article_needs_none() -> None:
    fit = estimate(
        intents=2700,
        concurrency=16,
        call_s=0.1,
        startup_s=1.0,
        restart_delay_s=0.5,
        kills=8,
        min_uptime_s=1.0,
    )
    assert fit.intents_unpaced == 1423
    assert not fit.paced


def test_advice_names_the_way_out_when_kills_would_be_missed(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"]["kill"] = {"count": 4, "min_uptime_s": 0.2, "hold_dispatch": False}
    advice = advise(parse_scenario(scenario_data), call_s=0.0005, startup_s=1.0)
    assert advice is not None
    assert "a call took 0.5 ms and the server started in 1.0s" in advice
    assert "set faults.kill.hold_dispatch: auto, or workload.intents: 7112" in advice
    scenario_data["faults"]["kill"]["hold_dispatch"] = "auto"
    advice = advise(parse_scenario(scenario_data), call_s=0.0005, startup_s=1.0)
    assert advice is not None
    assert "dispatch may be held for them" in advice
    del scenario_data["faults"]
    assert advise(parse_scenario(scenario_data), call_s=0.0005, startup_s=1.0) is None


# -- the report


def test_the_report_says_how_the_faults_were_paced(scenario_data: dict[str, Any]) -> None:
    h = History(intents=3)
    for i, paced in enumerate([{}, {"held_s": 0.25}, {"held_s": 0.5}]):
        h.start(i)
        rid = h.attempt(i)
        h.add("fault", fault="kill", pod="pod-0", pid=1, in_flight=3 - i, dispatched=i + 1, **paced)
        h.end(i, rid, "transport_error", "closed_before_response")
        h.add("pod_exited", pod="pod-0", pid=1, returncode=-9)
        rid = h.attempt(i, attempt=2)
        h.end(i, rid, attempt=2)
        h.finish(i, attempts=2)
    s = audit(h, {"ns-m0": 1, "ns-m1": 1, "ns-m2": 1}, parse_scenario(scenario_data)).summary
    assert s.pacing is not None
    assert (s.pacing.faults, s.pacing.held, s.pacing.held_s, s.pacing.least_in_flight) == (3, 2, 0.75, 1)
    assert "pod faults paced: 2 of 3 held dispatch, 0.8s in all; in flight at each: 1 or more" in facts(s)
    assert s.to_json()["pacing"] == {"faults": 3, "held": 2, "held_s": 0.75, "least_in_flight": 1}


def test_a_history_from_before_pacing_has_no_pacing_line(scenario_data: dict[str, Any]) -> None:
    h = History(intents=1)
    h.run_intent(0)
    s = audit(h, {"ns-m0": 1}, parse_scenario(scenario_data)).summary
    assert s.pacing is None
    assert not any(line.startswith("pod faults paced") for line in facts(s))
