"""Reproduce the source article's pod-kill experiment: naive vs keyed vs atomic in one table.

The article (``shared/seeds/000_…``, section 02) reports, with 8 crashes per run:
naive 37 of 2,700 intents double-billed (1.37%); keyed read-then-write 1 of
2,108 (0.05%); one transaction 0. This runs the same scenario against each
variant of the reference target (``INVOICES_MODE``), ``runs`` times each with
consecutive seeds, pools the counts, and puts our interval beside their figure.

Runs follow each other, never side by side: measured on 2 cores, running the
three variants at once lowered naive's rate from 1.33% to 1.01–1.07% (82 and
87 of 8,100 against 108), most likely because pods competing for CPU stretch
the CPU-heavy part of a call, before the commit, more than the rest (not
investigated further). Audits wait until every run has finished, for the same
reason. The table is saved as ``reproduce-<time>.md`` beside the runs, and as a
page (``.html``) that plots the rates and links each run's report.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from harness import rundir
from harness.audit.auditor import AuditResult
from harness.audit.stats import Rate
from harness.auditing import audit_and_report
from harness.errors import UsageError
from harness.faults.describe import announcement
from harness.history import FaultKind, Verdict
from harness.report.compare import Counts, render_comparison, render_comparison_html
from harness.report.html import REPORT_HTML
from harness.report.tables import ci, markdown_table, pct
from harness.run.preflight import preflight
from harness.run.runner import check_environment, execute
from harness.scenario import Scenario, load_scenario

MODES = ("naive", "keyed", "atomic")
TITLE = "Reproduction of the article's pod-kill experiment"
ARTICLE: dict[str, tuple[int, int] | None] = {"naive": (37, 2700), "keyed": (1, 2108), "atomic": None}
"""The article's (duplicates, intents) per variant; atomic: "zero", no count given."""


@dataclass
class VariantResult:
    mode: str
    audits: list[AuditResult] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(a.summary.verdicts[Verdict.DUPLICATE] for a in self.audits)

    @property
    def intents(self) -> int:
        return sum(a.summary.intents.started for a in self.audits)

    @property
    def kills(self) -> int:
        return sum(a.summary.injected(FaultKind.KILL) for a in self.audits)

    @property
    def rate(self) -> Rate:
        return Rate(self.duplicates, self.intents)


def article_cell(mode: str) -> str:
    figure = ARTICLE.get(mode)
    if figure is None:
        return "0 (\u2014)" if mode == "atomic" else "n/a"
    dups, n = figure
    return f"{dups}/{n:,} = {dups / n:.2%}"


def article_inside(mode: str, rate: Rate) -> str:
    """Whether the article's rate lies in our 95% interval (for atomic: whether we saw zero too)."""
    figure = ARTICLE.get(mode)
    if figure is None:
        return "yes" if rate.count == 0 else "no"
    low, high = rate.ci95
    return "yes" if low <= figure[0] / figure[1] <= high else "no"


def render(results: Sequence[VariantResult]) -> str:
    rows = []
    for r in results:
        rate = r.rate
        per_run = ", ".join(str(a.summary.verdicts[Verdict.DUPLICATE]) for a in r.audits)
        rows.append(
            [
                r.mode,
                len(r.audits),
                r.kills,
                per_run,
                f"{r.duplicates}/{r.intents:,}",
                pct(rate.value),
                ci(rate.ci95),
                article_cell(r.mode),
                article_inside(r.mode, rate),
            ]
        )
    return markdown_table(
        [
            "variant",
            "runs",
            "kills",
            "per run",
            "duplicates",
            "rate",
            "95% CI",
            "article",
            "article rate in CI",
        ],
        rows,
    )


def render_differences(results: Sequence[VariantResult]) -> str:
    """Each variant against the next (naive vs keyed, keyed vs atomic): are they told apart?"""
    counts = [Counts(r.mode, r.duplicates, r.intents) for r in results]
    pairs = [(i, i + 1) for i in range(len(counts) - 1)]
    return render_comparison(counts, pairs) if pairs else ""


