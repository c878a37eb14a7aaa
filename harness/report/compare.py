"""Runs side by side: duplicate rates with intervals, and whether two designs really differ.

"1.37% vs 0.05%" is a claim; with the counts behind it, Fisher's exact test
says how likely a difference that large is by chance, and the two-proportion
sample size says how many intents per design a run needs to tell the two rates
apart at all (5% significance, 80% power). Reproduce puts its variants through
this; ``mcp-chaos compare`` does it for any run directories. Both are written as
Markdown and as a page with the rates plotted, linking each run's report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from harness import rundir
from harness.audit.stats import Rate, fisher_exact, intents_to_tell_apart
from harness.errors import UsageError
from harness.report import pages
from harness.report.html import REPORT_HTML
from harness.report.tables import ci, markdown_table, pct


@dataclass(frozen=True, slots=True)
class Counts:
    """What is compared of a run or a pooled variant: its duplicates among its intents."""

    label: str
    duplicates: int
    intents: int
    scenario: str | None = None
    """The scenario the run came from (None for a pooled variant, which has one by construction)."""

    @property
    def rate(self) -> Rate:
        return Rate(self.duplicates, self.intents)


def counts_of(run_dir: Path) -> Counts:
    """A run's counts from its summary.json (audit the run first if it has none).

    The file may have been edited or damaged since the audit: duplicates that are not a whole
    number from 0 to the intents would make a rate outside 0–100% (and a traceback in the
    interval), so they are a one-line error naming the file.
    """
    path = run_dir / rundir.SUMMARY_JSON
    if not path.is_file():
        raise UsageError(
            f"{run_dir} has no {rundir.SUMMARY_JSON}: audit it first (mcp-chaos audit {run_dir})"
        )
    try:
        summary = orjson.loads(path.read_bytes())
        duplicates = summary["verdicts"]["duplicate"]
        intents = summary["intents"]["started"]
        scenario = str(summary["scenario"])
        label = f"{summary['run_id']} ({scenario})"
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{path} is not a summary this harness wrote ({type(exc).__name__}: {exc})"
        ) from None
    for name, value in (("intents.started", intents), ("verdicts.duplicate", duplicates)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UsageError(f"{path}: {name} is {value!r:.40}, not a whole number of 0 or more")
    if duplicates > intents:
        raise UsageError(
            f"{path}: verdicts.duplicate {duplicates} exceeds intents.started {intents} (a damaged summary:"
            f" audit the run again)"
        )
    return Counts(label, duplicates, intents, scenario)


def mixed_scenarios(runs: Sequence[Counts]) -> str | None:
    """A warning when the runs come from different scenarios: their rates differ by more than the
    design under test (another workload, other faults), so a difference says less than it seems."""
    names = list(dict.fromkeys(r.scenario for r in runs if r.scenario is not None))
    if len(names) < 2:
        return None
    return (
        f"the runs come from different scenarios ({', '.join(names)}): a difference may be the "
        "scenario's, not the design's (compared anyway)"
    )


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


def plot_comparison(runs: Sequence[Counts]) -> str:
    """Duplicate rate of each run or variant with its Wilson interval."""
    fig, ax = pages.figure(8, 0.5 + 0.45 * max(2, len(runs)))
    values = np.array([r.rate.value for r in runs]) * 100
    lows = values - np.array([r.rate.ci95[0] for r in runs]) * 100
    highs = np.array([r.rate.ci95[1] for r in runs]) * 100 - values
    y = np.arange(len(runs))[::-1]
    ax.errorbar(values, y, xerr=[lows, highs], fmt="o", color="#c0392b", ecolor="#2c3e50", capsize=5)
    ax.set_yticks(y, [r.label for r in runs])
    ax.set_xlabel("duplicate rate, % of intents (95% CI, Wilson)")
    ax.set_xlim(left=0)
    return pages.png(fig)


def render_comparison_html(
    title: str, runs: Sequence[Counts], pairs: Sequence[tuple[int, int]], links: Sequence[str] = ()
) -> str:
    """The comparison page (``compare -o X.html``, and reproduce's): the rates plot, the pairs."""
    return pages.render(
        "compare.html.j2",
        title=title,
        plot=plot_comparison(runs),
        runs=runs,
        pairs=[difference_row(runs[i], runs[j]) for i, j in pairs],
        links=list(links),
    )


def write_comparison(output: Path, runs: Sequence[Counts], run_dirs: Sequence[Path]) -> None:
    """``compare -o``: ``FILE.html`` is the page (each run against the first, links to the runs'
    reports); any other name gets the Markdown."""
    if output.suffix == ".html":
        pairs = [(0, i) for i in range(1, len(runs))]
        links = [str(d.resolve() / REPORT_HTML) for d in run_dirs]
        output.write_text(render_comparison_html("Comparison", runs, pairs, links), encoding="utf-8")
    else:
        output.write_text(f"# Comparison\n\n{render_comparison(runs)}\n", encoding="utf-8")
