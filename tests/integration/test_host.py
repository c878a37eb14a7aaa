"""A run's client answers what servers ask their host, over stdio and HTTP: the roots (the target's
data directory), a form (its defaults, or declined), no sampling, and takes logs and progress
(harness/client/host.py). The server is written as a third party writes one, on the official SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.history import Verdict
from tests.helpers.scenarios import run_scenario
from tests.helpers.third_party import ASKING

pytestmark = pytest.mark.integration


def asking(tmp_path: Path, transport: str, **client: Any) -> dict[str, Any]:
    server = tmp_path / "asking.py"
    server.write_text(ASKING)
    return {
        "name": "asking",
        "seed": 1,
        "target": {
            "command": ["{python}", str(server)],
            "env": {"ASKING_TRANSPORT": transport},
            **({"transport": "stdio"} if transport == "stdio" else {}),
        },
        "workload": {"intents": 3, "concurrency": 1, "tool": "add_note", "arguments": {"body": "{marker}"}},
        # 2025 sessions: 2026-07-28 has no back-channel, its questions are MRTR's (workload.answers).
        "client": {"attempt_timeout_s": 20, "max_attempts": 1, "protocol": "2025-11-25", **client},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "body"}}},
    }


def notes(tmp_path: Path) -> list[dict[str, Any]]:
    [run_dir] = (tmp_path / "results").iterdir()
    return [json.loads(line) for line in (run_dir / "data" / "notes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_that_asks_its_host_gets_roots_and_a_form_s_defaults(tmp_path: Path, transport: str) -> None:
    result = run_scenario(asking(tmp_path, transport), tmp_path / "results")
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3, result.summary.headline
    [run_dir] = (tmp_path / "results").iterdir()
    for note in notes(tmp_path):
        assert note["roots"] == [(run_dir / "data").resolve().as_uri()]
        assert note["form"] == "accept"
        assert note["content"] == {"confirmed": True, "tag": "from-the-form"}
        assert note["sampling"] == "not declared"


def test_a_scenario_that_declines_forms_declines_them(tmp_path: Path) -> None:
    result = run_scenario(asking(tmp_path, "stdio", elicitation="decline"), tmp_path / "results")
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3, result.summary.headline
    assert {note["form"] for note in notes(tmp_path)} == {"decline"}
