"""The supervisor keeps a pod running the way a kubelet would.

It starts the pod, waits until it is ready (it answers MCP: see
``harness.pods.ready``), and whenever the pod dies (killed by the injector, or
crashed on its own) records the exit, waits the restart delay, starts it again
and waits until it is ready. Kills go through the supervisor so that a kill, the
exit it causes and the restart are all in the history, in order, next to the
attempts they broke.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from harness import events
from harness.client.readiness import Readiness
from harness.errors import FaultUnfinished, TargetError, TargetNotReady
from harness.history import FaultKind, HistoryWriter, log_end
from harness.pods.pod import Pod
from harness.pods.ready import ReadyCheck
from harness.run.bus import Bus, PodBack, PodDied, PodGone, PodStarted


@dataclass(eq=False)
class Supervisor:
    """Owns one pod's lifecycle during a run: start, readiness, restarts, kills, stop."""

    pod: Pod
    ready_check: ReadyCheck
    history: HistoryWriter
    _: KW_ONLY
    ready_timeout_s: float
    restart_delay_s: float
    max_restarts: int
    stop_timeout_s: float
    bus: Bus = field(default_factory=Bus)
    """Where it tells the run of its pod (:mod:`harness.run.bus`): started (the file tracer seizes it
    there, before it has written anything), died (a power loss is rolled back before the restart), back
    (a checkpoint read, the liveness watch), gone (the run stops on it; where no part listens, as in a
    contract check or ``init``, that restart raises TargetNotReady)."""
    ready: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    ready_since: float = field(default=0.0, init=False)
    """``time.monotonic()`` when the pod last became ready."""
    protocol: str | None = field(default=None, init=False)
    """The protocol the pod answered in when it last became ready."""
    startup_s: float | None = field(default=None, init=False)
    """How long its last start took, to ready (``pod_ready``'s ``after_s``)."""
    ready_seq: int = field(default=-1, init=False)
    """The history seq of the pod's last ``pod_ready``."""
    kills: int = field(default=0, init=False)
    started_seq: int = field(default=-1, init=False)
    """The history seq of the pod's last ``pod_started``."""
    gone: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set when the pod did not come back from a death (``PodGone``): it will not be ready again."""
    _halted: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set by :meth:`stop`: what a supervisor whose pod did not come back waits for."""
    _killed: bool = field(default=False, init=False)
    """A kill was signalled and its exit not seen yet: that exit is the kill's, even during stop."""
    _last_kill: dict[str, Any] = field(default_factory=dict, init=False)
    """The last kill's fault event (kind, pid, trigger, seq): what ``fault_unfinished`` names."""
    _power_loss: bool = field(default=False, init=False)
    """The last kill was a power loss, and the file tracer has not rolled the data back yet."""
    paused: bool = field(default=False, init=False)
    restarts: int = field(default=0, init=False)
    _stopping: bool = field(default=False, init=False)
    _grace_timers: dict[int, asyncio.TimerHandle] = field(default_factory=dict, init=False)
    """pid -> the SIGKILL due after its grace period; cancelled once that instance exits."""

    async def start(self) -> None:
        """Start the pod and wait until it is ready; TargetNotReady (with its log tail) if it is not."""
        started = time.monotonic()
        pid = await self.pod.start()
        self.started_seq = self.history.emit(
            events.PodStarted(pod=self.pod.name, pid=pid, **self.pod.identity())
        )
        await self.bus.publish(PodStarted(self.pod.name, pid))
        waiter = asyncio.ensure_future(self.pod.wait())
        try:
            readiness = await self.ready_check.wait(
                self.pod, timeout_s=self.ready_timeout_s, alive=lambda: not waiter.done()
            )
            if readiness.exited and not waiter.done():
                # The channel closed first (stdio); the exit itself follows at once.
                await asyncio.wait({waiter}, timeout=self.stop_timeout_s)
        finally:
            if not waiter.done():
                waiter.cancel()
        if not readiness.ready:
            self._not_ready(readiness, pid, waiter)
            return
        self.protocol = readiness.protocol
        self.startup_s = round(time.monotonic() - started, 4)
        self.ready_seq = self.history.emit(
            events.PodReady(pod=self.pod.name, pid=pid, after_s=self.startup_s, protocol=readiness.protocol)
        )
        self.ready_since = time.monotonic()
        self.ready.set()

    def _not_ready(self, readiness: Readiness, pid: int, waiter: asyncio.Future[int]) -> None:
        """Record why a start did not become ready; raises unless the harness is stopping the pod."""
        if readiness.exited and waiter.done() and not waiter.cancelled():
            rc = waiter.result()
            if self._stopping:
                self.history.emit(events.PodStopped(pod=self.pod.name, pid=pid, returncode=rc))
                return
            self.history.emit(events.PodExited(pod=self.pod.name, pid=pid, returncode=rc))
            # At its first start the store may be what is missing ({data_dir} starts empty); a restart
            # came up with the same store before.
            first = (
                ""
                if self.restarts
                else "; if it needs its store made first, see docs/how-to/your-server.md, 'A store made "
                "before the server starts'"
            )
            raise TargetNotReady(
                f"target pod {self.pod.name} exited with code {rc} before it was ready "
                f"(log: {getattr(self.pod, 'log_path', '?')}){first}",
                details=self.pod.log_tail(),
            )
        if self._stopping:
            return
        if readiness.fatal is not None:
            raise TargetNotReady(
                f"target pod {self.pod.name} did not {self.ready_check.describe()}: {readiness.fatal}",
                details=self.pod.log_tail(),
            )
        answered = ""
        if readiness.last is not None and readiness.last.message:
            answered = f"; it last answered: {readiness.last.message}"
        # Its first start: the command or the timeout may be wrong. A restart: the same command came up
        # before, and the server is what did not.
        hint = "" if self.restarts else " (raise target.ready_timeout_s or check the command)"
        raise TargetNotReady(
            f"target pod {self.pod.name} did not {self.ready_check.describe()} within "
            f"{self.ready_timeout_s:g}s{answered}{hint}",
            details=self.pod.log_tail(),
        )

    async def supervise(self) -> None:
        """Restart the pod whenever it exits, until :meth:`stop`. Raises TargetError if it cannot."""
        while True:
            pid = self.pod.pid
            try:
                rc = await self.pod.wait()
            except FaultUnfinished as exc:
                self._unfinished(exc)
                if self._stopping:
                    return  # the run ended while its kill ran: it is inconclusive, not failed
                raise
            self.ready.clear()
            if pid is not None and (timer := self._grace_timers.pop(pid, None)) is not None:
                timer.cancel()  # it stopped within its grace period: no SIGKILL for its successor
            if self._stopping and not self._killed:
                self.history.emit(events.PodStopped(pod=self.pod.name, pid=pid, returncode=rc))
                return
            self._killed = False
            self.history.emit(events.PodExited(pod=self.pod.name, pid=pid, returncode=rc))
            if self._stopping:
                # A kill's victim whose exit was seen only as the run stopped (a Kubernetes pod's
                # exit is polled): its exit is the kill's, and nothing is restarted.
                return
            if self.restarts >= self.max_restarts:
                raise TargetError(
                    f"target pod {self.pod.name} exited (code {rc}) after {self.restarts} restarts, "
                    "the limit (target.max_restarts)",
                    details=self.pod.log_tail(),
                )
            await self.bus.publish(PodDied(self.pod.name))
            await asyncio.sleep(self.restart_delay_s)
            if self.stopping:
                return
            self.restarts += 1
            try:
                await self.start()
            except TargetNotReady as exc:
                if not self.bus.heard(PodGone):
                    raise
                self._gone(exc)
                await self._halted.wait()  # the run stops on it; the pod stays as it is until then
                return
            if self.ready.is_set():
                self.bus.tell(PodBack(self.pod.name, self.ready_seq))

    def _unfinished(self, exc: FaultUnfinished) -> None:
        """Record that the last kill did not finish (``fault_unfinished``): its exit will not come."""
        self._killed = False
        self.history.emit(events.FaultUnfinished(pod=self.pod.name, reason=exc.message, **self._last_kill))

    def _gone(self, exc: TargetNotReady) -> None:
        """Record a pod that did not come back from its death, and tell the run (``PodGone``)."""
        self.history.emit(
            events.PodUnavailable(
                pod=self.pod.name,
                ready_seq=self.started_seq,
                came_back=False,
                why=exc.message,
                for_s=self.ready_timeout_s,
                failed=0,
                locks=[],
                message=log_end(exc.details or ""),  # its last lines: the error after a traceback
            )
        )
        self.gone.set()
        self.bus.tell(
            PodGone(self.pod.name, f"{self.pod.name} did not come back after it died: {exc.message}")
        )

    @property
    def stopping(self) -> bool:
        """Set by :meth:`stop`, possibly while another task is in :meth:`supervise`."""
        return self._stopping

    def pause(self, *, duration_s: float, trigger: str, **details: Any) -> bool:
        """Freeze the pod, if it is up and ready; records the fault. The caller resumes it."""
        if not self.ready.is_set() or self.pod.pid is None:
            return False
        self.history.emit(
            events.PodFault(
                fault=FaultKind.PAUSE,
                pod=self.pod.name,
                pid=self.pod.pid,
                trigger=trigger,
                duration_s=duration_s,
                **details,
            )
        )
        if not self.pod.pause():
            return False
        self.paused = True
        return True

    def resume(self) -> None:
        if self.paused:
            self.pod.resume()
            self.paused = False
            self.history.emit(events.PodResumed(pod=self.pod.name, pid=self.pod.pid))

    def kill(
        self,
        *,
        trigger: str,
        sig: str = "SIGKILL",
        grace_s: float = 0.0,
        kind: FaultKind = FaultKind.KILL,
        power_loss: bool = False,
        before: Callable[[], None] | None = None,
        **details: Any,
    ) -> bool:
        """Signal the pod now, if it is up and ready; records the fault. False when nothing was signalled.

        SIGKILL is a crash. Any other signal is a graceful stop as a deployment gives it: the
        pod is marked not ready at once (a balancer sends it nothing more), may finish what it
        has, and gets SIGKILL after ``grace_s`` if it is still running then. A ``power_loss`` kill is
        recorded so, and :meth:`take_power_loss` tells the file tracer, which rolls the data directory
        back before the restart (``faults.kill.power_loss``). ``before`` records
        what was observed just before (a checkpoint read), once the signal went out: the event
        right before the fault's.
        """
        if not self.ready.is_set() or self.pod.pid is None:
            return False
        pid = self.pod.pid
        if not self.pod.kill(sig):
            return False
        self.kills += 1
        self._killed = True
        self.ready.clear()
        if sig != "SIGKILL":
            details = {"signal": sig, "grace_s": grace_s, **details}
        if power_loss:
            self._power_loss = True
            details = {"power_loss": True, **details}
        if before is not None:
            before()
        seq = self.history.emit(
            events.PodFault(fault=kind, pod=self.pod.name, pid=pid, trigger=trigger, **details)
        )
        self._last_kill = {"fault": kind, "pid": pid, "trigger": trigger, "fault_seq": seq}
        if sig != "SIGKILL":
            # Counted from the fault as the history records it, not from the signal before it (a loaded
            # machine once put 9 ms between them): by the record too, the pod never gets less than its grace.
            self._grace_timers[pid] = asyncio.get_running_loop().call_later(grace_s, self._grace_over, pid)
        return True

    def take_power_loss(self) -> bool:
        """Whether the last kill was a power loss (once: it is taken), for the file tracer."""
        taken, self._power_loss = self._power_loss, False
        return taken

    def _grace_over(self, pid: int) -> None:
        """The grace period of a graceful stop ended and that instance still runs: SIGKILL it."""
        self._grace_timers.pop(pid, None)
        if self.pod.pid == pid and self.pod.kill("SIGKILL"):
            self.history.emit(events.PodGraceExpired(pod=self.pod.name, pid=pid))

    async def stop(self) -> None:
        self._stopping = True
        self._halted.set()
        for timer in self._grace_timers.values():
            timer.cancel()
        self.resume()
        self.ready.clear()
        await self.ready_check.close()  # first: a stdio channel that ends with the stop is no loss
        await self.pod.stop(self.stop_timeout_s)
