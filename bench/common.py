"""Shared pieces: reference servers as processes, CPU accounting, goals."""

from __future__ import annotations

import asyncio
import compileall
import enum
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.client.readiness import wait_ready as probe_until_ready
from harness.loopback import free_port

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def compile_harness() -> None:
    """Compile the harness's modules to bytecode, as pip does for a package it installs.

    The project is installed editable, so Python writes a module's bytecode the
    first time it imports it, unless ``PYTHONDONTWRITEBYTECODE`` is set, as in
    many CI images and on this machine: every command line then compiled the
    modules it imports from source, 0.12 s of an audit's start. The benchmarks
    measure the harness as installed (``make`` compiles it when it installs it).
    """
    if not compileall.compile_dir(ROOT / "harness", quiet=1):
        raise RuntimeError("the harness's modules did not compile (python -m compileall harness)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, from /proc (the OS's own accounting)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class PeakRss:
    """A child's own peak RSS: the high-water mark of the program it runs, read from /proc while it runs.

    wait4's ``ru_maxrss`` is not the child's: Linux carries into it the peak of the
    memory the child shared with its parent between fork and exec, so every audit a
    bench process of 385 MB started (after making a 3M-intent history) read 385 MB,
    whatever it used. ``VmHWM`` belongs to the address space exec gave the program
    (Popen returns once exec has succeeded). Read every 10 ms until :meth:`stop`, and
    only while the pid runs ``args`` (once reaped, it may be another's); a peak only
    rises.
    """

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self._status = f"/proc/{pid}/status"
        self._cmdline = f"/proc/{pid}/cmdline"
        self._args = ("\0".join(args) + "\0").encode()
        self._peak_kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            self._read()
            self._done.wait(0.01)

    def _read(self) -> None:
        try:
            with open(self._cmdline, "rb") as f:
                if f.read() != self._args:
                    return  # gone
            with open(self._status) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self._peak_kb = max(self._peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass  # exited between the two reads

    def stop(self) -> float:
        """The peak in MB (call once the child has exited; it is then no longer read)."""
        self._done.set()
        self._thread.join()
        if not self._peak_kb:
            raise RuntimeError("the child's peak RSS was never read (it exited within 10 ms?)")
        return self._peak_kb / 1024


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


class Verdict(enum.Enum):
    """A goal's judgement. UNKNOWN is a judgement without the evidence for it: never a pass."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


EXIT_FAILED = 1
"""A goal failed (whatever else was unknown): the harness is slower than its goal."""
EXIT_UNKNOWN = 3
"""No goal failed, but one could not be judged (the machine was too busy): run it again on a quiet one."""


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
    unknown: str = ""
    """Why the figure cannot be judged (``machine too busy to judge: ...``); empty when it can."""

    @property
    def verdict(self) -> Verdict:
        if self.unknown:
            return Verdict.UNKNOWN
        ok = self.measured >= self.limit if self.higher_is_better else self.measured <= self.limit
        return Verdict.PASS if ok else Verdict.FAIL

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        spread = f" [{self.spread}]" if self.spread else ""
        unknown = f" {self.unknown}" if self.unknown else ""
        return (
            f"{self.verdict.value}  {self.name}: {self.measured:.3g}{self.unit} "
            f"(goal {op} {self.limit:g}{self.unit}){spread}{unknown}"
        )


def exit_code(goals: Sequence[Goal]) -> int:
    """0 when every goal passed; a failure beats an unknown, an unknown beats a pass (as Jepsen merges)."""
    verdicts = {g.verdict for g in goals}
    if Verdict.FAIL in verdicts:
        return EXIT_FAILED
    if Verdict.UNKNOWN in verdicts:
        return EXIT_UNKNOWN
    return 0
