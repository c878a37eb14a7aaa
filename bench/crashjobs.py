"""``crashpoints --jobs 2`` against ``--jobs 1``: the same exploration's wall time in one copy of the
target and in two, in alternating rounds, on the reference target's PostgreSQL scenario (its 4
points, R = 3) and on a file store (the notes server's JSON lines, rewritten durably: 8 paths, both
crashes, R = 3). The goal is the ratio, measured in the same run (issue #39: at least 1.5x on two
cores); the tables must be the same, or the figure means nothing."""

from __future__ import annotations

import asyncio
import io
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT
from harness.crashpoints import jobs as crash_jobs
from harness.crashpoints.options import ExploreOptions
from harness.scenario import load_scenario, parse_scenario

NOTES = ROOT / "targets" / "notes" / "server.py"


def notes_durable() -> dict[str, Any]:
    return {
        "name": "notes-durable",
        "seed": 5,
        "target": {
            "command": ["{python}", str(NOTES)],
            "env": {
                "NOTES_TRANSPORT": "http",
                "NOTES_FILE": "{data_dir}/notes.jsonl",
                "NOTES_SAVE": "durable",
            },
            "ready_timeout_s": 30,
        },
        "workload": {"intents": 3, "tool": "write_note", "arguments": {"name": "{marker}", "content": "n"}},
        "client": {"attempt_timeout_s": 10},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "name"}}},
    }


def wall_s(target: str, jobs: int) -> tuple[float, list[tuple[str, dict[str, int]]]]:
    """One exploration's wall time, and its table (points in order, each with its verdicts)."""
    if target == "postgres":
        scenario = load_scenario(ROOT / "scenarios" / "pod-kill-postgres.yaml", [])
    else:
        scenario = parse_scenario(notes_durable())
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        prepared = crash_jobs.prepare(scenario, Path(tmp), ExploreOptions(repeat=3, jobs=jobs))
        found = asyncio.run(crash_jobs.explore_jobs(prepared, out=io.StringIO(), progress_interval_s=None))
        seconds = time.perf_counter() - start
    return seconds, [(p.name, {v: n for v, n in p.verdicts.items() if n}) for p in found.points]
