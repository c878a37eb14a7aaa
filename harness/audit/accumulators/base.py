"""What an accumulator is, the handlers table the fold dispatches on, and the constants they share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import FunctionType
from typing import Any, ClassVar, TypeVar

from harness.faultkinds.registry import SCHEDULED
from harness.history import EventType, FaultKind

CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""


MAX_MESSAGES = 100
"""Distinct error messages kept per outcome; the rest are counted together."""


OTHER_MESSAGES = "(other messages)"


MAX_UNPLANNED_INTENTS = 10_000_000
"""Intents a history without a ``run_started`` may index (one that has one may index only its plan)."""


POD_FAULT_KINDS = frozenset(k.value for k in SCHEDULED)
"""The faults written as a pod's (the injector's); the others are a call's."""


Event = Mapping[str, Any]


Handler = Callable[[Event], None]


H = TypeVar("H", bound=Callable[..., None])

_DECLARED: dict[object, tuple[str, ...]] = {}
"""Each method declared with :func:`reads` -> the event types it reads."""


def reads(*event_types: EventType) -> Callable[[H], H]:
    """Declares an accumulator's method its handler of each event of ``event_types``: the event type
    stands on the code that reads it, and a handler cannot be written and left out of a list."""

    def declare(method: H) -> H:
        _DECLARED[method] = tuple(str(t) for t in event_types)
        return method

    return declare


class Accumulator:
    """One concern of the history; its handlers are its methods declared with :func:`reads`."""

    _reads: ClassVar[Mapping[str, str]] = {}
    """Event type -> the name of the method that reads it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        methods = [(name, f) for name, f in vars(cls).items() if isinstance(f, FunctionType)]
        declared = [(t, name) for name, f in methods for t in _DECLARED.get(f, ())]
        if len(dict(declared)) < len(declared):
            raise TypeError(f"{cls.__name__} declares two handlers of one event type")
        cls._reads = {**cls._reads, **dict(declared)}

    def handlers(self) -> Mapping[str, Handler]:
        """Event type -> what to do with one, for the event types this accumulator reads."""
        return {t: getattr(self, name) for t, name in self._reads.items()}


def dispatch(accumulators: Iterable[Accumulator]) -> dict[str, tuple[Handler, ...]]:
    """Event type -> the handlers of every accumulator that reads it, in the accumulators' order."""
    table: dict[str, list[Handler]] = {}
    for accumulator in accumulators:
        for event_type, handler in accumulator.handlers().items():
            table.setdefault(str(event_type), []).append(handler)
    return {event_type: tuple(handlers) for event_type, handlers in table.items()}


def fault_label(ev: Event) -> str:
    """The kind a fault event is counted and blamed as.

    A ``sever_response`` the proxy cut before the server had sent its whole
    response is ``sever_mid_stream``: the handler was still running (in SSE mode
    it was cancelled), so what it left behind is a different finding.
    """
    kind: str = ev["fault"]
    if kind == FaultKind.SEVER_RESPONSE and "id" in ev and ev.get("server_done") is False:
        return FaultKind.SEVER_MID_STREAM.value
    return kind
