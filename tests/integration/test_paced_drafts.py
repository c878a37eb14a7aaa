"""Faults paced to the server: a fast stdio server's drafted scenario, run as drafted, gets every
planned kill, each on work in flight (issue 26).

``init`` drafts the scenario from the live server (no hand edit follows), and the run goes through
the whole harness: real server processes over stdio, the driver, the supervisor, the injector.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.history import FaultKind
from harness.init import Origin, init_scenario
from tests.helpers.paths import MEMORY_SERVER, ROOT
from tests.helpers.scenarios import fault_row, run_scenario
from tests.integration.test_fault_plan import kills_as_struck

pytestmark = pytest.mark.integration

NOOP = ROOT / "targets" / "noop" / "server.py"


def drafted(origin: Origin) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(asyncio.run(init_scenario(origin)))
    return data


def every_kill_on_work(result: AuditResult) -> None:
    s = result.summary
    kill = fault_row(s, FaultKind.KILL)
    assert kill.planned is not None
    assert kill.planned > 0
    assert kill.injected == kill.planned, s.inconclusive
    assert s.conclusive, s.inconclusive
    kills = kills_as_struck(result.run_dir)
    assert len(kills) == kill.planned
    assert all(k["hit"] >= 1 and k["in_flight"] >= 1 for k in kills), kills
    assert s.pacing is not None
    assert s.pacing.least_in_flight >= 1


def test_a_sub_millisecond_stdio_server_gets_every_drafted_kill(tmp_path: Path) -> None:
    # The noop target with its ledger: each call appends a line, nothing more (well under 1 ms).
    data = drafted(
        Origin(
            command=f"{sys.executable} {NOOP}",
            transport="stdio",
            env={"NOOP_TRANSPORT": "stdio", "NOOP_LEDGER": "{data_dir}/ledger.jsonl"},
        )
    )
    assert data["faults"] == {"kill": {"count": 4, "min_uptime_s": 0.2, "hold_dispatch": "auto"}}
    assert data["audit"] == {
        "effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}
    }
    # Every kill on work is what pacing promises. Whether one lands between an append and its answer
    # (a duplicate) is chance at well under a millisecond a call: 0 of 2000 in one CI run.
    every_kill_on_work(run_scenario(data, tmp_path / "results"))


def test_the_official_memory_server_gets_every_drafted_kill(tmp_path: Path, published_servers: str) -> None:
    # A server the harness did not write (TypeScript, stdio, one JSON-lines file rewritten per change).
    data = drafted(
        Origin(
            command=f"{published_servers} {MEMORY_SERVER}",
            transport="stdio",
            env={"MEMORY_FILE_PATH": "{data_dir}/memory.jsonl"},
        )
    )
    assert data["faults"]["kill"]["hold_dispatch"] == "auto"
    every_kill_on_work(run_scenario(data, tmp_path / "results"))
