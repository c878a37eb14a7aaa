"""Audit time and peak memory for synthesised 1M- and 3M-intent runs, against the parse of their history.

The history is shaped like a real pod-kill run's (every event type, ~3% of
intents retried after a kill, ~1.4% duplicated effects) but written directly,
so a million intents take seconds to make instead of an hour to run. The audit
is the real ``mcp-chaos audit`` in a child process; its peak RSS is its own
high-water mark, read from /proc (:class:`bench.common.PeakRss`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.common import PeakRss
from harness.scenario import parse_scenario

QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
SIZES = (1_000_000, 3_000_000)
"""Intents of the two runs: the second shows whether the audit's memory grows with the run."""


def parse_floor(run_dir: Path) -> float:
    """Seconds to merely parse the run's history, line by line with orjson: what no audit can beat."""
    loads = orjson.loads
    start = time.perf_counter()
    with open(run_dir / "history.jsonl", "rb") as f:
        while lines := f.readlines(1 << 16):
            for line in lines:
                loads(line)
    return time.perf_counter() - start


def synthesize(run_dir: Path, intents: int, seed: int = 1) -> None:
    """Write scenario.yaml, history.jsonl and data/invoices.db for a run of ``intents`` intents."""
    rng = random.Random(seed)
    (run_dir / "data").mkdir(parents=True)
    scenario = parse_scenario(
        {
            "name": "bench-audit",
            "target": {"command": ["unused"]},
            "workload": {"intents": intents, "tool": "create_invoice", "arguments": {"memo": "{marker}"}},
            "audit": {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": QUERY}}},
            # Its duplicates are the point (a canary): every other finding would fail the audit.
            "gate": {"expect": ["duplicate"]},
        }
    )
    (run_dir / "scenario.yaml").write_text(scenario.dump_yaml())
    effects: list[tuple[str]] = []
    seq = 0
    t = 0.0
    rid = 0
    kill_every = max(1, intents // 8)
    dumps = orjson.dumps
    with open(run_dir / "history.jsonl", "wb") as f:
        buf: list[bytes] = []

        def emit(type_: str, **fields: object) -> None:
            nonlocal seq
            buf.append(dumps({"seq": seq, "t": round(t, 6), "type": type_, **fields}) + b"\n")
            seq += 1

        emit("run_started", run_id="bench", scenario="bench-audit", seed=seed, intents=intents, namespace="b")
        emit("pod_started", pod="pod-0", pid=1)
        emit("pod_ready", pod="pod-0", pid=1, after_s=0.5)
        for i in range(intents):
            marker, key = f"b-m{i:07d}", f"b-{i}-{rng.getrandbits(64):016x}"
            t += 0.0004
            emit("intent_started", intent=i, marker=marker, key=key)
            retried = rng.random() < 0.03
            attempt = 1
            if retried:
                rid += 1
                emit("attempt_started", intent=i, attempt=1, id=rid, key=key)
                if i % kill_every == 0:
                    emit("fault", fault="kill", pod="pod-0", pid=1, trigger=f"after intent {i}")
                emit(
                    "attempt_ended",
                    intent=i,
                    attempt=1,
                    id=rid,
                    outcome="transport_error",
                    detail="closed_before_response",
                )
                attempt = 2
            rid += 1
            emit("attempt_started", intent=i, attempt=attempt, id=rid, key=key)
            emit(
                "attempt_ended",
                intent=i,
                attempt=attempt,
                id=rid,
                outcome="ok",
                status=200,
                form="json",
                result=f"{rng.getrandbits(64):016x}",
            )
            emit("intent_ended", intent=i, status="ok", attempts=attempt)
            effects.append((marker,))
            if retried and rng.random() < 0.45:
                effects.append((marker,))
            if len(buf) > 10_000:
                f.write(b"".join(buf))
                buf.clear()
        emit("run_ended", status="completed", reason=None, kills=8, restarts=8)
        f.write(b"".join(buf))
    with sqlite3.connect(run_dir / "data" / "invoices.db") as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, memo TEXT NOT NULL)")
        db.executemany("INSERT INTO invoices (memo) VALUES (?)", effects)


@dataclass
class AuditSample:
    intents: int
    history_mb: float
    wall_s: float
    peak_rss_mb: float


def audit(run_dir: Path, *, html: bool = False) -> AuditSample:
    """``mcp-chaos audit`` of the run; with ``html``, report.html (its plots) too."""
    args = [sys.executable, "-m", "harness.cli", "audit", str(run_dir), *([] if html else ["--no-html"])]
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = PeakRss(proc.pid, args)
    _, status, _ = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    peak_mb = peak.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"audit failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    intents = int(orjson.loads((run_dir / "summary.json").read_bytes())["intents"]["started"])
    return AuditSample(
        intents=intents,
        history_mb=(run_dir / "history.jsonl").stat().st_size / 1e6,
        wall_s=wall,
        peak_rss_mb=peak_mb,
    )
