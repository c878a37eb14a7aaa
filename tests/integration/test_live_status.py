"""The live status of a real run agrees with the history the audit reads afterwards."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from harness.history import NEVER_SENT, read_history
from harness.run.runner import execute
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario
from tests.unit.test_live import Terminal

pytestmark = pytest.mark.integration


def test_the_last_panel_shows_what_the_history_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    data = invoice_scenario(mode="naive", intents=30, concurrency=4)
    data["faults"] = {
        "stream": [
            {"fault": "sever_response", "intent": 3, "attempt": 1},
            {"fault": "sever_response", "intent": 7, "attempt": 1},
            {"fault": "sever_request", "intent": 9, "attempt": 1},
        ]
    }
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(tmp_path / "results", scenario)
    out = Terminal()
    asyncio.run(execute(scenario, run_dir, out=out, progress_interval_s=0.1))

    events = list(read_history(run_dir / "history.jsonl"))
    faults = sum(e["type"] == "fault" for e in events)
    ambiguous = sum(
        e["type"] == "attempt_ended"
        and e["outcome"] in ("transport_error", "timeout")
        and e.get("detail") not in NEVER_SENT
        for e in events
    )
    assert (faults, ambiguous) == (3, 3)
    last = out.getvalue().rsplit("\x1b[1A", 1)[-1]
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", last)
    assert "30/30 intents (100%)" in plain
    assert f"stream {faults}" in plain
    assert f"{ambiguous} ambiguous attempts · 0 gave up" in plain
