"""Planned against injected faults: what the run meant to do, did, and missed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.audit.accumulators.base import POD_FAULT_KINDS, Accumulator, Event, fault_label, reads
from harness.history import EventType, FaultKind


@dataclass(frozen=True, slots=True)
class MissedFault:
    kind: str
    trigger: str
    reason: str


class FaultPlan(Accumulator):
    """Planned vs injected faults; fills ``Fold.faults``, ``Fold.faults_planned``, ``Fold.missed``,
    ``Fold.unfinished`` and ``Fold.paced``.

    Planned: the counted pod faults of ``run_started``, plus timed ones (``counted``
    false) that came due, injected or missed. Injected: every fault event by
    :func:`fault_label`, and every ``balancer_retry``, but a kill that did not
    finish (``fault_unfinished``): whether it happened is not known.
    """

    def __init__(self) -> None:
        self.injected: Counter[str] = Counter()
        self.planned: Counter[str] = Counter()
        self.missed: list[MissedFault] = []
        self.unfinished: list[MissedFault] = []
        self.paced: list[tuple[float | None, int]] = []
        """(held_s or None, attempts in flight) of each pod fault event that says how it was paced."""

    @reads(EventType.RUN_STARTED)
    def run_started(self, ev: Event) -> None:
        self.planned.update(ev.get("faults_planned") or {})

    @reads(EventType.FAULT)
    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        if kind in POD_FAULT_KINDS and ev.get("counted") is False:
            self.planned[kind] += 1  # a timed fault that came due
        if "in_flight" in ev:
            self.paced.append((ev.get("held_s"), ev["in_flight"]))
        self.injected[fault_label(ev)] += 1

    @reads(EventType.FAULT_MISSED)
    def fault_missed(self, ev: Event) -> None:
        self.missed.append(MissedFault(ev["fault"], ev.get("trigger", ""), ev.get("reason", "")))
        if ev.get("counted") is False:
            self.planned[ev["fault"]] += 1

    @reads(EventType.FAULT_UNFINISHED)
    def fault_unfinished(self, ev: Event) -> None:
        kind = ev["fault"]
        self.unfinished.append(MissedFault(kind, ev.get("trigger", ""), ev.get("reason", "")))
        if self.injected[kind] > 0:
            self.injected[kind] -= 1

    @reads(EventType.BALANCER_RETRY)
    def balancer_retry(self, ev: Event) -> None:
        self.injected[FaultKind.BALANCER_RETRY.value] += 1
