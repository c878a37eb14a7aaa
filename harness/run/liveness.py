"""Liveness: a pod that is up and answers no call is a finding, and ends the run.

A server whose kill left a stale lock (a ``git commit`` cut short leaves
``.git/index.lock``, a writer its ``.lock`` file) may start, pass its readiness
check and then answer no call at all: every attempt times out, intents give up
one by one, and a run of a few seconds grinds for many minutes. That is the
finding, *unavailable*: a person must recover the server. It may also answer a
call or two first (a read that needs no lock) and then none: a git-backed store
answered one call after its restart and timed out on every other for 11
minutes. So the run watches, at any time, whether calls are answered (a result,
a tool error, a question: the server's own answer to the call). When none has
been for ``target.unavailable_after_s`` (and at least ``SLOWEST_FACTOR`` times
the slowest call answered before) while calls are in flight and attempts kept
failing, it records a ``pod_unavailable`` event (the pod, since when, the
attempts that failed, the calls it answered since it came back, the pod log's
last lines, the lock-like files written in its data directory since the last
answer before the fault) and stops the run: no more intents start, the ones in
flight end, and the run is audited as any other. The silence starts again when
a pod comes back from a fault, and is not watched while a pod is down or paused
(a fault's silence, not the server's). Watched over the whole run, not per
replica: with a balancer, other replicas answering keep it alive.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.events import PodUnavailable
from harness.history import HistoryWriter, Outcome, log_end
from harness.pods.supervisor import Supervisor

ANSWERS = frozenset({Outcome.OK, Outcome.TOOL_ERROR, Outcome.INPUT_REQUIRED})
"""What the server answers a call it ran: anything else (a timeout, a dropped connection, an HTTP
error) is an attempt it did not answer."""
SLOWEST_FACTOR = 5.0
MIN_FAILED = 2
"""Failed attempts since the restart before a pod can be called unavailable (one may be unlucky)."""
TICK_S = 0.25
LOCKS = ("*.lock", "*.lck", "LOCK", "*-journal", "*.pid", "lockfile")
"""Names of files that hold a lock (or a transaction in flight) for a process: left behind by a kill,
they stop the next start."""
LOCK_SLACK_S = 1.0
"""How much earlier than the last answer before the fault a lock file may have been written and still
be the fault's: a file's time is the kernel's coarse clock (a tick behind), and with calls in flight
the last answer is read a moment after the save that died took its lock (a race that hid the lock
from a quality test under load)."""
SCAN_LIMIT = 20_000
"""Entries of the data directory looked at, at most (a store of millions of files is not walked)."""
LOG_LINES = 20
"""Of the pod's log, read when it is found unavailable (repeats are said once)."""


def lock_files(directory: Path, since_wall: float) -> list[str]:
    """Lock-like files under ``directory`` changed at or after ``since_wall`` (Unix seconds), as paths
    relative to it; bounded by ``SCAN_LIMIT``."""
    found: list[str] = []
    seen = 0
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > SCAN_LIMIT:
                return found
            if not any(fnmatch.fnmatch(name, pattern) for pattern in LOCKS):
                continue
            path = Path(root) / name
            try:
                if path.stat().st_mtime >= since_wall:
                    found.append(str(path.relative_to(directory)))
            except OSError:
                continue
    return found


def said_once(tail: str) -> str:
    """A log's last lines with repeats said once (``line (x5)``): a server that waits says so often."""
    lines: list[tuple[str, int]] = []
    for line in tail.splitlines():
        if lines and lines[-1][0] == line:
            lines[-1] = (line, lines[-1][1] + 1)
        elif line.strip():
            lines.append((line, 1))
    return "\n".join(line if n == 1 else f"{line} (x{n})" for line, n in lines)


