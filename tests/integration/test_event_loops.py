"""A whole run on each event loop the harness can run on (``MCP_CHAOS_LOOP``): uvloop, its default, and
the standard loop; the same killed scenario must come to the same verdicts on both."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness import eventloop
from harness.history import FaultKind, Verdict, read_history
from harness.run.runner import run_and_audit
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario
from tests.helpers.scenarios import fault_row, invoice_scenario


@pytest.mark.integration
@pytest.mark.parametrize("loop", eventloop.LOOPS)
def test_a_killed_run_comes_to_the_same_verdicts_on_either_loop(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(eventloop.LOOP_ENV, loop)
    assert eventloop.chosen() == loop
    scenario = parse_scenario(
        invoice_scenario(mode="atomic", intents=12, concurrency=3, kills={"count": 1, "hold_dispatch": True})
    )
    run_dir = prepare_run_dir(tmp_path / "results", scenario)
    audit = eventloop.run(
        run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False)
    )
    summary = audit.summary
    assert fault_row(summary, FaultKind.KILL).injected == 1
    assert summary.verdicts.get(Verdict.EXACTLY_ONCE) == 12, summary.verdicts
    events = list(read_history(run_dir / "history.jsonl"))
    assert [e["seq"] for e in events] == list(range(len(events)))  # held events written in order
