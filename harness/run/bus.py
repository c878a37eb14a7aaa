"""What a run's parts tell each other while it runs: typed events, and the bus they go through.

A part that something must react to (a supervisor whose pod started, died, came
back or did not; a driver whose attempt ended) publishes an event here, and the
parts that care subscribe to its type when they are made: the file tracer seizes
each instance of the pod as it starts and rolls the data back after a power loss,
the run takes a checkpoint read and restarts its liveness watch when a pod is back,
and stops when one is gone, the liveness watch counts attempts. No part is given a
callback after it was made, and none knows who listens (as schemathesis's engine
emits events that its outputs handle).

Handlers run in the order they subscribed. A handler may be a coroutine function:
:meth:`Bus.publish` awaits each in turn (a rollback must be done before the pod
starts again); :meth:`Bus.tell` is for events whose handlers must not block (the
driver's hot path, a supervisor watching its pod).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.history import Outcome


@dataclass(frozen=True, slots=True)
class PodStarted:
    """An instance of the pod started (before its readiness is checked, before it wrote anything)."""

    pod: str
    pid: int


@dataclass(frozen=True, slots=True)
class PodDied:
    """An instance of the pod died, and the next has not started."""

    pod: str


@dataclass(frozen=True, slots=True)
class PodBack:
    """The pod is ready again after it died."""

    pod: str
    ready_seq: int
    """The history seq of its ``pod_ready``."""


@dataclass(frozen=True, slots=True)
class PodGone:
    """The pod did not come back from its death (recorded as ``pod_unavailable``): it will not be ready
    again. A part that stops the run on it subscribes; where none does, the supervisor raises instead."""

    pod: str
    why: str


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An attempt ended, as the client saw it."""

    outcome: Outcome
    seconds: float


Event = PodStarted | PodDied | PodBack | PodGone | AttemptEnded
E = TypeVar("E", PodStarted, PodDied, PodBack, PodGone, AttemptEnded)
Handler = Callable[[Any], Awaitable[None] | None]


class Bus:
    """One run's events and who listens to each type."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Handler]] = {}

    def subscribe(self, kind: type[E], handler: Callable[[E], Awaitable[None] | None]) -> None:
        self._handlers.setdefault(kind, []).append(handler)

    def heard(self, kind: type[Event]) -> bool:
        """Whether any part listens to ``kind``."""
        return bool(self._handlers.get(kind))

    async def publish(self, event: Event) -> None:
        """Every handler of the event's type, in order, each awaited."""
        for handler in self._handlers.get(type(event), ()):
            result = handler(event)
            if inspect.isawaitable(result):
                await result

    def tell(self, event: Event) -> None:
        """Every handler of the event's type, none of which may wait (TypeError if one would)."""
        for handler in self._handlers.get(type(event), ()):
            if inspect.iscoroutinefunction(handler):
                raise TypeError(f"{handler!r} handles {type(event).__name__}, which must not wait")
            handler(event)
