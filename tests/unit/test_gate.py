"""The gate: defaults that fail on every finding, thresholds per verdict, canaries, inconclusive runs,
and what a gate lets through said as "not gated" (pure, on synthetic histories; one in-process CLI)."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.cli import main
from harness.errors import ScenarioError
from harness.history import FaultKind
from harness.report.junit import run_junit
from harness.scenario import parse_scenario
from tests.unit.histories import History, audit

STATUS = {"ok": "ok", "gave_up": "gave_up", "rejected": "rejected"}


def history(outcomes: list[str], *, kills_planned: int = 0) -> History:
    """One intent per entry, ending with that client status at its first attempt."""
    h = History(intents=len(outcomes), faults_planned={"kill": kills_planned} if kills_planned else {})
    for i, status in enumerate(outcomes):
        h.start(i)
        rid = h.attempt(i)
        h.tick()
        h.end(i, rid, "ok" if status == "ok" else "tool_error")
        h.finish(i, status=status)
    h.add("run_ended", status="completed")
    return h


def judged(
    scenario_data: dict[str, Any],
    effects: list[int],
    *,
    statuses: list[str] | None = None,
    gate: dict[str, Any] | None = None,
    kills_planned: int = 0,
) -> AuditResult:
    """Intents with these effect counts (ok by default), audited under this gate (None: no gate)."""
    data = copy.deepcopy(scenario_data)
    if gate is not None:
        data["gate"] = gate
    h = history(statuses or ["ok"] * len(effects), kills_planned=kills_planned)
    counts = {f"ns-m{i}": n for i, n in enumerate(effects) if n}
    return audit(h, counts, parse_scenario(data))


def checks(result: AuditResult) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.message) for c in result.summary.gate.checks}


def test_without_a_gate_every_finding_fails(scenario_data: dict[str, Any]) -> None:
    result = judged(
        scenario_data, [1, 0, 2, 1], statuses=["ok", "ok", "ok", "rejected"], kills_planned=2
    )  # exactly once, lost, duplicate, applied despite an error; 2 kills planned, none injected
    assert not result.gate_passed
    assert result.summary.gate.violations == [
        "1 lost (the default gate fails on any lost)",
        "1 applied_despite_error (the default gate fails on any applied_despite_error)",
        "1 duplicate (the default gate fails on any duplicate)",
        "inconclusive: 2 of 2 planned kills did not happen (the run ended first)",
    ]
    assert result.summary.gate.not_gated == []


def test_a_clean_run_passes_the_default_gate(scenario_data: dict[str, Any]) -> None:
    result = judged(scenario_data, [1, 1, 0], statuses=["ok", "ok", "rejected"])  # a refusal is no finding
    assert result.gate_passed
    assert {status for status, _ in checks(result).values()} == {"passed"}


def test_a_duplicate_threshold_does_not_let_a_lost_intent_through(scenario_data: dict[str, Any]) -> None:
    result = judged(scenario_data, [2, 2, 0, 1], gate={"max_duplicates": 1000})
    assert checks(result)["duplicate"] == ("passed", "2 duplicate, within the gate's threshold")
    assert checks(result)["lost"] == ("failed", "1 lost (the default gate fails on any lost)")
    assert not result.gate_passed


@pytest.mark.parametrize(
    ("gate", "passed", "violation"),
    [
        ({"max_lost": 2, "max_duplicates": 1}, True, None),
        ({"max_lost": 1, "max_duplicates": 1}, False, "2 lost > max_lost 1"),
        (
            {"max_duplicate_rate": 0.2, "max_lost": 2},
            False,
            "duplicate rate 25.0000% > max_duplicate_rate 20.0000%",
        ),
        ({"max_duplicate_rate": 0.25, "max_lost": 2}, True, None),
        ({"max_duplicates": 0, "max_lost": 2}, False, "1 duplicates > max_duplicates 0"),
    ],
)
def test_thresholds_replace_zero_tolerance_for_their_verdict_only(
    scenario_data: dict[str, Any], gate: dict[str, Any], passed: bool, violation: str | None
) -> None:
    result = judged(scenario_data, [0, 0, 2, 1], gate={**gate, "fail_on": ["lost", "duplicate"]})
    assert result.gate_passed is passed
    assert result.summary.gate.violations == ([] if violation is None else [violation])


def test_a_fail_on_that_leaves_a_finding_out_says_so(scenario_data: dict[str, Any]) -> None:
    result = judged(scenario_data, [0, 0, 0, 2, 1], gate={"fail_on": ["duplicate"]})
    gate = result.summary.gate
    assert not result.gate_passed  # the duplicate
    assert gate.not_gated == ["3 lost intents not gated: fail_on does not list lost"]
    first = gate.not_gated[0]
    assert first in result.summary.to_json()["gate"]["not_gated"]
    junit = ET.fromstring(run_junit(result.summary, 1.0))
    skipped = {c.get("name"): c.find("skipped") for c in junit.iter("testcase")}
    lost = skipped["gate.lost"]
    assert lost is not None
    assert lost.get("message") == first
    assert skipped["gate.duplicate"] is None


def test_a_canary_passes_when_its_finding_shows_and_fails_when_it_does_not(
    scenario_data: dict[str, Any],
) -> None:
    shown = judged(scenario_data, [2, 1], gate={"expect": ["duplicate"]})
    assert shown.gate_passed
    assert checks(shown)["duplicate"] == ("expected", "1 duplicate, expected by gate.expect")
    missing = judged(scenario_data, [1, 1], gate={"expect": ["duplicate"]})
    assert not missing.gate_passed
    assert "expected duplicate (a canary) and saw none" in missing.summary.gate.violations[0]
    also_lost = judged(scenario_data, [2, 0], gate={"expect": ["duplicate"]})
    assert also_lost.summary.gate.violations == ["1 lost (the default gate fails on any lost)"]


@pytest.mark.parametrize(
    ("gate", "passed"),
    [
        ({}, False),
        ({"fail_on": ["duplicate"]}, False),  # leaving inconclusive out of fail_on does not pass it
        ({"fail_inconclusive": True}, False),  # older scenarios still load
        ({"fail_inconclusive": False}, False),  # and no longer turn the default off
        ({"allow_inconclusive": True}, True),
    ],
)
def test_only_allow_inconclusive_passes_an_inconclusive_run(
    scenario_data: dict[str, Any], gate: dict[str, Any], passed: bool
) -> None:
    result = judged(scenario_data, [1, 1], gate=gate, kills_planned=3)
    assert result.gate_passed is passed
    status, message = checks(result)["inconclusive"]
    assert status == ("not_gated" if passed else "failed")
    assert "3 of 3 planned kills did not happen" in message


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (
            {"fail_on": ["duplicate"], "expect": ["duplicate"]},
            "gate.expect and gate.fail_on both name duplicate",
        ),
        ({"fail_inconclusive": True, "allow_inconclusive": True}, "contradict each other"),
        ({"fail_on": ["duplicates"]}, "gate.fail_on.0"),
    ],
)
def test_gates_that_cannot_mean_anything_are_refused(
    scenario_data: dict[str, Any], gate: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({**scenario_data, "gate": gate})


def write_run(run_dir: Path, scenario_data: dict[str, Any], h: History, effects: dict[str, int]) -> Path:
    """A run directory as a run leaves it: the scenario as run, its history, its effects (JSON lines)."""
    data = copy.deepcopy(scenario_data)
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/effects.jsonl", "marker_field": "marker"}}}
    (run_dir / "data").mkdir(parents=True)
    (run_dir / "scenario.yaml").write_text(parse_scenario(data).dump_yaml())
    (run_dir / "history.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in h.events))
    lines = [orjson.dumps({"marker": m}) + b"\n" for m, n in effects.items() for _ in range(n)]
    (run_dir / "data" / "effects.jsonl").write_bytes(b"".join(lines))
    return run_dir


def test_audit_exits_1_on_a_lost_intent_under_a_duplicate_threshold_and_says_lost_first(
    tmp_path: Path, scenario_data: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # The published notes server that lost 138 notes passed `--max-duplicates 1000` with
    # "duplicates: 13 of 600" as its headline. A lost intent fails such a gate, and leads.
    data = {**scenario_data, "faults": {}, "gate": {"max_duplicates": 1000}}
    h = history(["ok"] * 4)
    run_dir = write_run(tmp_path / "run", data, h, {"ns-m0": 1, "ns-m1": 2, "ns-m2": 1})
    assert main(["audit", str(run_dir), "--no-html"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("LOST: 1 of 4 intents = 25.00% (95% CI ")
    assert "causes: no_fault 1" in out[0]
    assert out[1].startswith("also: duplicate: 1 of 4 intents")
    assert "gate: FAILED: 1 lost (the default gate fails on any lost)" in out
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["headline"]["kind"] == "lost"
    assert next(iter(summary)) == "headline"
    report = (run_dir / "report.md").read_text().splitlines()
    assert report[2].startswith("**LOST: 1 of 4 intents")
    assert yaml.safe_load((run_dir / "scenario.yaml").read_text())["gate"]["fail_on"] is None


def _one_kill(scenario_data: dict[str, Any], *, during_a_call: bool) -> AuditResult:
    """Two intents and one kill, struck while the first's attempt was in flight, or between calls."""
    h = History(intents=2, faults_planned={"kill": 1})
    for i in range(2):
        h.start(i)
        rid = h.attempt(i)
        h.tick()
        if i == 0 and during_a_call:
            h.fault("kill", trigger="after 0 intents")
            h.exited()
            h.add("pod_ready", pod="pod-0", pid=2, after_s=0.1, protocol="2026-07-28")
            h.tick()
            h.end(i, rid, "transport_error")
            rid = h.attempt(i, attempt=2)
            h.tick()
        h.end(i, rid, "ok")
        h.finish(i, status="ok")
        h.tick()
        if i == 0 and not during_a_call:
            h.fault("kill", trigger="after 1 intents")
            h.exited()
            h.add("pod_ready", pod="pod-0", pid=2, after_s=0.1, protocol="2026-07-28")
            h.tick()
    h.add("run_ended", status="completed")
    return audit(h, {"ns-m0": 1, "ns-m1": 1}, parse_scenario(scenario_data))


