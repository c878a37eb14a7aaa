"""The final read of a live effect source: it never waits for a pod that will not come back."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
import yaml

from harness.cli import main
from tests.helpers.paths import INVOICES
from tests.helpers.scenarios import invoice_scenario
from tests.helpers.third_party import IN_MEMORY

pytestmark = pytest.mark.integration

ONCE = """\
import os, sys
flag, server = sys.argv[1], sys.argv[2]
if os.path.exists(flag):
    sys.exit("refusing to start again")
open(flag, "w").close()
os.execv(sys.executable, [sys.executable, server])
"""
"""A server that starts the first time only: a pod its supervisor gives up on after the kill."""


def test_a_read_tool_is_not_waited_for_once_its_pod_is_given_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The final read waited ``ready_timeout_s + 60`` for a pod whose supervisor had given up: the
    run failed at 1.9 s and exited at 78 s."""
    once = tmp_path / "once.py"
    once.write_text(ONCE)
    data = invoice_scenario(intents=40, concurrency=2, kills={"count": 1, "hold_dispatch": True})
    data["target"]["command"] = ["{python}", str(once), "{data_dir}/started", str(INVOICES)]
    data["client"]["max_attempts"] = 5
    data["audit"] = {
        "effects": {"tool": {"tool": "count_invoices", "arguments": {"memo_prefix": "{namespace}"}}}
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    began = time.monotonic()
    code = main(["run", str(path), "--results", str(tmp_path / "r"), "--quiet", "--no-preflight"])
    took = time.monotonic() - began
    # The effects could only be read through the pod, which did not come back: they are unknown.
    assert code == 4, capsys.readouterr().err
    (run_dir,) = (tmp_path / "r").iterdir()
    events = [orjson.loads(line) for line in (run_dir / "history.jsonl").read_bytes().splitlines()]
    (collected,) = [e for e in events if e["type"] == "effects_collected"]
    assert collected["error"] == "pod pod-0 is down for good (it did not come back after it died)"
    assert took < data["target"]["ready_timeout_s"], took  # it waited ready_timeout_s + 60 s before


def test_a_read_tool_that_answers_json_text_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool returning a plain dict has no output schema, so the SDK sends it as a JSON text block, no
    structuredContent: it was refused ("must return structured content"); its JSON is read."""
    server = tmp_path / "items.py"
    server.write_text(IN_MEMORY)
    data = {
        "name": "in-memory",
        "target": {"command": ["{python}", str(server)]},
        "workload": {"intents": 10, "tool": "add_item", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"tool": {"tool": "count_items", "arguments": {"prefix": "{namespace}"}}}},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["run", str(path), "--results", str(tmp_path / "r"), "--quiet", "--no-preflight"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("exactly once: 10 of 10 intents"), out