class Liveness:
    """Watches that calls are answered while they are made; stops the run once they have not been."""

    def __init__(
        self,
        supervisors: Sequence[Supervisor],
        history: HistoryWriter,
        *,
        after_s: float,
        data_dir: Path,
        in_flight: Callable[[], int] = lambda: 1,
    ) -> None:
        self.supervisors = list(supervisors)
        self.history = history
        self.after_s = after_s
        self.data_dir = data_dir
        self.in_flight = in_flight
        """Calls in flight now (the driver's count): silence while none is made is no finding."""
        self.slowest_s = 0.0
        self.unavailable: str | None = None
        """Why the run stopped, once a pod was found unavailable."""
        self._answered_wall = time.time()
        self._answered_before_restart_wall = self._answered_wall
        self._since = time.monotonic()
        """When the silence being watched began: the last answer, or the last restart or pause after it
        (a pod just back, or frozen by a fault, has had no chance to answer)."""
        self._restart: tuple[str, int] | None = None
        """(pod, its pod_ready seq) of the last restart, until a call is answered."""
        self._answered_since_ready = 0
        """Calls answered since the last pod came back (a wedge may come after a few)."""
        self._failed = 0
        """Attempts that got no answer since the silence began."""

    # -- what the driver and the supervisors tell
    def attempt(self, outcome: Outcome, took_s: float) -> None:
        """An attempt ended (the driver's every attempt)."""
        if outcome in ANSWERS:
            self._since, self._answered_wall = time.monotonic(), time.time()
            self.slowest_s = max(self.slowest_s, took_s)
            self._restart, self._failed = None, 0
            self._answered_since_ready += 1
        else:
            self._failed += 1

    def restarted(self, pod: str, ready_seq: int) -> None:
        """A pod that died is ready again (a supervisor's restart): its silence starts now."""
        if self._restart is None:
            self._answered_before_restart_wall = self._answered_wall
        self._restart = (pod, ready_seq)
        self._since = time.monotonic()
        self._failed = self._answered_since_ready = 0

    @property
    def bound_s(self) -> float:
        return max(self.after_s, SLOWEST_FACTOR * self.slowest_s)

    # -- the watch
    async def watch(self, stop: Callable[[str], None]) -> None:
        """Until cancelled: check every ``TICK_S``; on the first unavailable pod, record it and ``stop``."""
        while self.unavailable is None:
            await asyncio.sleep(TICK_S)
            self.check(stop)

    def check(self, stop: Callable[[str], None]) -> None:
        """Record an unavailable pod and ``stop`` when calls are in flight, at least ``MIN_FAILED`` failed,
        and none was answered for ``bound_s``, by a pod that is up (not down after a kill, nor paused)."""
        if any(s.paused for s in self.supervisors):  # a pause is a fault, and its silence the fault's
            self._since, self._failed = time.monotonic(), 0
            return
        if self.unavailable is not None or self._failed < MIN_FAILED or not self.in_flight():
            return
        silent_s = time.monotonic() - self._since
        supervisor = self._silent()
        if silent_s < self.bound_s or supervisor is None:
            return
        pod = supervisor.pod.name
        ready_seq = self._restart[1] if self._restart is not None else supervisor.ready_seq
        locks = (
            lock_files(self.data_dir, self._answered_before_restart_wall - LOCK_SLACK_S)
            if self.data_dir.is_dir()
            else []
        )
        self.history.emit(
            PodUnavailable(
                pod=pod,
                ready_seq=ready_seq,
                for_s=round(silent_s, 3),
                failed=self._failed,
                answered=self._answered_since_ready,
                bound_s=round(self.bound_s, 3),
                locks=locks,
                message=log_end(said_once(supervisor.pod.log_tail(LOG_LINES))),
            )
        )
        held = f"; lock-like files since the fault: {', '.join(locks[:5])}" if locks else ""
        since = "its restart" if self._restart is not None else "its last answer"
        self.unavailable = (
            f"{pod} answered no call for {silent_s:.0f}s after {since} ({self._failed} attempts failed){held}"
        )
        stop(self.unavailable)

    def _silent(self) -> Supervisor | None:
        """The pod the silence is blamed on: the one last restarted, else the first that is up; None while
        it is down (dying, or not ready yet: a kill's, not a wedge)."""
        if self._restart is not None:
            found = next((s for s in self.supervisors if s.pod.name == self._restart[0]), None)
        else:
            found = next((s for s in self.supervisors if s.ready.is_set()), None)
        return found if found is not None and found.ready.is_set() else None
