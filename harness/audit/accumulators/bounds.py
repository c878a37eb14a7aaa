"""The run's start, end and duration."""

from __future__ import annotations

from typing import Any

from harness.audit.accumulators.base import Accumulator, Event, reads
from harness.history import EventType


class RunBounds(Accumulator):
    """The run's start and end; fills ``Fold.run``, ``ended``, ``collect_error`` and ``duration_s``.

    The duration is the time of the last attempt event, pod exit or run end
    (the fold passes the last attempt's time to :meth:`duration_s`).
    """

    def __init__(self) -> None:
        self.run: dict[str, Any] = {}
        self.ended: dict[str, Any] | None = None
        self.collect_error: str | None = None
        """Why the final read of a live effect source failed, if it did (effects_collected)."""
        self.t = 0.0
        """Time of the last pod exit or run end."""

    @reads(EventType.RUN_STARTED)
    def run_started(self, ev: Event) -> None:
        self.run = dict(ev)

    @reads(EventType.POD_EXITED)
    def exited(self, ev: Event) -> None:
        self.t = ev["t"]

    @reads(EventType.EFFECTS_COLLECTED)
    def effects_collected(self, ev: Event) -> None:
        self.collect_error = ev.get("error")

    @reads(EventType.RUN_ENDED)
    def run_ended(self, ev: Event) -> None:
        self.ended = dict(ev)
        self.t = ev["t"]

    def duration_s(self, last_attempt_t: float) -> float:
        return float(max(self.t, last_attempt_t))
