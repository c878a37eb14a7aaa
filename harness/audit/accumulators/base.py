"""What an accumulator is, the handlers table the fold dispatches on, and the constants they share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from harness.history import POD_FAULTS, FaultKind

CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""


MAX_MESSAGES = 100
"""Distinct error messages kept per outcome; the rest are counted together."""


OTHER_MESSAGES = "(other messages)"


MAX_UNPLANNED_INTENTS = 10_000_000
"""Intents a history without a ``run_started`` may index (one that has one may index only its plan)."""


POD_FAULT_KINDS = frozenset(k.value for k in POD_FAULTS)


Event = Mapping[str, Any]


Handler = Callable[[Event], None]


class Accumulator(Protocol):
    def handlers(self) -> Mapping[str, Handler]:
        """Event type -> what to do with one, for the event types this accumulator reads."""
        ...


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
