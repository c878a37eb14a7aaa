"""2025 sessions and resumed streams, a lost session blamed on the last disruption."""

from __future__ import annotations

from collections import Counter

from harness.audit.accumulators.base import Accumulator, Event, reads
from harness.audit.accumulators.pods import PodDisruptions
from harness.history import EventType


class Sessions(Accumulator):
    """2025 sessions and resumed streams; fills ``Fold.sessions_opened``, ``sessions_lost``, ``resumed``.

    A session the server forgot is blamed on the last pod disruption before the
    loss (``none`` if there was none: the server forgot it by itself).
    """

    def __init__(self, disruptions: PodDisruptions) -> None:
        self.disruptions = disruptions
        self.opened = 0
        self.lost: Counter[str] = Counter()
        self.resumed: Counter[bool] = Counter()
        """Broken event streams a 2025 client tried to resume: True resumed, False failed (re-issued)."""

    @reads(EventType.SESSION_OPENED)
    def session_opened(self, ev: Event) -> None:
        self.opened += 1

    @reads(EventType.SESSION_LOST)
    def session_lost(self, ev: Event) -> None:
        self.lost[self.disruptions.last_kind()] += 1

    def attempt_resumed(self, ev: Event) -> None:
        """An ``attempt_ended`` with ``resumed`` (the fold calls this from its hot path)."""
        self.resumed[ev["resumed"]] += 1
