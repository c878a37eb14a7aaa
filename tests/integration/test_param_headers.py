"""A 2026-07-28 tool that marks an argument ``x-mcp-header`` (SEP-2243): a run's calls mirror it in an
``Mcp-Param-*`` header, or the official SDK's server refuses every one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.history import Outcome, Verdict, read_history
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import run_scenario

NOOP = ROOT / "targets" / "noop" / "server.py"


def noop_scenario(**env: str) -> dict[str, Any]:
    """The noop target over HTTP with its ledger as the effect source, and a kill or two."""
    return {
        "name": "marks",
        "seed": 1,
        "target": {
            "command": ["{python}", str(NOOP)],
            "env": {"PORT": "{port}", "NOOP_LEDGER": "{data_dir}/ledger.jsonl", **env},
            "ready_timeout_s": 30,
        },
        "workload": {
            "intents": 40,
            "concurrency": 4,
            "tool": "noop",
            "arguments": {"n": {"random_int": [1, 9]}, "memo": "{marker}"},
        },
        "client": {"attempt_timeout_s": 10, "max_attempts": 50, "backoff": {"initial_s": 0.02, "max_s": 0.2}},
        "faults": {"kill": {"count": 2, "min_uptime_s": 0.2}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}},
    }


@pytest.mark.integration
def test_a_run_mirrors_a_marked_argument_through_kills(tmp_path: Path) -> None:
    result = run_scenario(noop_scenario(NOOP_PARAM_HEADER="Memo"), tmp_path / "results")
    ended = [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == "attempt_ended"]
    # Refused, each would be a protocol error (HTTP 400, -32020: "Mcp-Param-Memo header is missing").
    assert not [e for e in ended if e["outcome"] == Outcome.PROTOCOL_ERROR.value], ended[:3]
    verdicts = result.summary.verdicts
    # Every intent took effect (a kill may duplicate one: the noop's ledger is no idempotent store).
    assert verdicts[Verdict.LOST] == 0, verdicts
    assert verdicts[Verdict.EXACTLY_ONCE] + verdicts[Verdict.DUPLICATE] == 40, verdicts
    assert result.summary.conclusive, result.summary.inconclusive
