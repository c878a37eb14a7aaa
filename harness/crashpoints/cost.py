"""What a try of an exploration cost, read back from its run's history.

An exploration is paid for in tries, and a try in restarts: saying where its
seconds go tells a user what ``--jobs``, ``--repeat`` or a faster-starting server
would buy. A try's time is cut at the events the run recorded anyway: the kill
(the ``fault`` event while held), the pod's exit, its readiness again, and the
end of the intent:

* **kill**: from the kill to the pod's exit (SIGKILL, reaped);
* **restart**: from its exit to ready again (the restart and the ready check);
* **retry**: from ready to the intent's end (the client's retries landing, the
  call run again), or to the next kill of a path of two;
* **audit**: the store reads the exploration makes around the try
  (``effects_checkpoint``: after the restart, and before the next call), and the
  try's share of the run's audit (its time over the run's intents).

Pure: a function of the events and the audit's time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.history import EventType

PHASES = ("kill", "restart", "retry", "audit")
"""A try's phases, in the order it passes them."""


@dataclass(frozen=True, slots=True)
class TryCost:
    """Seconds one try spent in each phase (see the module's docstring)."""

    intent: int
    kill: float
    restart: float
    retry: float
    audit: float

    @property
    def total(self) -> float:
        return self.kill + self.restart + self.retry + self.audit

    def phase(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass
class _Open:
    """A try being read: its phases so far, and where the current phase began."""

    kill: float = 0.0
    restart: float = 0.0
    retry: float = 0.0
    reads: float = 0.0
    killed_at: float | None = None
    killed_pid: object = None
    exited_at: float | None = None
    ready_at: float | None = None


def try_costs(events: Iterable[Mapping[str, Any]], tries: Iterable[int], audit_s: float) -> list[TryCost]:
    """The cost of each of ``tries`` (intents held and killed) in a history, one call at a time; an
    intent whose kill the history does not show (the run ended first) has none."""
    wanted = set(tries)
    open_: dict[int, _Open] = {}
    ended: dict[int, _Open] = {}
    intents = 0
    current: int | None = None
    for ev in events:
        typ, t = ev.get("type"), float(ev.get("t", 0.0))
        if typ == EventType.INTENT_STARTED:
            intents += 1
            current = int(ev["intent"])
            if current in wanted:
                open_[current] = _Open()
            continue
        one = open_.get(current) if current is not None else None
        if one is None:
            continue
        if typ == EventType.FAULT and ev.get("fault") == "kill":
            if one.ready_at is not None:  # a path of two: the retry ran until this second kill
                one.retry += t - one.ready_at
                one.ready_at = None
            one.killed_at, one.killed_pid = t, ev.get("pid")
        elif typ == EventType.POD_EXITED and one.killed_at is not None and ev.get("pid") == one.killed_pid:
            one.kill += t - one.killed_at
            one.killed_at, one.exited_at = None, t
        elif typ == EventType.POD_READY and one.exited_at is not None:
            one.restart += t - one.exited_at
            one.exited_at, one.ready_at = None, t
        elif typ == EventType.INTENT_ENDED and current is not None and int(ev["intent"]) == current:
            if one.ready_at is not None:
                one.retry += t - one.ready_at
                one.ready_at = None
            ended[current] = one
        elif typ == EventType.EFFECTS_CHECKPOINT:
            one.reads += float(ev.get("took_s") or 0.0)
    share = audit_s / intents if intents else 0.0
    return [
        TryCost(intent, one.kill, one.restart, one.retry, one.reads + share)
        for intent, one in sorted(ended.items())
        if one.kill or one.restart
    ]


def medians(costs: Sequence[TryCost]) -> dict[str, float]:
    """Per phase (and ``total``), the median over the tries; empty without a try."""
    if not costs:
        return {}
    found = {name: statistics.median(c.phase(name) for c in costs) for name in PHASES}
    found["total"] = statistics.median(c.total for c in costs)
    return found
