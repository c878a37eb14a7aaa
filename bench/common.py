"""Shared pieces: reference servers as processes, CPU accounting, goals."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.client.readiness import wait_ready as probe_until_ready
from harness.loopback import free_port

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, from /proc (the OS's own accounting)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """The harness's own readiness probe, for a server a benchmark started."""
    readiness = asyncio.run(probe_until_ready(url, timeout_s=timeout, alive=lambda: proc.poll() is None))
    if readiness.exited:
        raise RuntimeError(f"server exited with {proc.returncode}")
    if not readiness.ready:
        raise RuntimeError(f"server at {url} not ready")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def server(script: str, **env: str) -> Iterator[Server]:
    """A reference target from targets/ as a real process on a free port; stopped afterwards."""
    port = free_port()
    full = {**os.environ, "PORT": str(port), **env}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "targets" / script)],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_ready(url, proc)
        yield Server(url, proc)
    finally:
        proc.kill()
        proc.wait()


@dataclass
class Goal:
    """One goal of the benchmark issue: a measured figure against its limit."""

    name: str
    measured: float
    limit: float
    unit: str = ""
    higher_is_better: bool = False
    spread: str = ""
    """How the figure varied when measured several times (``median of 5, 0.95-1.04``)."""

    @property
    def passed(self) -> bool:
        return self.measured >= self.limit if self.higher_is_better else self.measured <= self.limit

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        verdict = "PASS" if self.passed else "FAIL"
        spread = f" [{self.spread}]" if self.spread else ""
        return (
            f"{verdict}  {self.name}: {self.measured:.3g}{self.unit} (goal {op} {self.limit:g}{self.unit})"
            f"{spread}"
        )


def median_spread(values: list[float], unit: str = "") -> tuple[float, str]:
    """The median of repeated measurements and how they spread: ``median of 3, 0.95-1.04``."""
    middle = float(statistics.median(values))
    if len(values) == 1:
        return middle, "measured once"
    return middle, f"median of {len(values)}, {min(values):.3g}-{max(values):.3g}{unit}"
