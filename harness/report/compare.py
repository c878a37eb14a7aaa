"""Runs side by side: duplicate rates with intervals, and whether two designs really differ.

"1.37% vs 0.05%" is a claim; with the counts behind it, Fisher's exact test
says how likely a difference that large is by chance, and the two-proportion
sample size says how many intents per design a run needs to tell the two rates
apart at all (5% significance, 80% power). Reproduce puts its variants through
this; ``mcp-chaos compare`` does it for any run directories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from harness import rundir
from harness.audit.stats import Rate, fisher_exact, intents_to_tell_apart
from harness.errors import UsageError
from harness.report.tables import ci, markdown_table, pct


@dataclass(frozen=True, slots=True)
class Counts:
    """What is compared of a run or a pooled variant: its duplicates among its intents."""

    label: str
    duplicates: int
    intents: int

    @property
    def rate(self) -> Rate:
        return Rate(self.duplicates, self.intents)


def counts_of(run_dir: Path) -> Counts:
    """A run's counts from its summary.json (audit the run first if it has none)."""
    path = run_dir / rundir.SUMMARY_JSON
    if not path.is_file():
        raise UsageError(
            f"{run_dir} has no {rundir.SUMMARY_JSON}: audit it first (mcp-chaos audit {run_dir})"
        )
    try:
        summary = orjson.loads(path.read_bytes())
        duplicates = int(summary["verdicts"]["duplicate"])
        intents = int(summary["intents"]["started"])
        label = f"{summary['run_id']} ({summary['scenario']})"
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{path} is not a summary this harness wrote ({type(exc).__name__}: {exc})"
        ) from None
    return Counts(label, duplicates, intents)


def difference_row(a: Counts, b: Counts) -> list[str]:
    p = fisher_exact(a.duplicates, a.intents, b.duplicates, b.intents)
    needed = intents_to_tell_apart(a.rate.value, b.rate.value)
    verdict = "different" if p < 0.05 else "not told apart"
    return [
        f"{a.label} vs {b.label}",
        f"{(a.rate.value - b.rate.value) * 100:+.2f} pp",
        f"{p:.2g}",
        verdict,
        "never (same rate)" if needed is None else f"{needed:,}",
    ]


def render_comparison(runs: Sequence[Counts], pairs: Sequence[tuple[int, int]] | None = None) -> str:
    """The rates with intervals, then each pair (default: every run against the first)."""
    rates = markdown_table(
        ["run", "duplicates", "rate", "95% CI (Wilson)"],
        [[r.label, f"{r.duplicates}/{r.intents:,}", pct(r.rate.value), ci(r.rate.ci95)] for r in runs],
        align="lrrr",
    )
    pairs = pairs if pairs is not None else [(0, i) for i in range(1, len(runs))]
    if not pairs:
        return rates
    differences = markdown_table(
        ["pair", "difference", "Fisher p", "at 5%", "intents per design to tell apart (80% power)"],
        [difference_row(runs[i], runs[j]) for i, j in pairs],
        align="lrrlr",
    )
    return f"{rates}\n\n{differences}"
