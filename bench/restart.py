"""Restart latency per runtime: from SIGKILL to answering ``server/discover`` again.

Measured through the harness's own supervisor (what a run pays per kill, less
the scenario's restart delay, which is set to zero here).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import ROOT
from harness.faults.pods import ProcessPod
from harness.faults.supervisor import Supervisor
from harness.history import HistoryWriter
from harness.runner import free_port, pod_command
from harness.scenario import Target


async def _process_restarts(kills: int, work: Path) -> list[float]:
    port = free_port()
    target = Target(
        command=["{python}", str(ROOT / "targets" / "invoices" / "server.py")],
        env={"INVOICES_DB": "{data_dir}/invoices.db"},
    )
    (work / "data").mkdir()
    argv, env = pod_command(target, port=port, run_dir=work, pod="pod-0")
    with HistoryWriter(work / "history.jsonl") as history:
        supervisor = Supervisor(
            ProcessPod("pod-0", argv, env, work / "pod.log"),
            f"http://127.0.0.1:{port}/mcp",
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
                assert supervisor.kill("bench")
                while not supervisor.ready.is_set():
                    await asyncio.sleep(0.005)
                latencies.append(time.perf_counter() - start)
        finally:
            await supervisor.stop()
            await supervise
    return latencies


def process_restart_s(kills: int = 10) -> float:
    """Median seconds from kill to ready for the process runtime and the invoices target."""
    with tempfile.TemporaryDirectory() as tmp:
        return statistics.median(asyncio.run(_process_restarts(kills, Path(tmp))))
