"""Pods back from a fault that answered no call."""

from __future__ import annotations

from dataclasses import dataclass

from harness.audit.accumulators.base import Accumulator, Event, reads
from harness.history import EventType


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A pod back from a fault that answered no call, or that never came back (``pod_unavailable``):
    the run stopped on it."""

    seq: int
    t: float
    pod: str
    ready_seq: int
    """Its restart's ``pod_ready`` (or ``pod_started``, of one never ready): the pod fault before it is
    what it did not recover from."""
    for_s: float
    failed: int
    locks: list[str]
    log: str
    """The pod log's last lines when it was found (redacted, cut)."""
    came_back: bool = True
    """False: its restart never became ready (it exited as it started, or never answered), ``why``."""
    why: str = ""
    answered: int = 0
    """Calls it answered after it came back, before its silence (a wedge that came after a few)."""


class Unavailability(Accumulator):
    """Pods found unavailable after a fault (``harness.run.liveness``); fills ``Fold.unavailable``."""

    def __init__(self) -> None:
        self.found: list[Unavailable] = []

    @reads(EventType.POD_UNAVAILABLE)
    def unavailable(self, ev: Event) -> None:
        locks = ev.get("locks")
        self.found.append(
            Unavailable(
                seq=int(ev.get("seq", -1)),
                t=float(ev["t"]),
                pod=str(ev.get("pod", "")),
                ready_seq=int(ev.get("ready_seq", -1)),
                for_s=float(ev.get("for_s", 0.0)),
                failed=int(ev.get("failed", 0)),
                locks=[str(x) for x in locks] if isinstance(locks, list) else [],
                log=str(ev.get("message") or ""),
                came_back=ev.get("came_back") is not False,
                why=str(ev.get("why") or ""),
                answered=int(ev.get("answered") or 0),
            )
        )
