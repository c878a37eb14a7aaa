"""What a hold site reports and what a plan answers: the vocabulary of the decision router. Pure.

A hold site (the fault proxy, the stdio host, the PostgreSQL proxy, the sink, the
downstream proxy, the file tracer) reports a :class:`Reached`; the router
(:mod:`harness.crashpoints.router`) places it in its attempt as an :class:`At` for the
run's :class:`Plan`, whose :class:`Decision` the site then carries out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from harness.crashpoints.points import KINDS, Crash, FileOp, Point, PointKind
from harness.crashpoints.points import Site as Site  # the hold sites name where they report with it

HOLD_LIMIT_S = 30.0
"""How long a point may stay held before the plan is told it is blocked: a target that serializes its
own work (one database connection, a synchronous driver) cannot go on while one of its steps is held."""


class Decision(enum.StrEnum):
    """What a plan answers a point reached."""

    PASS = "pass"
    HOLD = "hold"
    """Wait: the plan releases the point later, with one of the others."""
    KILL = "kill"
    """SIGKILL the pod here: everything the server wrote survives."""
    POWER_LOSS = "power_loss"
    """SIGKILL the pod here, then roll its data directory back to what was durable."""


KILLS = {Decision.KILL: Crash.KILL, Decision.POWER_LOSS: Crash.POWER_LOSS}
_REPORTED = frozenset((site, kind) for kind, facts in KINDS.items() for site in facts.sites)
"""Every (hold site, kind) the kinds' facts allow: one lookup per report (a run observes every commit)."""
_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})
"""The detail of a point that has none, shared (read-only): no dict made per report."""


def crash_decision(crash: Crash) -> Decision:
    return Decision.POWER_LOSS if crash is Crash.POWER_LOSS else Decision.KILL


@dataclass(frozen=True, slots=True)
class Connection:
    """A connection from the pod to a service of the harness's (its database, its sink)."""

    id: int
    generation: int
    """The pod's generation when it connected: once it is killed at a point, nothing more of it passes."""


@dataclass(frozen=True, slots=True)
class Reached:
    """A hold site's report: a point was just reached, and the site waits for the decision."""

    site: Site
    kind: PointKind
    connection: Connection | None = None
    attempt: tuple[int, int] | None = None
    """(intent, attempt), where the site knows whose call it is (the fault proxy, the stdio host)."""
    label: str | None = None
    """What the point commits or touches (``INSERT invoices``, ``notes.json.tmp -> notes.json``)."""
    detail: Mapping[str, Any] = field(default_factory=lambda: _NO_DETAIL)
    """What the history says of it beyond its name (a commit's statements, a call's key)."""
    payload: bytes = b""
    """What the point carries, searched for markers only when several attempts are open."""
    reads: bool = False
    """A commit that only read."""
    answer: str | None = None
    """At ``response``: what came instead of the tool's answer (``HTTP 404``): recorded, never a point."""
    op: FileOp | None = None
    """A file operation's effect, as the tracer told it: what the crash states are computed from."""
    at: float | None = None
    """When the site saw it (``time.monotonic()``: one clock for every process of the machine), where it
    is told later than that (a site in a process of its own); None: now. It is placed by this time."""

    def __post_init__(self) -> None:
        if (self.site, self.kind) not in _REPORTED:  # a hold site reporting a kind its facts do not name
            raise ValueError(
                f"{self.site} reported {self.kind}; its facts name {sorted(KINDS[self.kind].sites)}"
            )


@dataclass(frozen=True, slots=True)
class At:
    """A point placed in its attempt: what a plan decides on."""

    intent: int
    attempt: int
    point: Point
    """Its kind, index in the attempt, label and ``nth``."""
    window: tuple[Point, ...]
    """The attempt's points so far, this one last."""
    site: Site
    ticket: int
    """Names the point while it is held (:meth:`Plan.releases`)."""


@dataclass(frozen=True, slots=True)
class Missed:
    """A fault or hold a plan planned and never made: the run did not test what it meant to."""

    fault: str
    """``kill`` (a crash point never reached), or ``hold`` (an order the target never let happen)."""
    trigger: str
    reason: str


class Plan(Protocol):
    """A pure scheduler from points reached to decisions (:mod:`harness.crashpoints.plans`)."""

    decides: bool
    """False for a plan that passes everything (observe): the router only counts for it."""
    kinds: frozenset[PointKind]
    """The kinds of point it decides on; others pass without being counted in a window."""

    def limit(self, at: At) -> float:
        """How long ``at``, held, may wait before the plan is told it is blocked (:data:`HOLD_LIMIT_S`)."""
        ...

    def decide(self, at: At) -> Decision: ...

    def applied(self, at: At, decision: Decision) -> None:
        """What was done at ``at`` (a kill the pod was not there for is a ``PASS``)."""
        ...

    def releases(self) -> list[tuple[int, Decision]]:
        """Held points to let go of now, by ticket, each with what happens to it."""
        ...

    def severs(self) -> list[tuple[int, int]]:
        """Attempts (intent, attempt) whose client stream to break now, the server's side left running: the
        client has lost the answer and re-issues the call at once (a race's retry beside its original)."""
        ...

    def blocked(self, ticket: int) -> None:
        """A held point waited ``HOLD_LIMIT_S``: the target cannot go on while it is held."""
        ...

    def ended(self, intent: int, attempt: int) -> None:
        """The attempt's exchange is over."""
        ...

    def looked(self, intent: int) -> None:
        """The run read the store as an attempt of ``intent`` was answered (a race's)."""
        ...

    def exhausted(self) -> bool:
        """Asked before each intent starts: whether the plan has every try it wanted."""
        ...

    def missed(self) -> list[Missed]:
        """At the run's end: each fault or hold it planned and never made."""
        ...

    def annotate(self, intent: int) -> Mapping[str, Any]:
        """What the history says of an intent's points beyond them (the path it is held along)."""
        ...

    def told(self) -> Mapping[str, Any] | None:
        """A ``crash_plan`` event's fields when the plan changed since it was last asked, else None."""
        ...
