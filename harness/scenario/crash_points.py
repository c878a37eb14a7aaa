"""``faults.crash_points``: hold a call at a point it passes (a commit, a downstream call, its
answer) and SIGKILL the pod there, instead of killing it at random.

``mcp-chaos crashpoints`` writes these (``explore``, or ``holds`` in a reproducer);
``harness.crashpoints.holds`` carries them out. What a run with them needs of the other
sections is :func:`harness.scenario.rules.crash_points_fit`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from harness.crashpoints.points import FILE_KINDS, PointKind, parse_path
from harness.scenario.section import Section


class CrashHold(Section):
    """Hold the chosen intents at a point of their call and SIGKILL the pod there (``mcp-chaos crashpoints``
    writes these; ``harness.crashpoints.holds`` carries them out)."""

    at: str
    """A hold point (``request``, ``db_commit#N``, ``downstream#N``, ``response``), or a path of two:
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


MAX_REPEAT = 100
"""Tries per point an exploration makes at most (``--repeat``)."""
MAX_POINTS = 64
"""Paths an exploration explores at most (``--max-points``)."""


MAX_JOBS = 256
"""Copies of the target an exploration runs side by side at most (``--jobs``)."""


class CrashExplore(Section):
    """Explore instead of a fixed plan: a clean call, then every point it passed (see
    ``harness.crashpoints.plan``)."""

    repeat: int = Field(default=3, ge=1, le=MAX_REPEAT)
    """Tries per point."""
    max_points: int = Field(default=8, ge=1, le=MAX_POINTS)
    """Paths explored at most, single points first, then points of the retries (a crash in the recovery)."""
    only: list[str] | None = Field(default=None, min_length=1)
    """Explore only these points or paths (``db_commit#2``, ``db_commit#1/db_commit#1``)."""
    power_loss: bool = True
    """Where the call writes files in the data directory, crash each point a second way: the kill, then
    the data directory rolled back to what was durable (``fs_write#3@power_loss``)."""
    job: int = Field(default=1, ge=1, le=MAX_JOBS)
    """Which of ``jobs`` copies of the target this run is (``crashpoints --jobs``): it tries the planned
    paths whose place in the plan is ``job`` modulo ``jobs`` (see ``harness.crashpoints.plan``)."""
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


class CrashPoints(Section):
    """Hold points wired into the run: every attempt's points are recorded (``crash_point`` events),
    and the holds listed kill the pod at theirs. The first hold that names an intent applies to it."""

    holds: list[CrashHold] = Field(default_factory=list)
    explore: CrashExplore | None = None
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
        return any(hold.kinds() & FILE_KINDS or "@" in hold.at for hold in self.holds)

    @model_validator(mode="after")
    def _one_plan(self) -> CrashPoints:
        if self.explore is not None and self.holds:
            raise ValueError("faults.crash_points: give holds or explore, not both")
        return self
