"""``gate``: the thresholds that turn a run's findings into a failing exit code."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.scenario.section import Section


class Gate(Section):
    """Thresholds that turn findings into a failing exit code (for CI). Unset = no gate."""

    max_duplicates: int | None = Field(default=None, ge=0)
    max_duplicate_rate: float | None = Field(default=None, ge=0, le=1)
    max_lost: int | None = Field(default=None, ge=0)
    fail_inconclusive: bool = False
    """Fail when the run did not test what it planned (a planned fault that never happened)."""
    fail_on: list[Literal["duplicate", "lost", "applied_despite_error", "inconclusive"]] = Field(
        default_factory=list
    )
    """Fail on any intent with one of these verdicts (or an inconclusive run)."""
    expect: list[Literal["duplicate", "lost", "applied_despite_error"]] = Field(default_factory=list)
    """A canary: fail unless the run shows each of these. A target known to be broken that looks
    fine means the harness is what broke."""
