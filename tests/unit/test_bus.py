"""The run's bus: typed events reach the parts that subscribed to their type, in order, awaited where
they may wait; and the driver's scheduler in a run hears every attempt and tells the liveness watch."""

from __future__ import annotations

import asyncio

import pytest

from harness.history import Outcome
from harness.run.bus import AttemptEnded, Bus, PodBack, PodDied, PodGone, PodStarted


def test_each_event_reaches_its_types_handlers_in_the_order_they_subscribed() -> None:
    bus = Bus()
    heard: list[str] = []
    bus.subscribe(PodBack, lambda back: heard.append(f"first {back.pod}"))
    bus.subscribe(PodBack, lambda back: heard.append(f"second {back.ready_seq}"))
    bus.subscribe(PodGone, lambda gone: heard.append("never"))
    bus.tell(PodBack("pod-0", 7))
    assert heard == ["first pod-0", "second 7"]
    assert bus.heard(PodGone)
    assert not bus.heard(PodStarted)


def test_publish_awaits_a_handler_that_waits_before_the_next_runs() -> None:
    """A rollback must be over before the pod starts again: the next handler, and the publisher, wait."""
    bus = Bus()
    order: list[str] = []

    async def rollback(died: PodDied) -> None:
        await asyncio.sleep(0.01)
        order.append(f"rolled back {died.pod}")

    bus.subscribe(PodDied, rollback)
    bus.subscribe(PodDied, lambda died: order.append("then this"))

    async def supervisor() -> None:
        await bus.publish(PodDied("pod-0"))
        order.append("restart")

    asyncio.run(supervisor())
    assert order == ["rolled back pod-0", "then this", "restart"]


def test_tell_refuses_a_handler_that_would_wait() -> None:
    bus = Bus()

    async def waits(ended: AttemptEnded) -> None:
        await asyncio.sleep(0)

    bus.subscribe(AttemptEnded, waits)
    with pytest.raises(TypeError, match="must not wait"):
        bus.tell(AttemptEnded(Outcome.OK, 0.1))
