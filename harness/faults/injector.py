"""The fault injector: runs the schedule against the pods while the driver runs.

It is the harness's nemesis. It never talks to the auditor; everything it does
goes into the history through the supervisor. A kill that comes due while the
pod is down waits until the pod is back, ready, and has been up for
``min_uptime_s``, so every planned kill hits a serving pod (a kill of a dead
pod would measure nothing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from harness.faults.schedule import PlannedFault
from harness.faults.supervisor import Supervisor
from harness.history import HistoryWriter


class Injector:
    def __init__(
        self,
        schedule: Sequence[PlannedFault],
        supervisor: Supervisor,
        history: HistoryWriter,
        *,
        min_uptime_s: float = 0.0,
        pause_min_uptime_s: float = 0.0,
    ) -> None:
        self.schedule = list(schedule)
        self.min_uptime_s = min_uptime_s
        self.pause_min_uptime_s = pause_min_uptime_s
        self.supervisor = supervisor
        self.history = history
        self.done = 0
        self._dispatched = 0
        self._progress = asyncio.Event()

    def on_dispatch(self, dispatched: int) -> None:
        """Called by the driver each time an intent is dispatched (hot path: O(1))."""
        self._dispatched = dispatched
        self._progress.set()

    async def _until_dispatched(self, n: int) -> None:
        while self._dispatched < n:
            self._progress.clear()
            await self._progress.wait()

    async def run(self) -> None:
        """Execute every planned fault in order; cancelled when the driver finishes."""
        for fault in self.schedule:
            if fault.after_intents is not None:
                await self._until_dispatched(fault.after_intents)
            elif fault.at_s is not None:
                await asyncio.sleep(max(0.0, fault.at_s - self.history.now()))
            min_uptime = self.pause_min_uptime_s if fault.kind == "pause" else self.min_uptime_s
            while True:
                await self.supervisor.ready.wait()
                uptime = time.monotonic() - self.supervisor.ready_since
                if uptime < min_uptime:
                    await asyncio.sleep(min_uptime - uptime)
                    continue
                if fault.delay_s:
                    await asyncio.sleep(fault.delay_s)
                if fault.kind == "kill" and self.supervisor.kill(fault.describe()):
                    break
                if fault.kind == "pause" and self.supervisor.pause(fault.describe(), fault.duration_s):
                    try:
                        await asyncio.sleep(fault.duration_s)
                    finally:
                        self.supervisor.resume()  # the heal step always runs, even when cancelled
                    break
                # The pod went down during the delay: wait for it to be back, then try again.
            self.done += 1
