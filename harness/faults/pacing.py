"""Pacing: where a waiting pod fault holds the workload back, and when a held fault strikes.

A pod fault on the progress clock comes due after its intent and then waits for its
pod (ready, and up for ``min_uptime_s``). The workload goes on meanwhile, and against a
fast server it passes the next fault's trigger, or ends, before the fault happens: the
run did not do what it planned. Holding dispatch (no new intent starts; retries go on)
prevents that, but while the fault waits the work in flight drains, and a kill of an idle
server measures nothing. So pacing makes two decisions, both pure (an injectable clock,
no I/O) and tested without sleeping:

- *Where* a waiting fault holds dispatch (:func:`hold_points`). ``hold_dispatch: true``:
  at its own trigger (the fault lands right after its intent). ``auto``: only at the last
  point the plan allows, the next fault's trigger, or ``concurrency`` intents before the
  end of the workload (enough left to land on). A run whose faults each happen before the
  next one is due never reaches such a point, so it runs exactly as it would without.
- *When* a held fault strikes (:class:`Landing`): at once when enough is in flight;
  otherwise dispatch re-opens for a window of ``min(concurrency, intents left)`` intents and the
  fault waits, at most ``LANDING_BOUND_S``, until that many attempts are in flight (after the
  bound: one is enough), or strikes on what is in flight once the window is all out (a fast
  server answers the window's first before its last is sent). A window that all ended before the
  fault looked is followed by another, within the bound: a fault never strikes an idle server
  while there are intents left to send.

And one estimate (:func:`estimate`), for ``validate --preflight`` and ``init``: with the
server's measured call and start-up times, does the workload last long enough for every
planned kill to come in its turn, and how many intents would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from harness.scenario import HoldDispatch, Scenario

LANDING_BOUND_S = 1.0
"""How long a held fault waits, once dispatch re-opened, for a full load in flight: a fast server
fills it within one turn of the event loop; a worker still backing off may need up to a backoff."""
LANDING_POLL_S = 0.005
"""How often a landing fault looks at the work in flight between dispatches (retries start unannounced)."""


class Load(Protocol):
    """What the injector reads of the driver's live counters (``DriverStats`` has them)."""

    @property
    def planned(self) -> int: ...

    @property
    def finished(self) -> int: ...

    @property
    def in_flight(self) -> int: ...


class Paced(TypedDict, total=False):
    """How a pod fault was paced: the fields its ``fault`` event carries (read by the audit)."""

    in_flight: int
    """Attempts in flight as it struck."""
    dispatched: int
    """Intents dispatched by then (its trigger, plus what a landing let start)."""
    held_s: float
    """Only for a fault that held dispatching: how long no new intent could start."""


def hold_points(
    faults: Sequence[tuple[int, HoldDispatch]], workload_size: int | None, concurrency: int
) -> list[int | None]:
    """For each fault on the progress clock (its trigger and hold mode, in trigger order): how many
    intents are dispatched when, if it is still waiting, no new intent may start; None: never."""
    points: list[int | None] = []
    for index, (after, hold) in enumerate(faults):
        if hold == "auto":
            limits = [faults[index + 1][0]] if index + 1 < len(faults) else []
            if workload_size is not None:
                limits.append(workload_size - concurrency)
            points.append(max(after, min(limits)) if limits else None)
        else:
            points.append(after if hold else None)
    return points


@dataclass(slots=True)
class Landing:
    """A held fault whose pod is ready: when it may strike, so that it lands on work in flight."""

    concurrency: int
    clock: Callable[[], float] = time.monotonic
    began: float = field(init=False)

    def __post_init__(self) -> None:
        self.began = self.clock()

    def wanted(self, outstanding: int) -> int:
        """In flight for a full landing: every worker busy, or every intent not yet ended."""
        return max(1, min(self.concurrency, outstanding))

    def ready(self, in_flight: int, outstanding: int) -> bool:
        """Strike now? ``outstanding``: intents not ended yet (in progress or not yet dispatched)."""
        if in_flight >= self.wanted(outstanding):
            return True
        return in_flight >= 1 and self.waited_s >= LANDING_BOUND_S

    @property
    def waited_s(self) -> float:
        return self.clock() - self.began


@dataclass(frozen=True, slots=True)
class Estimate:
    """How a workload and its planned kills fit a server's measured speed (order of magnitude)."""

    workload_s: float
    """The workload's serving time at the measured call time, all workers busy (a floor: a server that
    serializes its calls takes longer)."""
    kills_s: float
    """Serving time the kills need between them: each waits ``min_uptime_s`` after the pod is back."""
    downtime_s: float
    """Time the kills keep the pod down: restart delay and start-up, each."""
    intents_unpaced: int
    """Intents that would let every kill come in its turn without holding dispatch."""

    intents: int
    """The workload it was made for."""

    @property
    def paced(self) -> bool:
        """Whether kills will likely have to hold dispatch (``auto``), or come late (``false``)."""
        return self.intents < self.intents_unpaced


def estimate(
    *,
    intents: int,
    concurrency: int,
    call_s: float,
    startup_s: float,
    restart_delay_s: float,
    kills: int,
    min_uptime_s: float,
    jitter_s: float = 0.0,
    window: tuple[float, float] = (0.05, 0.95),
) -> Estimate:
    """Kills stall the workload while the pod is down (every worker retries), so what they use up is
    serving time: each waits ``min_uptime_s`` (and its jitter) with the pod back, while the workload
    runs at full speed. A kill comes in its turn when the intents between two triggers (a slice of
    the window) last longer than that."""
    call_s = max(call_s, 1e-6)
    per_kill_s = min_uptime_s + jitter_s / 2
    rate = concurrency / call_s
    width = max(window[1] - window[0], 1e-6)
    unpaced = math.ceil(kills * per_kill_s * rate / width) if kills else 0
    return Estimate(
        workload_s=intents / rate,
        kills_s=kills * per_kill_s,
        downtime_s=kills * (restart_delay_s + startup_s),
        intents_unpaced=unpaced,
        intents=intents,
    )


def advise(scenario: Scenario, *, call_s: float, startup_s: float) -> str | None:
    """One line for ``validate --preflight``: how the planned kills fit the server's measured speed
    (None without counted kills)."""
    kill = scenario.faults.kill
    if kill is None or not kill.count:
        return None
    workload = scenario.workload
    fit = estimate(
        intents=workload.intents,
        concurrency=workload.concurrency,
        call_s=call_s,
        startup_s=startup_s,
        restart_delay_s=scenario.target.restart_delay_s,
        kills=kill.count,
        min_uptime_s=kill.min_uptime_s,
        jitter_s=kill.jitter_s,
        window=kill.window,
    )
    head = (
        f"pacing: a call took {call_s * 1000:.1f} ms and the server started in {startup_s:.1f}s: "
        f"{workload.intents} intents serve for about {fit.workload_s:.1f}s at {workload.concurrency} "
        f"at a time; {kill.count} kills keep it down about {fit.downtime_s:.1f}s"
    )
    if not fit.paced:
        return f"{head}, and each finds the pod up for min_uptime_s in its turn"
    more = f"workload.intents: {fit.intents_unpaced} would let each come in its turn"
    if kill.hold_dispatch is False:
        return (
            f"{head}; with hold_dispatch false some kills may come late or never (an inconclusive run): "
            f"set faults.kill.hold_dispatch: auto, or {more}"
        )
    return f"{head}; their min_uptime_s waits outlast the workload, so dispatch may be held for them ({more})"
