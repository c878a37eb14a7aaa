"""``audit.effects.sink``: the effect sink (:mod:`harness.sink`) at ``{sink_url}``, each call one effect,
reported to the run's router as a ``downstream`` point. It records nothing in the history: its calls
are in its own file (``sink.jsonl``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from harness.loopback import free_port
from harness.run.services.base import Given, Handed, Service
from harness.scenario import SINK_FACTS
from harness.sink import EffectSink


class SinkWired(Service):
    facts = SINK_FACTS

    def __init__(self, given: Given) -> None:
        section = given.scenario.audit.effects.sink
        assert section is not None
        self.sink = EffectSink(
            given.run_dir,
            section.marker_field,
            free_port(),
            dedupe_by_key=section.dedupe_by_key,
            redact=given.redact,
            router=given.router,
        )

    def handed(self) -> Handed:
        return Handed(placeholders={"sink_url": self.sink.url})

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            await self.sink.start()
            yield
        finally:
            await self.sink.close()
