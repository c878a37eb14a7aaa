"""A real run's history, every line of it, against the shipped schema (harness/history.schema.json).

The suite checks every history its runs write when the writer closes (``MCP_CHAOS_CHECK_HISTORY``,
tests/conftest.py); this test runs a short run with both kinds of fault and a checkpoint read on
purpose and checks its file again from outside the writer, so a check that silently stopped running
would not go unnoticed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness import rundir
from harness.audit.auditor import audit_run
from harness.history import SCHEMA_VERSION, read_history
from harness.history_schema import check_history, line_errors
from tests.helpers.scenarios import invoice_scenario, run_scenario

pytestmark = pytest.mark.integration


def test_a_run_with_a_kill_and_a_stream_fault_writes_only_lines_the_schema_describes(tmp_path: Path) -> None:
    data = invoice_scenario(
        mode="naive", intents=12, concurrency=2, kills={"count": 1, "hold_dispatch": True}
    )
    # Several chances: the kill may have taken an attempt a rule names first.
    data["faults"]["stream"] = [
        *({"fault": "sever_response", "intent": i, "attempt": 1} for i in (1, 6, 10)),
        {"fault": "delay", "intent": 3, "delay_s": 0.01, "direction": "response"},
    ]
    result = run_scenario(data, tmp_path)
    path = result.run_dir / "history.jsonl"
    check_history(path)
    events = list(read_history(path))
    assert all(not list(line_errors(e)) for e in events)
    kinds = Counter(e["type"] for e in events)
    # What this run was made to write: each of them checked above.
    for kind in ("run_started", "pod_started", "pod_ready", "intent_started", "attempt_started",
                 "attempt_ended", "intent_ended", "fault", "pod_exited", "effects_checkpoint",
                 "pod_stopped", "run_ended"):  # fmt: skip
        assert kinds[kind] >= 1, f"no {kind} in the run: {dict(kinds)}"
    faults = {e["fault"] for e in events if e["type"] == "fault"}
    assert "kill" in faults
    assert faults & {"sever_response", "delay"}, faults
    assert events[0]["schema"] == SCHEMA_VERSION
    assert_the_audit_reads_the_scenario_for_the_gate_alone(result.run_dir)


def assert_the_audit_reads_the_scenario_for_the_gate_alone(run_dir: Path) -> None:
    """Issue #57: everything the audit needs is in the history. Every field it once read from the run's
    copy of its scenario is changed there, and the audit says the same; a changed gate still counts."""
    before = audit_run(run_dir)
    path = run_dir / rundir.SCENARIO
    data = yaml.safe_load(path.read_text())
    data["name"], data["seed"] = "another", 99
    data["workload"]["intents"] = 3
    data["faults"]["stream"] = []
    data["faults"]["kill"]["signal"] = "SIGTERM"
    data["client"]["key_reuse"] = "fresh"
    path.write_text(yaml.safe_dump(data))
    after = audit_run(run_dir)
    assert after.summary.to_json() == before.summary.to_json()
    assert after.keyed == before.keyed is True
    data["gate"] = {"expect": ["duplicate"]}
    path.write_text(yaml.safe_dump(data))
    assert audit_run(run_dir).summary.gate != before.summary.gate
