"""Restart latency per runtime: from SIGKILL to answering ``server/discover`` again.

Measured through the harness's own supervisor (what a run pays per kill, less
the scenario's restart delay, which is zero here), for the process runtime and,
where a Docker engine and the reference image are there, the Docker runtime.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.pods.factory import make_pod
from harness.pods.ready import HttpReady
from harness.pods.supervisor import Supervisor
from harness.scenario import parse_scenario

IMAGE = "mcp-chaos/invoices:dev"


UNUSED_QUERY = "SELECT 1 AS marker"
"""The restart benchmark audits nothing, but a scenario must say how it would."""


def _scenario(runtime: str) -> Any:
    target: dict[str, Any] = {"env": {"INVOICES_DB": "{data_dir}/invoices.db"}, "restart_delay_s": 0}
    if runtime == "docker":
        target["image"] = IMAGE
    else:
        target["command"] = ["{python}", str(ROOT / "targets" / "invoices" / "server.py")]
    return parse_scenario(
        {
            "name": "bench-restart",
            "target": target,
            "workload": {"intents": 1, "tool": "create_invoice", "arguments": {"memo": "{marker}"}},
            "audit": {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": UNUSED_QUERY}}},
        }
    )


async def _restarts(runtime: str, kills: int, work: Path) -> list[float]:
    port = free_port()
    (work / "data").mkdir()
    (work / "pods").mkdir()
    with HistoryWriter(work / "history.jsonl") as history:
        supervisor = Supervisor(
            make_pod(_scenario(runtime).target, work, port=port, name="pod-0", urls={}),
            HttpReady(f"http://127.0.0.1:{port}/mcp", protocol="2026-07-28", headers={}),
            history,
            ready_timeout_s=30,
            restart_delay_s=0,
            max_restarts=kills,
            stop_timeout_s=5,
        )
        await supervisor.start()
        supervise = asyncio.create_task(supervisor.supervise())
        latencies = []
        try:
            for _ in range(kills):
                await asyncio.sleep(0.2)
                start = time.perf_counter()
                assert supervisor.kill(trigger="bench")
                while not supervisor.ready.is_set():
                    await asyncio.sleep(0.005)
                latencies.append(time.perf_counter() - start)
        finally:
            await supervisor.stop()
            await supervise
    return latencies


def restart_s(runtime: str, kills: int = 10) -> float:
    """Median seconds from kill to ready for one runtime and the invoices target."""
    with tempfile.TemporaryDirectory() as tmp:
        return statistics.median(asyncio.run(_restarts(runtime, kills, Path(tmp))))


def docker_available() -> bool:
    from harness.errors import TargetStartError
    from harness.pods.container import docker_client

    try:
        client = docker_client()
    except TargetStartError:
        return False
    try:
        client.images.get(IMAGE)
    except Exception:
        return False
    finally:
        client.close()
    return True
