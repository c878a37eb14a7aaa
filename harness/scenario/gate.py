"""``gate``: which findings turn a run into a failing exit code (1), for CI.

Without a ``gate`` (or one without ``fail_on``) every finding fails the run: a
pod that answered no call after a fault (unavailable), a store file its server
cannot read again (store_unreadable), a duplicate, a lost intent, an effect applied
despite an error, and an inconclusive run. A threshold replaces
zero tolerance for its verdict only, ``expect`` turns a finding into a canary, and
``allow_inconclusive`` is the only way an inconclusive run passes. A ``fail_on``
that leaves a finding out is the user's choice, and the report says what it let
through.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.scenario.section import Section

GatedVerdict = Literal["duplicate", "lost", "applied_despite_error"]
FailOn = Literal[
    "unavailable", "store_unreadable", "duplicate", "lost", "applied_despite_error", "inconclusive"
]
DEFAULT_FAIL_ON: tuple[FailOn, ...] = (
    "unavailable",
    "store_unreadable",
    "duplicate",
    "lost",
    "applied_despite_error",
    "inconclusive",
)


class Gate(Section):
    """Which findings fail the run (exit 1). The default fails on every finding."""

    max_duplicates: int | None = Field(default=None, ge=0)
    """Fail above this many duplicates (instead of on the first)."""
    max_duplicate_rate: float | None = Field(default=None, ge=0, le=1)
    """Fail above this rate of duplicates (0.001 is 0.1%), instead of on one."""
    max_lost: int | None = Field(default=None, ge=0)
    """Fail above this many lost intents (instead of on the first)."""
    fail_on: list[FailOn] | None = None
    """Fail on any intent with one of these verdicts; unset: all of them (and an inconclusive run)."""
    expect: list[GatedVerdict] = Field(default_factory=list)
    """A canary: these findings are expected (they do not fail the run) and their absence fails it. A
    target known to be broken that looks fine means the harness is what broke."""
    allow_inconclusive: bool = False
    """Pass a run that did not test what it planned (a planned fault that never happened)."""
    fail_inconclusive: bool = False
    """Accepted so older scenarios load: an inconclusive run now fails unless ``allow_inconclusive``."""

    @model_validator(mode="after")
    def _consistent(self) -> Gate:
        if self.fail_inconclusive and self.allow_inconclusive:
            raise ValueError("gate.fail_inconclusive and gate.allow_inconclusive contradict each other")
        both = sorted(set(self.expect) & set(self.fail_on or ()))
        if both:
            raise ValueError(
                f"gate.expect and gate.fail_on both name {', '.join(both)}: expect a finding (a canary) "
                "or fail on it, not both"
            )
        return self

    @property
    def failing(self) -> tuple[FailOn, ...]:
        """The verdicts that fail the run on their first intent (``fail_on``, or every one)."""
        return DEFAULT_FAIL_ON if self.fail_on is None else tuple(self.fail_on)

    def fails_at_first(self, verdict: str) -> bool:
        """Whether one intent of ``verdict`` fails the run: the gate fails on it, with no threshold for it,
        and no canary expects it (a remembered finding still failing is judged so)."""
        if verdict not in self.failing or verdict in self.expect:
            return False
        thresholds = {"duplicate": (self.max_duplicates, self.max_duplicate_rate), "lost": (self.max_lost,)}
        return all(t is None for t in thresholds.get(verdict, ()))
