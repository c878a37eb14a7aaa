"""``services.downstream``: the recording, holding proxy in front of an API the target calls
(:mod:`harness.downstream`), at ``{downstream_url}`` and ``{downstream_hostport}``, with a CA made for
the run (``{downstream_ca}``, written when the wiring is made) that the target is handed in its
environment, and a container as a read-only mount."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from harness.downstream import DownstreamProxy, ca_path_for
from harness.events import ServiceStarted
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.run.services.base import Given, Handed, Service
from harness.scenario import DOWNSTREAM_FACTS


class DownstreamWired(Service):
    facts = DOWNSTREAM_FACTS

    def __init__(self, given: Given) -> None:
        section = given.scenario.services.downstream
        assert section is not None
        self.proxy = DownstreamProxy(
            given.run_dir, section, free_port(), redact=given.redact, router=given.router
        )
        self.history: HistoryWriter = given.history
        runtime = given.scenario.target.runtime
        self.ca = ca_path_for(runtime, self.proxy.write_ca())
        """``{downstream_ca}`` as the target sees it."""
        self._mounts = {self.proxy.ca_path.resolve(): self.ca} if runtime == "docker" else {}

    def handed(self) -> Handed:
        return Handed(
            placeholders={
                "downstream_url": self.proxy.url,
                "downstream_hostport": self.proxy.hostport,
                "downstream_ca": self.ca,
            },
            env=self.proxy.target_env(self.ca),
            mounts=self._mounts,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            await self.proxy.start()
            proxy = self.proxy
            self.history.emit(ServiceStarted(service=self.facts.name, port=proxy.port, url=proxy.url))
            yield
        finally:
            await self.proxy.close()
