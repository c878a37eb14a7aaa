"""What a fault kind declares (:class:`Kind`), and the few types its declarations are made of.

A pod fault's strike and heal act on a :class:`Victim` (a pod's supervisor, as the injector hands
it), a stream fault's on a :class:`Exchange` (one exchange the fault proxy holds), so a kind's module
stays pure: it says in which order its fault's steps go, while the injector owns the clocks, the
waits and the turn, and the proxy the sockets and the HTTP parsing. A scheduled kind's plan returns
:class:`PlannedFault` values, each on its own seeded stream (``{seed}:faults:{kind}``), so adding a
kind never moves another kind's faults.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.history import FaultKind
from harness.scenario import HoldDispatch, Scenario, StreamFault

POD_FAULT = "pod_fault"
"""The fix group of the faults that take a pod down (its work in memory is gone)."""
IN_FLIGHT = "in_flight"
"""The fix group of the faults after which the original still runs when its retry comes."""
GROUPS = (POD_FAULT, IN_FLIGHT)


class Source(enum.StrEnum):
    """Where a kind's faults come from: what it must declare besides its words, rank and fix group."""

    SCHEDULE = "schedule"
    """Planned by the schedule and struck by the injector: a ``plan`` and a ``strike``, its scenario
    section (``faults.<kind>``) and the plan's words (``rate``)."""
    STREAM = "stream"
    """A rule of the fault proxy (``faults.stream``): what a rule does, in words (``rule_action``) and
    to an exchange (``strike_exchange``), where a rule can name it (``sever_mid_stream`` is the
    auditor's reading of a ``sever_response``)."""
    SERVICE = "service"
    """Recorded by a service the harness runs (the balancer's re-sends): nothing is planned."""
    AUDIT = "audit"
    """The auditor's label, never written: read from other events (a pod that died with no kill)."""


@dataclass(frozen=True, slots=True)
class Fix:
    """What a kind of finding means and what to change, one sentence each (:mod:`harness.audit.fixes`)."""

    meaning: str
    """What the finding says about the server, in a sentence."""
    fix: str
    """What to change, in a sentence."""


@dataclass(frozen=True, slots=True)
class PlannedFault:
    kind: FaultKind
    after_intents: int | None = None
    at_s: float | None = None
    delay_s: float = 0.0
    """A seeded extra wait between the trigger and the fault."""
    duration_s: float = 0.0
    """How long the fault lasts before its heal (a pause: how long the pod stays frozen)."""
    hold_dispatch: HoldDispatch = False
    """Once due, whether no new intent starts until this fault has happened: at once (True), only
    when it would otherwise be late ("auto"), or never (see :mod:`harness.faults.pacing`)."""
    victim: int | None = 0
    """The replica it hits; None: every replica at once (a rollout: each in turn)."""
    signal: str = "SIGKILL"
    grace_s: float = 0.0
    """After a signal other than SIGKILL: seconds before SIGKILL."""
    steps: int = 1
    """Pod disruptions it makes: a rollout replaces every replica, one at a time."""
    power_loss: bool = False
    """A kill that is a power loss (``faults.kill.power_loss``): the data directory rolled back after it."""
    min_uptime_s: float = 0.0
    """It waits until each victim has been ready this long (its section's ``min_uptime_s``)."""

    @property
    def counted(self) -> bool:
        """On the progress clock: planned whatever the run's length (timed faults are planned
        only for as long as the run lasts)."""
        return self.after_intents is not None

    def describe(self) -> str:
        trigger = (
            f"after intent {self.after_intents}" if self.after_intents is not None else f"at {self.at_s:.3f}s"
        )
        return f"{trigger} +{self.delay_s:.3f}s"

    def victims(self, replicas: int) -> list[int]:
        """The replicas it hits, in order."""
        return list(range(replicas)) if self.victim is None else [self.victim]


class Victim(Protocol):
    """What a strike and a heal act on: a pod's supervisor (:class:`harness.pods.supervisor.Supervisor`),
    which records each fault in the history as it makes it."""

    def kill(
        self,
        *,
        trigger: str,
        sig: str = ...,
        grace_s: float = ...,
        kind: FaultKind = ...,
        power_loss: bool = ...,
        before: Callable[[], None] | None = ...,
        **details: Any,
    ) -> bool: ...

    def pause(self, *, duration_s: float, trigger: str, **details: Any) -> bool: ...

    def resume(self) -> None: ...


Before = Callable[[], None] | None
"""What records the checkpoint read taken just before the fault (None: none was taken)."""


class Strike(Protocol):
    """Make a planned fault on its victims, now; returns those it struck (what the heal undoes).

    ``details`` go into each fault's event (how it was paced; a rollout's step)."""

    def __call__(
        self, fault: PlannedFault, victims: Sequence[Victim], before: Before, /, **details: Any
    ) -> list[Victim]: ...


