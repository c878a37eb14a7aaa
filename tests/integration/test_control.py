"""``run --control``: the same workload with no faults first, kept and auditable on its own."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from harness import rundir
from harness.audit.auditor import audit_run
from harness.cli import main
from harness.errors import UsageError
from harness.history import EventType, Verdict, read_history
from harness.scenario import load_scenario
from tests.integration.test_checkpoints import held_kills, notes_scenario

pytestmark = pytest.mark.integration


def test_a_control_run_comes_first_with_no_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Lost updates need no fault: the control loses notes too, which is what it is there to show.
    data = notes_scenario("lost_update", intents=40, concurrency=4)
    data["faults"] = {
        "kill": held_kills(1),
        "stream": [{"fault": "delay", "probability": 0.5, "delay_s": 0.01}],
    }
    data["target"]["transport"] = "http"
    data["target"]["env"]["NOTES_TRANSPORT"] = "http"
    path = tmp_path / "notes.yaml"
    path.write_text(yaml.safe_dump(data))
    argv = ["run", str(path), "--results", str(tmp_path / "r"), "--run-id", "one", "--quiet", "--control"]
    main(argv)  # its exit code is the faulted run's gate, not this test's business
    err = capsys.readouterr().err
    run_dir = tmp_path / "r" / "one"
    control = run_dir / rundir.CONTROL
    assert "control (no faults): 40 intents: " in err
    assert err.index("control (no faults)") < err.index("run one: 40 intents")  # first the control

    # The control: the same workload, seed and client, nothing injected, audited on its own.
    as_run = load_scenario(control / rundir.SCENARIO)
    assert as_run.faults.kill is None
    assert as_run.faults.stream == []
    assert (as_run.seed, as_run.workload, as_run.client) == (
        load_scenario(path).seed,
        load_scenario(path).workload,
        load_scenario(path).client,
    )
    control_events = list(read_history(control / rundir.HISTORY))
    assert not [e for e in control_events if e["type"] == EventType.FAULT]
    summary = orjson.loads((control / rundir.SUMMARY_JSON).read_bytes())
    assert summary["verdicts"][Verdict.LOST] > 0  # no fault, and still lost
    assert summary["intents"]["planned"] == 40
    assert audit_run(control).summary.verdicts[Verdict.LOST] == summary["verdicts"][Verdict.LOST]

    # The faulted run is the run directory's own, with its kill, and never counts the control's effects.
    faulted = list(read_history(run_dir / rundir.HISTORY))
    assert [e["fault"] for e in faulted if e["type"] == EventType.FAULT and "pod" in e] == ["kill"]
    ours = orjson.loads((run_dir / rundir.SUMMARY_JSON).read_bytes())
    assert ours["effects"]["foreign"] == 0
    assert {e["marker"] for e in faulted if e["type"] == EventType.INTENT_STARTED}.isdisjoint(
        e["marker"] for e in control_events if e["type"] == EventType.INTENT_STARTED
    )


def test_a_run_stopped_in_its_control_points_at_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "one"
    (run_dir / rundir.CONTROL).mkdir(parents=True)
    (run_dir / rundir.CONTROL / rundir.HISTORY).write_text("")
    (run_dir / rundir.CONTROL / rundir.SCENARIO).write_text("")
    with pytest.raises(UsageError, match=r"stopped in its control run.*mcp-chaos audit .*one/control"):
        rundir.require_run_dir(run_dir)
