"""``faults.crash_points``: hold a call at a point it passes (a commit, a downstream call, its
answer) and SIGKILL the pod there, instead of killing it at random.

``mcp-chaos crashpoints`` writes these (``explore``, or ``holds`` in a reproducer);
``harness.crashpoints.holds`` carries them out. What a run with them needs of the other
sections is :func:`harness.scenario.rules.crash_points_fit`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.crashpoints.options import (
    DEFAULT_BUDGET_S,
    DEFAULT_REPEAT,
    MAX_BUDGET_S,
    MAX_JOBS,
    MAX_REPEAT,
)
from harness.crashpoints.points import FILE_KINDS, Crash, PointKind, parse_ordering, parse_path, parse_point
from harness.scenario.section import Section


class CrashHold(Section):
    """Hold the chosen intents at a point of their call and SIGKILL the pod there (``mcp-chaos crashpoints``
    writes these; ``harness.crashpoints.holds`` carries them out)."""

    at: str
    """A hold point (``request``, ``db_commit#N``, ``downstream#N``, ``response``, a file operation: each
    kind crash points crash is in the reference's "Hold points"), or a path of two:
    ``db_commit#1/db_commit#2`` holds the first attempt at the first, then the retry at the second."""
    intents: list[Annotated[int, Field(ge=0)]] | None = None
    """Which intents (default: every one)."""
    commits: list[Annotated[str, Field(min_length=1, max_length=400)] | None] | None = None
    """What each point of the path committed (``INSERT invoices``, the label ``crashpoints`` shows), so
    the hold finds that commit whatever its index in the call; ``null`` for a point found by index."""

    @field_validator("at")
    @classmethod
    def _path(cls, v: str) -> str:
        parse_path(v)
        return v

    @model_validator(mode="after")
    def _one_label_a_point(self) -> CrashHold:
        if self.commits is not None and len(self.commits) != len(parse_path(self.at)):
            raise ValueError(
                f"faults.crash_points.holds: commits names {len(self.commits)} points, {self.at!r} has "
                f"{len(parse_path(self.at))}; give one label (or null) per point"
            )
        return self

    def kinds(self) -> set[PointKind]:
        return {p.kind for p in parse_path(self.at)}


MAX_ORDERED = 8
"""Attempts an order holds at one point at most."""
MAX_STORE_FILES = 16
"""Globs of the store's files an exploration is told at most (a SQLite database is four files)."""


class CrashExplore(Section):
    """Explore instead of a fixed plan: a clean call, then every distinct crash state of the points it
    passed, the store's first, within a budget (see ``harness.crashpoints.paths``)."""

    repeat: int = Field(default=DEFAULT_REPEAT, ge=1, le=MAX_REPEAT)
    """Tries per crash state."""
    budget_s: float = Field(default=DEFAULT_BUDGET_S, ge=0, le=MAX_BUDGET_S)
    """Seconds from the run's start after which no try begins (``--budget``)."""
    store: list[Annotated[str, Field(min_length=1, max_length=400)]] | None = Field(
        default=None, max_length=MAX_STORE_FILES
    )
    """Globs of the files the effect source reads, relative to the data directory: their states are tried
    first. None: the harness does not see the store (a ``tool`` or ``command`` source), so no two points
    are taken to leave the same state."""
    max_points: int | None = Field(default=None, ge=1)
    """Read from explorations recorded before the budget; ignored (every distinct crash state is tried)."""
    only: list[str] | None = Field(default=None, min_length=1)
    """Explore only these points or paths (``db_commit#2``, ``db_commit#1/db_commit#1``)."""
    power_loss: bool = True
    """Where the call writes files in the data directory, crash each point a second way: the kill, then
    the data directory rolled back to what was durable (``fs_write#3@power_loss``)."""
    job: int = Field(default=1, ge=1, le=MAX_JOBS)
    """Which of ``jobs`` copies of the target this run is (``crashpoints --jobs``): it tries the planned
    paths whose place in the plan is ``job`` modulo ``jobs`` (see ``harness.crashpoints.paths``)."""
    jobs: int = Field(default=1, ge=1, le=MAX_JOBS)
    """How many copies explore the plan side by side, each in a run of its own."""

    @field_validator("only")
    @classmethod
    def _paths(cls, v: list[str] | None) -> list[str] | None:
        for name in v or ():
            parse_path(name)
        return v

    @model_validator(mode="after")
    def _job_of_jobs(self) -> CrashExplore:
        if self.job > self.jobs:
            raise ValueError(f"job {self.job} of {self.jobs}: a copy's number is 1 to jobs")
        return self


class CrashOrder(Section):
    """Hold the first attempts that reach one point, then let them go in a chosen order: an original and
    its retry held at the same statement, released retry first (``order: [2, 1]``). Each goes once the one
    released before it has reached its next point or ended. Needs attempts that run side by side there:
    ``workload.concurrency`` of 2 or more, or a retry beside its original (a ``stall`` stream fault)."""

    at: str
    """The point (``db_statement#1``, ``db_commit#1``, ``downstream#1``, a file operation: any kind of the
    reference's "Hold points"), without ``@power_loss``: nothing is crashed."""
    order: list[Annotated[int, Field(ge=1, le=MAX_ORDERED)]] = Field(min_length=2, max_length=MAX_ORDERED)
    """The release order, by arrival: 1 is the first attempt to reach the point."""
    hold_limit_s: float = Field(default=30.0, gt=0, le=600)
    """How long the first may wait for the others; then they are released as they came (a target that
    serializes its work cannot run them side by side there), and the run says the order was not made."""

    @field_validator("at")
    @classmethod
    def _point(cls, v: str) -> str:
        if parse_point(v).crash is not Crash.KILL or "@" in v:
            raise ValueError(f"{v!r}: an order holds and releases, it crashes nothing; drop the @")
        return v

    @model_validator(mode="after")
    def _each_once(self) -> CrashOrder:
        if sorted(self.order) != list(range(1, len(self.order) + 1)):
            raise ValueError(
                f"faults.crash_points.order.order {self.order}: name each arrival once, "
                f"1 to {len(self.order)}"
            )
        return self


class CrashRace(Section):
    """A clean call, then one intent per ordering of an original and its retry run side by side: the
    retry sent at each point of the original (its client stream broken there), and held at each of its
    own while the original runs (``mcp-chaos races`` writes this; ``harness.crashpoints.races`` plans it)."""

    budget_s: float = Field(default=DEFAULT_BUDGET_S, ge=0, le=MAX_BUDGET_S)
    """Seconds from the run's start after which no ordering is tried (``--budget``)."""
    hold_limit_s: float = Field(default=2.0, gt=0, le=30)
    """How long a held point waits for the other attempt to end; past it the ordering is blocked (the
    server serializes there, or waits on a lock) and the held point goes on."""
    only: list[Annotated[str, Field(min_length=1, max_length=80)]] = Field(
        default_factory=list, max_length=64
    )
    """Try only these orderings, in this order, each by its id: ``original:db_commit#2`` (the retry sent
    at the original's point), ``retry:db_commit#2`` (the retry held at its point while the original
    runs); found by index among the clean call's points (``races --only``, and what a reproducer names)."""
    repeat: int = Field(default=1, ge=1, le=MAX_REPEAT)
    """How many times each ordering is tried, one intent each, one after another."""
    second: Literal["retry", "timeout", "call"] = "retry"
    """What runs beside the first attempt: its ``retry`` (the same intent, its stream broken), its retry by
    the client's own ``timeout`` (the same intent, no stream broken: the run's client timeout is set below
    the hold limit, ``races --second timeout``), or a second ``call`` (another intent, sent fresh: two
    clients at once, each ordering two intents), whose races are placed at the file tracer's operations
    too (a file store's lost update, ``races --second call``)."""

    @field_validator("only")
    @classmethod
    def _orderings(cls, v: list[str]) -> list[str]:
        for text in v:
            parse_ordering(text)
        return v

    @model_validator(mode="after")
    def _ids_of_its_kind(self) -> CrashRace:
        words = ("first", "second") if self.second == "call" else ("original", "retry")
        for text in self.only:
            if parse_ordering(text)[0] not in words:
                raise ValueError(
                    f"faults.crash_points.race.only {text!r}: with second: {self.second} an ordering is "
                    f"{words[0]}:POINT or {words[1]}:POINT"
                )
        return self


class CrashPoints(Section):
    """Hold points wired into the run: every attempt's points are recorded (``crash_point`` events),
    and the holds listed kill the pod at theirs. The first hold that names an intent applies to it."""

    holds: list[CrashHold] = Field(default_factory=list)
    """Fixed points to hold and kill the target at (what a reproducer holds)."""
    explore: CrashExplore | None = None
    """Explore every point of a clean call instead (what ``mcp-chaos crashpoints`` runs)."""
    order: CrashOrder | None = None
    """Hold two attempts of one intent at one point and release them in a given order (a race)."""
    race: CrashRace | None = None
    """Explore the orderings of each intent's original and a retry beside it (``mcp-chaos races``)."""
    files: bool = True
    """Trace the pod's file operations on its data directory (ptrace, from outside the server): each is
    a hold point (``fs_write#N``, ``fs_rename#N``, ...), and a crash there can be a power loss. For a
    target the harness runs as a process; ``false`` where ptrace is not allowed, or not wanted."""

    def traces_files(self) -> bool:
        """Whether the run traces files: asked for, and needed by an exploration or a hold that names a
        file point or a power loss."""
        if not self.files:
            return False
        if self.explore is not None:
            return True
        if self.order is not None:
            return parse_point(self.order.at).kind in FILE_KINDS
        if self.race is not None:  # a retry's race is placed at the database, the downstream, the call
            return self.race.second == "call"
        return any(hold.kinds() & FILE_KINDS or "@" in hold.at for hold in self.holds)

    @model_validator(mode="after")
    def _one_plan(self) -> CrashPoints:
        if sum(1 for plan in (self.holds, self.explore, self.order, self.race) if plan) > 1:
            raise ValueError("faults.crash_points: give one of holds, explore, order or race")
        return self

    def kills(self) -> bool:
        """Whether its plan kills the pod at points (holds, explore), rather than only ordering them."""
        return self.order is None and self.race is None
