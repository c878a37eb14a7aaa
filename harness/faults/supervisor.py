"""The supervisor keeps a pod running the way a kubelet would.

It starts the pod, waits until it answers ``server/discover``, and whenever the
pod dies (killed by the injector, or crashed on its own) records the exit,
waits the restart delay, starts it again and waits until it is ready. Kills go
through the supervisor so that a kill, the exit it causes and the restart are
all in the history, in order, next to the attempts they broke.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from harness.client import PROTOCOL_VERSION
from harness.errors import TargetError, TargetNotReady
from harness.faults.pods import Pod
from harness.history import FAULT, POD_EXITED, POD_READY, POD_RESUMED, POD_STARTED, POD_STOPPED, HistoryWriter

# The readiness probe: a 2026-07-28 server/discover request (servers MUST implement it).
DISCOVER = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}
DISCOVER_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL_VERSION,
    "Mcp-Method": "server/discover",
}


async def probe(client: httpx.AsyncClient, url: str) -> bool:
    """One readiness probe: does the endpoint answer ``server/discover`` with a result?"""
    try:
        resp = await client.post(url, json=DISCOVER, headers=DISCOVER_HEADERS)
    except httpx.HTTPError:
        return False
    if resp.status_code != 200:
        return False
    text = resp.text
    # JSON, or an SSE stream whose data line carries the result.
    return '"result"' in text


class Supervisor:
    """Owns one pod's lifecycle during a run: start, readiness, restarts, kills, stop."""

    def __init__(
        self,
        pod: Pod,
        url: str,
        history: HistoryWriter,
        *,
        ready_timeout_s: float,
        restart_delay_s: float,
        max_restarts: int,
        stop_timeout_s: float,
    ) -> None:
        self.pod = pod
        self.url = url
        self.history = history
        self.ready_timeout_s = ready_timeout_s
        self.restart_delay_s = restart_delay_s
        self.max_restarts = max_restarts
        self.stop_timeout_s = stop_timeout_s
        self.ready = asyncio.Event()
        self.ready_since = 0.0
        """``time.monotonic()`` when the pod last became ready."""
        self.kills = 0
        self.paused = False
        self.restarts = 0
        self._stopping = False
        self._http = httpx.AsyncClient(timeout=2.0)

    async def start(self) -> None:
        """Start the pod and wait until it is ready; TargetNotReady (with its log tail) if it is not."""
        started = time.monotonic()
        pid = await self.pod.start()
        self.history.emit(POD_STARTED, pod=self.pod.name, pid=pid, **self.pod.identity())
        waiter = asyncio.ensure_future(self.pod.wait())
        try:
            deadline = started + self.ready_timeout_s
            while True:
                if waiter.done():
                    rc = waiter.result()
                    if self._stopping:
                        self.history.emit(POD_STOPPED, pod=self.pod.name, pid=pid, returncode=rc)
                        return
                    self.history.emit(POD_EXITED, pod=self.pod.name, pid=pid, returncode=rc)
                    raise TargetNotReady(
                        f"target pod {self.pod.name} exited with code {rc} before it was ready "
                        f"(log: {getattr(self.pod, 'log_path', '?')})",
                        details=self.pod.log_tail(),
                    )
                if await probe(self._http, self.url):
                    break
                if time.monotonic() > deadline:
                    raise TargetNotReady(
                        f"target pod {self.pod.name} did not answer server/discover at {self.url} within "
                        f"{self.ready_timeout_s:g}s (raise target.ready_timeout_s or check the command)",
                        details=self.pod.log_tail(),
                    )
                await asyncio.sleep(0.05)
        finally:
            if not waiter.done():
                waiter.cancel()
        self.history.emit(POD_READY, pod=self.pod.name, pid=pid, after_s=round(time.monotonic() - started, 4))
        self.ready_since = time.monotonic()
        self.ready.set()

    async def supervise(self) -> None:
        """Restart the pod whenever it exits, until :meth:`stop`. Raises TargetError if it cannot."""
        while True:
            pid = self.pod.pid
            rc = await self.pod.wait()
            self.ready.clear()
            if self._stopping:
                self.history.emit(POD_STOPPED, pod=self.pod.name, pid=pid, returncode=rc)
                return
            self.history.emit(POD_EXITED, pod=self.pod.name, pid=pid, returncode=rc)
            if self.restarts >= self.max_restarts:
                raise TargetError(
                    f"target pod {self.pod.name} exited (code {rc}) after {self.restarts} restarts, "
                    "the limit (target.max_restarts)",
                    details=self.pod.log_tail(),
                )
            await asyncio.sleep(self.restart_delay_s)
            if self.stopping:
                return
            self.restarts += 1
            await self.start()

    @property
    def stopping(self) -> bool:
        """Set by :meth:`stop`, possibly while another task is in :meth:`supervise`."""
        return self._stopping

    def pause(self, trigger: str, duration_s: float) -> bool:
        """Freeze the pod, if it is up and ready; records the fault. The caller resumes it."""
        if not self.ready.is_set() or self.pod.pid is None:
            return False
        self.history.emit(
            FAULT, fault="pause", pod=self.pod.name, pid=self.pod.pid, trigger=trigger, duration_s=duration_s
        )
        if not self.pod.pause():
            return False
        self.paused = True
        return True

    def resume(self) -> None:
        if self.paused:
            self.pod.resume()
            self.paused = False
            self.history.emit(POD_RESUMED, pod=self.pod.name, pid=self.pod.pid)

    def kill(self, trigger: str) -> bool:
        """SIGKILL the pod now, if it is up and ready; records the fault. False when nothing was killed."""
        if not self.ready.is_set() or self.pod.pid is None:
            return False
        pid = self.pod.pid
        if not self.pod.kill():
            return False
        self.kills += 1
        self.ready.clear()
        self.history.emit(FAULT, fault="kill", pod=self.pod.name, pid=pid, trigger=trigger)
        return True

    async def stop(self) -> None:
        self._stopping = True
        self.resume()
        self.ready.clear()
        try:
            await self.pod.stop(self.stop_timeout_s)
        finally:
            await self._http.aclose()
