"""Shared pieces: reference servers as processes, CPU accounting, goals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.faults.supervisor import DISCOVER, DISCOVER_HEADERS

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, from /proc (the OS's own accounting)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.post(url, json=DISCOVER, headers=DISCOVER_HEADERS, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
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

    @property
    def passed(self) -> bool:
        return self.measured >= self.limit if self.higher_is_better else self.measured <= self.limit

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}  {self.name}: {self.measured:.3g}{self.unit} (goal {op} {self.limit:g}{self.unit})"
