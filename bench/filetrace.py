"""File crash points: what tracing costs a server's calls, and how long one SQLite intent's exploration takes.

The file tracer (``harness.crashpoints.fstrace``) stops the server at every system call it makes, so
the calls of a traced server are slower. Measured on the reference notes server with a SQLite store
(``targets/notes --db-path``, SQLite's defaults), over HTTP at concurrency 1: the same run of
``write_note`` calls untraced and traced (``faults.kill.power_loss`` with no kill: the tracer runs all
run long and holds nothing), alternating, each call's time from the history (attempt started to
ended). Untraced, no tracer process is started at all. Then ``mcp-chaos crashpoints`` of the same
server with the default options (every distinct crash state once, kill and power loss), in one copy,
timed whole.
The server runs through the seccomp launcher (:mod:`harness.crashpoints.filtered`), as every
traced process pod does: it stops at the system calls that write files only.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.common import ROOT
from harness.crashpoints.explore import Exploration, explore, prepare
from harness.crashpoints.options import ExploreOptions
from harness.run.runner import run_and_audit
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario

NOTES = ROOT / "targets" / "notes" / "server.py"
QUERY = "SELECT name AS marker, COUNT(*) AS effects FROM notes GROUP BY name"


def notes_on_sqlite(intents: int, *, traced: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "bench-filetrace",
        "seed": 11,
        "target": {
            "command": ["{python}", str(NOTES), "--db-path", "{data_dir}/notes.db"],
            "env": {"NOTES_TRANSPORT": "http"},
            "ready_timeout_s": 30,
        },
        "workload": {
            "intents": intents,
            "concurrency": 1,
            "tool": "write_note",
            "arguments": {"name": "{marker}", "content": "note {index}"},
        },
        "client": {"attempt_timeout_s": 10},
        "audit": {"effects": {"sql": {"url": "sqlite:///{data_dir}/notes.db", "query": QUERY}}},
        "gate": {"allow_inconclusive": True},
    }
    if traced:
        data["faults"] = {"kill": {"count": 0, "power_loss": True}}
    return data


def call_ms(intents: int, *, traced: bool) -> tuple[float, bool]:
    """The median time of a call, in ms, and whether a file tracer ran."""
    scenario = parse_scenario(notes_on_sqlite(intents, traced=traced))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = prepare_run_dir(Path(tmp), scenario)
        asyncio.run(run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False))
        events = [orjson.loads(line) for line in (run_dir / "history.jsonl").read_bytes().splitlines()]
    started = {e["id"]: e["t"] for e in events if e["type"] == "attempt_started"}
    took = [e["t"] - started[e["id"]] for e in events if e["type"] == "attempt_ended"]
    tracer = any(e["type"] == "service_started" and e.get("service") == "file_tracer" for e in events)
    return 1000 * statistics.median(took), tracer


def exploration_s() -> tuple[float, Exploration]:
    scenario = parse_scenario({**notes_on_sqlite(3, traced=False), "gate": {}})
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        planned = prepare(scenario, Path(tmp), ExploreOptions())
        found = asyncio.run(explore(planned, out=io.StringIO(), progress_interval_s=None))
        return time.perf_counter() - start, found
