"""The auditor's fold: verdicts and attribution from synthetic histories (pure, no I/O)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import CRASH_WINDOW_S, fold_history, judge_fold
from harness.errors import HistoryError
from harness.scenario import Scenario, parse_scenario


class History:
    """Builds a history event by event, the way the driver and supervisor would."""

    def __init__(self, intents: int) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0
        self.next_id = 1
        self.add("run_started", run_id="r", intents=intents, namespace="ns")

    def add(self, type_: str, **fields: Any) -> None:
        self.events.append({"seq": len(self.events), "t": round(self.t, 6), "type": type_, **fields})

    def tick(self, dt: float = 0.01) -> None:
        self.t += dt

    def start(self, intent: int) -> None:
        self.add("intent_started", intent=intent, marker=f"ns-m{intent}", key=f"k{intent}")

    def attempt(self, intent: int, attempt: int = 1) -> int:
        rid = self.next_id
        self.next_id += 1
        self.add("attempt_started", intent=intent, attempt=attempt, id=rid, key=f"k{intent}")
        return rid

    def end(
        self, intent: int, rid: int, outcome: str = "ok", detail: str | None = None, attempt: int = 1
    ) -> None:
        fields = {"detail": detail} if detail else {}
        self.add("attempt_ended", intent=intent, attempt=attempt, id=rid, outcome=outcome, **fields)

    def finish(self, intent: int, status: str = "ok", attempts: int = 1) -> None:
        self.add("intent_ended", intent=intent, status=status, attempts=attempts)


@pytest.fixture
def scenario(scenario_data: dict[str, Any]) -> Scenario:
    return parse_scenario(scenario_data, overrides=["gate.max_duplicates=0"])


def audit(h: History, effects: dict[str, int], scenario: Scenario) -> Any:
    return judge_fold(fold_history([h.events]), Counter(effects), scenario, Path("run"))


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
    v = result.summary["verdicts"]
    assert (v["exactly_once"], v["duplicate"], v["lost"]) == (2, 1, 1)
    assert result.summary["rates"]["duplicate"]["rate"] == 0.25
    assert result.summary["effects"] == {"total": 8, "foreign": 4, "foreign_examples": ["other-run"]}
    assert result.summary["status"] == "completed"
    assert not result.gate_passed
    assert result.summary["gate"]["violations"] == ["1 duplicates > max_duplicates 0"]


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
    assert result.summary["faults"]["kill"] == 1
    assert result.summary["faults"]["crashes"] == 0  # the exit is explained by the kill


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
    assert result.summary["faults"]["crashes"] == 1
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
    assert result.summary["status"] == "unfinished"
    assert result.summary["intents"] == {"planned": 3, "started": 2, "ended": 1}
    assert result.summary["attempts"]["open_at_end"] == 1
    assert dict(zip(result.intents["intent"], result.intents["verdict"], strict=True)) == {
        0: "exactly_once",
        1: "incomplete",
    }


def test_completion_without_start_is_an_error() -> None:
    h = History(intents=1)
    h.start(0)
    h.end(0, rid=99)
    with pytest.raises(HistoryError, match="request id 99 without its attempt_started"):
        fold_history([h.events])


def test_intent_end_without_start_is_an_error() -> None:
    h = History(intents=1)
    h.finish(0)
    with pytest.raises(HistoryError, match="intent_ended for intent 0 without its intent_started"):
        fold_history([h.events])


def test_history_grows_past_the_planned_size(scenario: Scenario) -> None:
    h = History(intents=0)  # an older or foreign history without the planned count
    for i in range(5):
        h.start(i)
        rid = h.attempt(i)
        h.end(i, rid)
        h.finish(i)
    result = audit(h, {f"ns-m{i}": 1 for i in range(5)}, scenario)
    assert result.summary["verdicts"]["exactly_once"] == 5


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
    by_fault = result.summary["by_fault"]
    assert list(by_fault) == ["sever_response", "stall"]
    assert by_fault["stall"]["intents_hit"] == 1
    assert by_fault["stall"]["duplicate"]["count"] == 1
    assert result.summary["faults"]["delay"] == 1
