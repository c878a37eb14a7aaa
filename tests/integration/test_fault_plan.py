"""Planned faults against real pods: both trigger clocks, held dispatching, and faults that never happened."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.faults.injector import Injector
from harness.faults.schedule import build_schedule
from harness.history import EventType, FaultKind, HistoryWriter, read_history
from harness.loopback import free_port
from harness.pods.factory import make_pod
from harness.pods.ready import HttpReady
from harness.pods.supervisor import Supervisor
from harness.scenario import parse_scenario
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]
FAST = {"INVOICES_PRE_COMMIT_MS": "0", "INVOICES_POST_COMMIT_MS": "0"}


def test_timed_kills_do_not_wait_for_a_pause_on_the_progress_clock(tmp_path: Path) -> None:
    # A pause that waits for workload progress (which never comes here: nothing is dispatched)
    # and kills on the time clock. One loop for both clocks ran the kills only after the pause.
    data = invoice_scenario(intents=1000)
    data["target"]["command"] = ["{python}", str(ROOT / "targets" / "noop" / "server.py")]
    data["faults"] = {"pause": {"count": 1, "duration_s": 0.2}, "kill": {"mean_interval_s": 0.4}}
    scenario = parse_scenario(data)
    schedule = build_schedule(scenario)
    (tmp_path / "pods").mkdir()
    port = free_port()

    async def main() -> None:
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            pod = make_pod(scenario.target, tmp_path, port=port, name="pod-0", urls={})
            supervisor = Supervisor(
                pod,
                HttpReady(f"http://127.0.0.1:{port}/mcp", protocol="2026-07-28", headers={}),
                history,
                ready_timeout_s=30,
                restart_delay_s=0.05,
                max_restarts=100,
                stop_timeout_s=5,
            )
            await supervisor.start()
            supervise = asyncio.create_task(supervisor.supervise())
            injector = Injector(schedule, [supervisor], history)
            injecting = asyncio.create_task(injector.run())
            try:
                # Until the first fault, whatever the pod's start-up took: with one loop for both
                # clocks none ever comes (the pause waits for progress), and the deadline fails it.
                deadline = history.now() + 30
                while not faults(tmp_path) and history.now() < deadline:
                    await asyncio.sleep(0.05)
            finally:
                injecting.cancel()
                await asyncio.gather(injecting, return_exceptions=True)
                await supervisor.stop()
                with contextlib.suppress(Exception):
                    await supervise

    asyncio.run(main())
    seen = faults(tmp_path)
    assert [e["fault"] for e in seen][:1] == ["kill"]
    assert all(e["fault"] == "kill" and e["counted"] is False for e in seen)


def faults(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_history(run_dir / "history.jsonl") if e["type"] == EventType.FAULT]


def test_a_kills_exit_seen_only_as_the_run_stops_is_the_kills(tmp_path: Path) -> None:
    # A Kubernetes pod's exit is polled: the last kill's victim may be seen gone only once the run
    # is stopping. Its exit is still the kill's (pod_exited), not the stop's. Here the stop begins
    # before the supervisor can see the exit at all.
    data = invoice_scenario()
    data["target"]["command"] = ["{python}", str(ROOT / "targets" / "noop" / "server.py")]
    scenario = parse_scenario(data)
    (tmp_path / "pods").mkdir()
    port = free_port()

    async def main() -> None:
        with HistoryWriter(tmp_path / "history.jsonl") as history:
            pod = make_pod(scenario.target, tmp_path, port=port, name="pod-0", urls={})
            ready = HttpReady(f"http://127.0.0.1:{port}/mcp", protocol="2026-07-28", headers={})
            supervisor = Supervisor(
                pod,
                ready,
                history,
                ready_timeout_s=30,
                restart_delay_s=0.05,
                max_restarts=1,
                stop_timeout_s=5,
            )
            await supervisor.start()
            supervise = asyncio.create_task(supervisor.supervise())
            await asyncio.sleep(0)  # supervise() waits for the pod's exit
            assert supervisor.kill(trigger="test")
            await supervisor.stop()  # no await between the kill and the stop: the exit is seen after
            await supervise

    asyncio.run(main())
    ends = [e["type"] for e in read_history(tmp_path / "history.jsonl") if e["type"].startswith("pod_")]
    assert ends == ["pod_started", "pod_ready", "pod_exited"]


def test_faults_that_never_happen_make_the_run_inconclusive(run: Run) -> None:
    # The workload (a fast target) is over long before the pod has been up for min_uptime_s, and
    # nothing holds it back.
    data = invoice_scenario(
        intents=200, concurrency=8, env=FAST, kills={"count": 4, "min_uptime_s": 30, "hold_dispatch": False}
    )
    data["gate"] = {"fail_inconclusive": True}
    result = run(data)
    s = result.summary
    kill = fault_row(s, FaultKind.KILL)
    assert (kill.planned, kill.injected) == (4, 0)
    assert not s.conclusive
    assert s.inconclusive[0].startswith("4 of 4 planned kills did not happen")
    assert "min_uptime_s=30" in s.inconclusive[0]
    assert len(s.missed_faults) == 4
    assert not result.gate_passed
    report = (result.run_dir / "report.md").read_text()
    assert "0 of 4 planned kills" in report
    assert "INCONCLUSIVE" in report


def kills_as_struck(run_dir: Path) -> list[dict[str, Any]]:
    """Each kill event, with ``started`` (intents started before it) and ``hit`` (intents with an
    attempt in flight across it: started before, ended after, as the audit attributes them)."""
    kills: list[dict[str, Any]] = []
    open_attempts: dict[int, int] = {}
    started = 0
    for event in read_history(run_dir / "history.jsonl"):
        if event["type"] == EventType.INTENT_STARTED:
            started += 1
        elif event["type"] == EventType.ATTEMPT_STARTED:
            open_attempts[event["id"]] = event["intent"]
        elif event["type"] == EventType.ATTEMPT_ENDED:
            open_attempts.pop(event["id"], None)
        elif event["type"] == EventType.FAULT and event["fault"] == "kill":
            kills.append({**event, "started": started, "hit": len(set(open_attempts.values()))})
    return kills


def test_held_dispatch_lands_every_kill_on_work_right_after_its_intent(run: Run) -> None:
    data = invoice_scenario(
        intents=200, concurrency=8, env=FAST, kills={"count": 4, "min_uptime_s": 0.2, "hold_dispatch": True}
    )
    result = run(data)
    s = result.summary
    kill = fault_row(s, FaultKind.KILL)
    assert (kill.planned, kill.injected) == (4, 4)
    assert s.conclusive
    for event in kills_as_struck(result.run_dir):
        trigger = int(event["trigger"].split()[2])
        # Held from its trigger on; landing re-opens dispatching for at most a full load.
        assert trigger <= event["started"] <= trigger + 8
        assert event["dispatched"] == event["started"]
        assert event["in_flight"] >= 1
        assert event["hit"] >= 1
        assert "held_s" in event
    assert s.pacing is not None
    assert (s.pacing.faults, s.pacing.held) == (4, 4)
    assert s.pacing.least_in_flight >= 1


def test_auto_pacing_gets_every_kill_a_fast_target_would_have_missed(run: Run) -> None:
    # As in the test above that misses all four kills, with the default hold_dispatch (auto) and a
    # min_uptime_s that outlasts the workload: each kill holds dispatching only once the next one
    # is due (or the workload nearly over), and lands on work in flight.
    data = invoice_scenario(intents=200, concurrency=8, env=FAST, kills={"count": 4, "min_uptime_s": 0.5})
    data["gate"] = {"fail_inconclusive": True}
    result = run(data)
    s = result.summary
    kill = fault_row(s, FaultKind.KILL)
    assert (kill.planned, kill.injected) == (4, 4)
    assert s.conclusive
    assert result.gate_passed
    schedule = build_schedule(parse_scenario(data))
    triggers = [f.after_intents for f in schedule]
    kills = kills_as_struck(result.run_dir)
    for k, event in enumerate(kills):
        assert event["in_flight"] >= 1
        assert event["hit"] >= 1
        limit = triggers[k + 1] if k + 1 < len(triggers) else 200 - 8
        assert limit is not None
        assert event["started"] <= limit + 8  # never later than its hold point and one landing
    assert s.pacing is not None
    assert s.pacing.held >= 1
    assert s.pacing.least_in_flight >= 1
    report = (result.run_dir / "report.md").read_text()
    assert f"pod faults paced: {s.pacing.held} of 4 held dispatch" in report