def table(results: Sequence[VariantResult]) -> str:
    """The variants' table, then each variant against the next."""
    differences = render_differences(results)
    return render(results) + (f"\n\n{differences}" if differences else "")


def plan(path: Path, modes: Sequence[str], runs: int, overrides: Sequence[str]) -> dict[str, list[Scenario]]:
    """The scenarios to run: per mode, ``runs`` seeds counting up from the scenario's own.

    UsageError for a mode the reference target lacks or fewer than one run; ScenarioError, before
    anything starts, for a ``${VAR}`` the environment lacks.
    """
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        raise UsageError(f"--modes must list some of {', '.join(MODES)}; got {','.join(modes)!r}")
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, got {runs}")
    base = load_scenario(path, overrides)
    own = base.target.env.get("INVOICES_MODE")

    def variant(mode: str, i: int) -> Scenario:
        # The scenario's canary (naive's expected duplicates) is a claim about its own mode only.
        canary = [] if mode == own else ["gate.expect=[]"]
        return load_scenario(
            path, [*overrides, f"target.env.INVOICES_MODE={mode}", f"seed={base.seed + i}", *canary]
        )

    plans = {mode: [variant(mode, i) for i in range(runs)] for mode in modes}
    for scenarios in plans.values():
        check_environment(scenarios[0])
    return plans


async def run_plan(
    plans: Mapping[str, Sequence[Scenario]],
    results_dir: Path,
    run_dirs: list[Path],
    *,
    preflight_first: bool = True,
    progress_interval_s: float | None = 1.0,
    out: TextIO | None = None,
) -> dict[str, list[Path]]:
    """Run every planned scenario into ``results_dir``, one after the other, each variant's first
    after a preflight; the run directories per mode. ``run_dirs`` grows as each run starts, so an
    interrupted reproduction can name its partial run. Each is announced on ``out``: standard error
    as it is at the call, by default."""
    out = sys.stderr if out is None else out
    done: dict[str, list[Path]] = {}
    for mode, scenarios in plans.items():
        done[mode] = []
        for i, scenario in enumerate(scenarios, 1):
            out.write(f"== {mode}: run {i}/{len(scenarios)} (seed {scenario.seed})\n")
            out.flush()
            run_dir = rundir.prepare_run_dir(results_dir, scenario)
            run_dirs.append(run_dir)
            if preflight_first and i == 1:
                out.write((await preflight(scenario, run_dir, run_dir.name)).describe() + "\n")
            out.write(announcement(scenario, run_dir.name) + "\n")
            out.flush()
            await execute(scenario, run_dir, out=out, progress_interval_s=progress_interval_s)
            done[mode].append(run_dir)
    return done


def audit(done: Mapping[str, Sequence[Path]]) -> list[VariantResult]:
    """Audit every run (writing its reports) and pool them per variant."""
    return [VariantResult(mode, [audit_and_report(d) for d in dirs]) for mode, dirs in done.items()]


def write_reports(results_dir: Path, results: Sequence[VariantResult], seconds: float) -> Path:
    """``reproduce-<time>.md`` (the table, the runs, the wall time) and its page ``.html`` in
    ``results_dir``; the Markdown's path."""
    names = [a.run_dir.name for r in results for a in r.audits]
    text = f"# {TITLE}\n\n{table(results)}\n\nRuns: {', '.join(names)}\nWall time: {seconds:.0f}s\n"
    out = results_dir / f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}.md"
    out.write_text(text, encoding="utf-8")
    counts = [Counts(r.mode, r.duplicates, r.intents) for r in results]
    pairs = [(i, i + 1) for i in range(len(counts) - 1)]
    page = render_comparison_html(TITLE, counts, pairs, [f"{name}/{REPORT_HTML}" for name in names])
    out.with_suffix(".html").write_text(page, encoding="utf-8")
    return out
