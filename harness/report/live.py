"""The live status line of a run in progress: on a terminal it rewrites itself, in CI logs it repeats.

It renders a :class:`Snapshot` the runner takes of its parts; it knows nothing
of drivers or pods, only of the numbers a person watching a run wants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float
    """Seconds since the run started."""
    finished: int
    planned: int
    attempts: int
    in_flight: int
    pod_faults_done: int
    pod_faults_planned: int
    pod_ready: bool
    holding: bool = False
    """A due fault holds dispatching (waiting for the pod)."""

    def line(self) -> str:
        return (
            f"[{self.t:7.1f}s] intents {self.finished}/{self.planned} "
            f"({self.finished / max(1, self.planned):.0%})"
            f" · attempts {self.attempts} · in flight {self.in_flight}"
            f" · pod faults {self.pod_faults_done}/{self.pod_faults_planned}"
            f" · pod {'ready' if self.pod_ready else 'DOWN'}"
            + (" · holding for a fault" if self.holding else "")
        )


class LiveStatus:
    """Prints the snapshot every ``interval_s`` (at least every 5 s when not on a terminal)."""

    def __init__(self, out: TextIO, interval_s: float) -> None:
        self.out = out
        self.tty = out.isatty()
        self.interval_s = interval_s if self.tty else max(interval_s, 5.0)

    async def run(self, snapshot: Callable[[], Snapshot]) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.show(snapshot())

    def show(self, snap: Snapshot) -> None:
        if self.tty:
            self.out.write("\r" + snap.line().ljust(100))
        else:
            self.out.write(snap.line() + "\n")
        self.out.flush()

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()