class Exchange(Protocol):
    """What a stream fault's strike acts on: one exchange the fault proxy holds, between the client's
    connection and the server's (:mod:`harness.faults.proxy`). The request has been read, nothing of
    it forwarded; a strike returns whether both connections stay usable for the next exchange."""

    @property
    def default_hold_s(self) -> float:
        """A stall's hold when its rule gives none: the client's attempt timeout plus 0.5 s."""

    def record(self, **detail: Any) -> None:
        """The fault's event in the history, with what it did (before it acts: before the attempt's end)."""

    def forward(self) -> None:
        """The request to the server."""

    async def relay(self, *, delay_s: float = 0.0) -> bool:
        """The server's response to the client as it arrives (after ``delay_s``, from its first bytes);
        False when it did not complete."""

    async def read(self) -> bytes:
        """The server's next bytes (empty: its side closed)."""

    async def read_whole(self) -> tuple[bytes, bool]:
        """The server's whole response, and whether it completed."""

    def send(self, data: bytes) -> None:
        """Bytes to the client."""

    async def drain(self) -> None:
        """Until what was sent has gone out."""

    async def sleep(self, seconds: float) -> None: ...

    async def client_left(self, within_s: float) -> bool:
        """Whether the client closed its connection (gave up) within ``within_s``, or already had."""

    def cut_offset(self, raw: bytes, after_bytes: int, after_events: int | None) -> int:
        """How many bytes of a whole response to relay before a cut: N bytes, or to the end of event N."""

    def events_cut(self, data: bytes, after_events: int) -> int | None:
        """Follow the response's next bytes: the offset in ``data`` where its SSE event N ends, or None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """Everything the harness knows of one fault kind; one per module of this package."""

    kind: FaultKind
    """Its word in the history (the vocabulary of :mod:`harness.history`)."""
    rank: int
    """Its place in the blame order: when several faults hit an intent, its finding is blamed on the
    one of lowest rank (the fault closest to a commit first)."""
    means: str
    """What it is, in words (the reference's table of fault kinds)."""
    source: Source
    group: str
    """The fix it shares with others (``POD_FAULT`` or ``IN_FLIGHT``), where it has none of its own."""
    takes_pod_down: bool = False
    """A pod fault: the checkpoint read after its restart may clear it of a duplicate."""
    replayed_by_kill: bool = False
    """``mcp-chaos replay`` makes a finding it caused again by a kill at the attempt's last point."""
    fixes: Mapping[str, Fix] = field(default_factory=dict)
    """Fixes of its own, by verdict, ahead of its group's."""
    colour: str | None = None
    """Its line on report.html's timeline (None: not drawn there)."""
    plan: Callable[[Scenario], list[PlannedFault]] | None = None
    """``SCHEDULE``: its faults for a scenario, counted ones first, on a seeded stream of its own."""
    strike: Strike | None = None
    """``SCHEDULE``: the fault made on its victims."""
    heal: Callable[[Victim], None] | None = None
    """What undoes a strike once ``duration_s`` is over, always, even when the run is cancelled (None:
    the supervisor brings the pod back by itself)."""
    reads_before: bool = False
    """A checkpoint read of the effect source just before it strikes (a fault that may lose what the
    pod held)."""
    stepwise: bool = False
    """It strikes its victims one at a time, each back and ready before the next (a rollout)."""
    rate: Callable[[Scenario], str | None] | None = None
    """``SCHEDULE``: the words ``describe`` adds for faults planned on the clock (None: nothing to add)."""
    rule_action: Callable[[StreamFault], str] | None = None
    """``STREAM``: what one rule of it does to the exchanges it hits, in words."""
    strike_exchange: Callable[[StreamFault, Exchange], Awaitable[bool]] | None = None
    """``STREAM``: what one rule of it does to an exchange it hits; whether both connections stay usable."""


def stratified(rng: random.Random, n: int, count: int, window: tuple[float, float]) -> list[int]:
    """One seeded point in each of ``count`` equal slices of the window (of ``n`` intents).

    Uniform draws would bunch up now and then, and a kill that lands just after the
    previous restart hits a pod with little in flight: a different experiment.
    """
    lo = window[0] * n
    width = (window[1] - window[0]) * n / max(1, count)
    return [int(lo + width * k + rng.random() * width) for k in range(count)]


def victims(scenario: Scenario, name: str, victim: str | int) -> Callable[[], int | None]:
    """Each fault's victim: a given replica, all (None), or a seeded draw on its own stream (so
    adding replicas does not move the faults' trigger points)."""
    if isinstance(victim, int):
        return lambda: victim
    if victim == "all":
        return lambda: None
    rng = random.Random(f"{scenario.seed}:faults:{name}:victim")
    replicas = scenario.target.replicas
    return lambda: rng.randrange(replicas)