def test_a_kill_that_hit_no_attempt_makes_the_run_inconclusive(scenario_data: dict[str, Any]) -> None:
    """Struck between calls, a kill broke nothing: the run's "exactly once" never saw a retry after a
    crash, so it is inconclusive, never a pass (it passed: 1 of 1 planned kills happened)."""
    idle = _one_kill(scenario_data, during_a_call=False)
    assert idle.summary.inconclusive == [
        "1 kill hit no attempt in flight: none broke a call, so no retry after one was tested"
    ]
    assert not idle.gate_passed
    hit = _one_kill(scenario_data, during_a_call=True)
    assert hit.summary.inconclusive == []
    assert hit.gate_passed


def test_a_kill_that_did_not_finish_makes_the_run_inconclusive(scenario_data: dict[str, Any]) -> None:
    """A url target's kill command still running when the run ended: the kill is not known to have
    happened, so it is not counted, and the run is inconclusive (it passed "with 1 kills, 0 pod exits")."""
    h = History(intents=1, faults_planned={"kill": 1})
    h.start(0)
    rid = h.attempt(0)
    h.fault("kill", trigger="after 0 intents")
    h.tick()
    h.end(0, rid, "ok")
    h.finish(0, status="ok")
    reason = "target.kill_command (sleep 300) had not finished when the run ended; it was killed"
    h.add(
        "fault_unfinished",
        fault="kill",
        pod="pod-0",
        pid=0,
        trigger="after 0 intents",
        fault_seq=3,
        reason=reason,
    )
    h.add("run_ended", status="completed")
    result = audit(h, {"ns-m0": 1}, parse_scenario(scenario_data))
    assert result.summary.inconclusive == [
        f"a kill did not finish, so whether it happened is not known: {reason}"
    ]
    assert result.summary.injected(FaultKind.KILL) == 0
    assert result.summary.headline.sentence.endswith("with 0 of 1 planned kills, 0 pod exits")
    assert not result.gate_passed
