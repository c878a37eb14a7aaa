"""``services.postgres``: a throwaway PostgreSQL cluster (:mod:`harness.services`) and, in front of it,
the PostgreSQL proxy every run has (:mod:`harness.crashpoints.pgproxy`), which ``{postgres_url}`` names:
it reports each commit to the run's router (and, where the plan decides, holds it). An audit's
``{postgres_url}`` is the cluster itself: the final read is no call of the target's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from harness import rundir
from harness.crashpoints.pgproxy import ObservingRelay, PostgresProxy, postgres_proxy
from harness.crashpoints.placement import place_after_run
from harness.events import ServiceStarted, ServiceStopped
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.run.services.base import Given, Handed, Service
from harness.scenario import POSTGRES_FACTS
from harness.services import Postgres


class PostgresWired(Service):
    """The cluster, then its proxy; stopped in reverse."""

    facts = POSTGRES_FACTS
    logs = (rundir.POSTGRES_LOG,)

    def __init__(self, given: Given) -> None:
        section = given.scenario.services.postgres
        assert section is not None
        self.cluster = Postgres(given.run_dir, section.database, free_port())
        self.proxy: PostgresProxy | ObservingRelay = postgres_proxy(
            self.cluster.port, given.router, free_port(), spool=given.run_dir / rundir.RELAY_POINTS
        )
        self.history: HistoryWriter = given.history

    def handed(self) -> Handed:
        return Handed(placeholders={"postgres_url": self.proxy.url(self.cluster.database)})

    def audit_values(self) -> Mapping[str, str]:
        return {"postgres_url": self.cluster.url}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self._stop_cluster)
            await self.cluster.start()
            pg = self.cluster
            self.history.emit(ServiceStarted(service=self.facts.name, pid=pg.pid, url=pg.url))
            stack.push_async_callback(self._stop_proxy)
            await self.proxy.start()
            yield

    async def _stop_proxy(self) -> None:
        """Stop the proxy; a relay's spooled reports are then placed in the history (decision 0092)."""
        proxy = self.proxy
        await proxy.close()
        if isinstance(proxy, ObservingRelay) and proxy.spooled and proxy.spool is not None:
            place_after_run(proxy.spool, self.history)
            proxy.spool.unlink()

    async def _stop_cluster(self) -> None:
        await self.cluster.stop()
        if self.cluster.pid is not None:
            self.history.emit(ServiceStopped(service=self.facts.name, pid=self.cluster.pid))
