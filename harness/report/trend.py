"""Trend: one row per run in a history file, and the nights whose rate moved beyond chance.

``run --trend FILE`` appends a row (CSV, or Parquet when the file ends in
``.parquet``); the nightly job keeps the file between nights. ``mcp-chaos trend
FILE`` shows each series' duplicate rate with its interval over the runs (a
series is the scenario, or what ``--trend-as`` names: the same scenario against
two designs is two series), and flags a run whose interval no longer overlaps
the previous run's: a shift a reviewer should look at, not noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.audit.auditor import AuditResult
from harness.errors import UsageError
from harness.history import Verdict
from harness.report import pages
from harness.report.tables import markdown_table

COLUMNS = [
    "run_id",
    "started_at",
    "series",
    "scenario",
    "target",
    "intents",
    "duplicates",
    "duplicate_rate",
    "duplicate_ci_low",
    "duplicate_ci_high",
    "lost",
    "lost_rate",
    "status",
    "gate_passed",
]


def row_of(result: AuditResult, series: str | None = None) -> dict[str, Any]:
    """The run's row; ``series`` names what it is compared with over time (default: the scenario)."""
    summary, target = result.summary, result.scenario.target
    duplicate, lost = summary.rates[Verdict.DUPLICATE], summary.rates[Verdict.LOST]
    return {
        "run_id": summary.run_id,
        "started_at": summary.started_at,
        "series": series or summary.scenario,
        "scenario": summary.scenario,
        "target": target.kubernetes.url
        if target.kubernetes
        else target.image or " ".join(target.command or ()),
        "intents": summary.intents.started,
        "duplicates": duplicate.count,
        "duplicate_rate": duplicate.value,
        "duplicate_ci_low": duplicate.ci95[0],
        "duplicate_ci_high": duplicate.ci95[1],
        "lost": lost.count,
        "lost_rate": lost.value,
        "status": summary.status.value,
        "gate_passed": summary.gate.passed,
    }


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # pandas raises many kinds for a file that is not a table
        raise UsageError(
            f"{path} is not a trend file this harness wrote ({type(exc).__name__}: {exc})"
        ) from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise UsageError(f"{path} is not a trend file: it lacks {', '.join(missing)}")
    return frame


def append(path: Path, result: AuditResult, series: str | None = None) -> None:
    frame = pd.concat([_read(path), pd.DataFrame([row_of(result, series)])], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def flagged(frame: pd.DataFrame) -> pd.Series:
    """Per row: its interval does not overlap the previous run's of the same series."""
    previous_low = frame.groupby("series")["duplicate_ci_low"].shift(1)
    previous_high = frame.groupby("series")["duplicate_ci_high"].shift(1)
    apart = (frame["duplicate_ci_low"] > previous_high) | (frame["duplicate_ci_high"] < previous_low)
    return apart.fillna(False).astype(bool)


def render(path: Path) -> tuple[str, bool]:
    """The trend table, and whether the newest run of some scenario moved beyond chance."""
    frame = _read(path)
    if frame.empty:
        raise UsageError(f"{path} holds no runs yet (append with: mcp-chaos run ... --trend {path})")
    frame = frame.sort_values("started_at", kind="stable").reset_index(drop=True)
    frame["moved"] = flagged(frame)
    rows = [
        [
            r["series"],
            r["run_id"],
            f"{int(r['duplicates'])}/{int(r['intents']):,}",
            f"{float(r['duplicate_rate']):.2%}",
            f"{float(r['duplicate_ci_low']):.2%}–{float(r['duplicate_ci_high']):.2%}",
            "MOVED" if r["moved"] else "",
        ]
        for r in frame.to_dict("records")
    ]
    table = markdown_table(["series", "run", "duplicates", "rate", "95% CI", "vs previous"], rows, "llrrrl")
    newest = frame.groupby("series").tail(1)
    return table, bool(newest["moved"].any())


def plot(path: Path) -> str:
    """Duplicate rate with its interval per run, one series per scenario, as an embeddable PNG URI."""
    frame = _read(path).sort_values("started_at", kind="stable")
    fig, ax = pages.figure(10, 3.5)
    for series, group in frame.groupby("series"):
        values = group["duplicate_rate"].to_numpy() * 100
        low = values - group["duplicate_ci_low"].to_numpy() * 100
        high = group["duplicate_ci_high"].to_numpy() * 100 - values
        ax.errorbar(
            group["started_at"].astype(str), values, yerr=[low, high], fmt="o-", capsize=4, label=series
        )
    ax.set_ylabel("duplicate rate, % (95% CI)")
    ax.tick_params(axis="x", labelrotation=45)
    ax.legend(fontsize=8)
    return pages.png(fig)


def write_output(path: Path, output: Path) -> None:
    """``trend -o``: ``FILE.html`` is a page with the plot; any other name gets the table."""
    if output.suffix == ".html":
        page = f'<!doctype html><meta charset="utf-8"><title>Trend</title><img src="{plot(path)}">'
        output.write_text(page, encoding="utf-8")
    else:
        output.write_text(render(path)[0], encoding="utf-8")
