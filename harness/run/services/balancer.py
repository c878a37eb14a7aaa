"""``services.balancer``: nginx in front of the replicas (or their fault proxies) (:mod:`harness.balancer`),
a run's only; on the way out it is stopped, and each attempt it sent to more than one replica is
recorded (``balancer_retry``, from its access log)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from harness.balancer import Nginx, record_retries
from harness.events import ServiceStarted, ServiceStopped
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.run.services.base import Given, Service
from harness.scenario import BALANCER_FACTS


class NginxWired(Service):
    facts = BALANCER_FACTS
    fronts = True

    def __init__(self, given: Given) -> None:
        section = given.scenario.services.balancer
        assert section is not None
        self.fronted: Sequence[int] = given.fronted
        self.nginx = Nginx(
            given.run_dir,
            list(given.fronted),
            free_port(),
            section.retry,
            max_fails=section.max_fails,
            fail_timeout_s=section.fail_timeout_s,
        )
        self.history: HistoryWriter = given.history

    @property
    def entry_port(self) -> int | None:
        return self.nginx.port

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            await self.nginx.start()
            nginx = self.nginx
            self.history.emit(ServiceStarted(service=self.facts.name, pid=nginx.pid, port=nginx.port))
            yield
        finally:
            await self._stop()

    async def _stop(self) -> None:
        await self.nginx.stop()
        self.history.emit(ServiceStopped(service=self.facts.name, pid=self.nginx.pid))
        pods = {f"127.0.0.1:{port}": f"pod-{i}" for i, port in enumerate(self.fronted)}
        record_retries(self.nginx, self.history, pods)
