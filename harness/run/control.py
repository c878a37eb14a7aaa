"""The control run (``run --control``): the same workload with no faults, before the faulted run.

A server that loses or repeats writes under concurrency alone (load-modify-save
without a lock, ids from a racy counter) shows the same findings with or without
kills, and the faulted run cannot tell which faults caused what. The control
answers that: the scenario itself, with its seed, workload and client policy, but
with no pod faults and no stream faults, run and audited first, into a run
directory of its own inside the run's (``<run>/control/``, kept as evidence, as the
preflight's is). The faulted run's report compares its rates with the control's
``summary.json``. The control is not gated: its findings are the baseline, not a
verdict on the server.
"""

from __future__ import annotations

from pathlib import Path

from harness import rundir
from harness.audit.auditor import AuditResult
from harness.history import Verdict
from harness.run.runner import run_and_audit
from harness.scenario import Scenario


def control_scenario(scenario: Scenario) -> Scenario:
    """The scenario with no faults (pod or stream) and no gate; everything else as it is."""
    data = scenario.model_dump(mode="json")
    data["faults"] = {}
    data["gate"] = {}
    return Scenario.model_validate(data)


async def run_control(
    scenario: Scenario, run_dir: Path, *, progress_interval_s: float | None = None, html: bool = True
) -> AuditResult:
    """Run and audit the control into ``run_dir/control``; its audit (summary.json is written there)."""
    control = control_scenario(scenario)
    control_dir = rundir.prepare_run_dir(run_dir, control, rundir.CONTROL)
    return await run_and_audit(control, control_dir, progress_interval_s=progress_interval_s, html=html)


def describe(audit: AuditResult) -> str:
    """One line for the terminal: what the server did with no fault at all."""
    s = audit.summary
    verdicts = ", ".join(
        f"{s.verdicts.get(v, 0)} {v.value}" for v in (Verdict.LOST, Verdict.DUPLICATE, Verdict.EXACTLY_ONCE)
    )
    return f"control (no faults): {s.intents.planned} intents: {verdicts}; kept in {audit.run_dir}"
