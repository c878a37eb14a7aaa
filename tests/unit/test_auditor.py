"""The auditor on synthetic histories: the fold joined with effects, verdicts, causes, summary, gate.

Pure, no I/O. The fold alone, accumulator by accumulator, is in test_fold.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.audit.fold import CRASH_WINDOW_S
from harness.history import FaultKind, Outcome, RunStatus, Verdict
from harness.scenario import Scenario, parse_scenario
from tests.helpers.scenarios import fault_row
from tests.unit.histories import History, audit


@pytest.fixture
def scenario(scenario_data: dict[str, Any]) -> Scenario:
    return parse_scenario(scenario_data, overrides=["gate.max_duplicates=0"])


def test_verdicts_and_rates(scenario: Scenario) -> None:
    h = History(intents=4)
    for i in range(4):
        h.start(i)
        rid = h.attempt(i)
        h.tick()
        h.end(i, rid)
        h.finish(i)
    h.add("run_ended", status="completed")
    result = audit(h, {"ns-m0": 1, "ns-m1": 2, "ns-m3": 1, "other-run": 4}, scenario)
    s = result.summary
    v = s.verdicts
    assert (v[Verdict.EXACTLY_ONCE], v[Verdict.DUPLICATE], v[Verdict.LOST]) == (2, 1, 1)
    assert s.duplicates.value == 0.25
    assert (s.effects.total, s.effects.foreign, s.effects.foreign_examples) == (8, 4, ["other-run"])
    assert s.status is RunStatus.COMPLETED
    assert not result.gate_passed
    # A threshold on duplicates replaces zero tolerance for duplicates only: the lost intent fails too.
    assert s.gate.violations == [
        "1 lost (the default gate fails on any lost)",
        "1 duplicates > max_duplicates 0",
    ]
    assert s.to_json()["rates"]["duplicate"]["rate"] == 0.25


def test_kill_in_flight_is_attributed(scenario: Scenario) -> None:
    h = History(intents=2)
    h.start(0)
    h.start(1)
    r0 = h.attempt(0)
    h.tick()
    h.end(0, r0)  # ended before the kill: not hit
    h.finish(0)
    r1 = h.attempt(1)
    h.tick()
    h.add("fault", fault="kill", pod="pod-0", pid=1)
    h.end(1, r1, "transport_error", "closed_before_response")
    h.add("pod_exited", pod="pod-0", pid=1, returncode=-9)
    r2 = h.attempt(1, attempt=2)
    h.end(1, r2, attempt=2)
    h.finish(1, attempts=2)
    result = audit(h, {"ns-m0": 1, "ns-m1": 2}, scenario)
    rows = result.intents.set_index("intent")
    assert rows.loc[0, "attempts_hit_by_pod_fault"] == 0
    assert rows.loc[1, "attempts_hit_by_pod_fault"] == 1
    assert rows.loc[1, "cause"] == "kill"
    assert result.summary.injected(FaultKind.KILL) == 1
    assert result.summary.pods.crashes == 0  # the exit is explained by the kill


def test_crash_without_kill_is_attributed_within_the_window(scenario: Scenario) -> None:
    h = History(intents=2)
    h.start(0)
    h.start(1)
    r_old = h.attempt(0)
    h.end(0, r_old, "transport_error", "closed_before_response")  # long before the crash
    h.tick(CRASH_WINDOW_S * 3)
    r_new = h.attempt(1)
    h.tick()
    h.end(1, r_new, "transport_error", "closed_mid_response")  # the crash broke this one
    h.tick(0.02)
    h.add("pod_exited", pod="pod-0", pid=1, returncode=-9)
    result = audit(h, {}, scenario)
    rows = result.intents.set_index("intent")
    assert rows.loc[0, "attempts_hit_by_pod_fault"] == 0
    assert rows.loc[1, "attempts_hit_by_pod_fault"] == 1
    assert result.summary.pods.crashes == 1
    assert set(rows["verdict"]) == {"incomplete"}


def test_partial_history_marks_open_intents_incomplete(scenario: Scenario) -> None:
    h = History(intents=3)
    h.start(0)
    rid = h.attempt(0)
    h.end(0, rid)
    h.finish(0)
    h.start(1)
    h.attempt(1)  # never ends: the harness died here
    result = audit(h, {"ns-m0": 1, "ns-m1": 1}, scenario)
    s = result.summary
    assert s.status is RunStatus.UNFINISHED
    assert (s.intents.planned, s.intents.started, s.intents.ended) == (3, 2, 1)
    assert s.attempts.open_at_end == 1
    assert dict(zip(result.intents["intent"], result.intents["verdict"], strict=True)) == {
        0: "exactly_once",
        1: "incomplete",
    }


def test_history_grows_past_the_planned_size(scenario: Scenario) -> None:
    h = History(intents=0)  # an older or foreign history without the planned count
    for i in range(5):
        h.start(i)
        rid = h.attempt(i)
        h.end(i, rid)
        h.finish(i)
    result = audit(h, {f"ns-m{i}": 1 for i in range(5)}, scenario)
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 5


def test_proxy_faults_are_pinned_on_their_intent(scenario: Scenario) -> None:
    h = History(intents=3)
    for i in range(3):
        h.start(i)
    r0 = h.attempt(0)
    h.add("fault", fault="sever_response", id=r0, intent=0, attempt=1, server_done=True)
    h.end(0, r0, "transport_error", "closed_before_response")
    r0b = h.attempt(0, attempt=2)
    h.end(0, r0b, attempt=2)
    h.finish(0, attempts=2)
    r1 = h.attempt(1)
    h.add("fault", fault="stall", id=r1, intent=1, attempt=1)
    h.end(1, r1, "timeout", "no_response")
    r1b = h.attempt(1, attempt=2)
    h.end(1, r1b, attempt=2)
    h.finish(1, attempts=2)
    r2 = h.attempt(2)
    h.end(2, r2)
    h.finish(2)
    h.add("fault", fault="delay", id=999)  # names no attempt in flight: ignored, still counted
    result = audit(h, {"ns-m0": 2, "ns-m1": 2, "ns-m2": 1}, scenario)
    rows = result.intents.set_index("intent")
    assert (rows.loc[0, "faults"], rows.loc[0, "cause"]) == ("sever_response", "sever_response")
    assert (rows.loc[1, "faults"], rows.loc[1, "cause"]) == ("stall", "stall")
    assert (rows.loc[2, "faults"], rows.loc[2, "cause"]) == ("", "")
    s = result.summary
    assert [row.kind for row in s.faults] == [FaultKind.SEVER_RESPONSE, FaultKind.STALL, FaultKind.DELAY]
    assert fault_row(s, FaultKind.STALL).intents_hit == 1
    assert fault_row(s, FaultKind.STALL).duplicate.count == 1
    assert fault_row(s, FaultKind.DELAY).injected == 1
    assert fault_row(s, FaultKind.DELAY).planned is None  # by rule


def test_an_intent_is_counted_once_across_its_rounds(scenario: Scenario) -> None:
    # A question, its answer killed in flight, the answer retried: three attempts, one intent.
    h = History(intents=1)
    h.start(0)
    asked = h.attempt(0)
    h.tick()
    h.end(0, asked, "input_required")
    answer = h.attempt(0, attempt=2)
    h.events[-1]["round"] = 2
    h.tick()
    h.add("fault", fault="kill", pod="pod-0", pid=1)
    h.end(0, answer, "transport_error", "closed_before_response", attempt=2)
    h.add("pod_exited", pod="pod-0", pid=1, returncode=-9)
    again = h.attempt(0, attempt=3)
    h.events[-1]["round"] = 2
    h.end(0, again, attempt=3)
    h.finish(0, attempts=3)
    h.add("run_ended", status="completed")
    result = audit(h, {"ns-m0": 1}, scenario)
    s = result.summary
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 1
    assert (s.attempts.total, s.attempts.retries) == (3, 1)  # the answer is a round, not a retry
    assert s.attempts.by_outcome[Outcome.INPUT_REQUIRED] == 1
    row = result.intents.set_index("intent").loc[0]
    assert (row["n_input_required"], row["attempts_hit_by_pod_fault"], row["cause"]) == (1, 1, "")
