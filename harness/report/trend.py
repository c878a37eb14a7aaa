"""Trend: one row per run in a history file, and the nights whose rate moved beyond chance.

``run --trend FILE`` appends a row (CSV, or Parquet when the file ends in
``.parquet``); the nightly job keeps the file between nights. ``mcp-chaos trend
FILE`` shows each series' duplicate rate with its interval over the runs (a
series is the scenario, or what ``--trend-as`` names: the same scenario against
two designs is two series), and flags a run whose interval no longer overlaps
the previous run's: a shift a reviewer should look at, not noise.

A trend file lives between nights and is edited, merged and truncated by hand
and by CI caches: every row is checked when it is read (counts are whole numbers
from 0 to the intents, rates are numbers from 0 to 1 inside their interval), and
the first damaged one is a one-line error that names the file and the row, rather
than a traceback or a rate shown as ``nan%``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
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
NAMES = ("run_id", "started_at", "series")
"""Columns a row cannot do without: what the table shows and sorts by."""
COUNTS = ("intents", "duplicates", "lost")
RATES = ("duplicate_rate", "duplicate_ci_low", "duplicate_ci_high", "lost_rate")
SLACK = 1e-9
"""What a rate may stray outside its interval by: floats written as text and read back."""


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
        # A CSV's cells as written, so that a damaged one is shown as it is in the file ('1e400', not inf).
        frame = (
            pd.read_parquet(path)
            if path.suffix == ".parquet"
            else pd.read_csv(path, dtype=str, keep_default_na=False)
        )
    except Exception as exc:  # pandas raises many kinds for a file that is not a table
        raise UsageError(
            f"{path} is not a trend file this harness wrote ({type(exc).__name__}: {exc})"
        ) from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise UsageError(f"{path} is not a trend file: it lacks {', '.join(missing)}")
    for number, row in enumerate(frame.to_dict("records"), 1):
        problem = row_problem(row)
        if problem is not None:
            # A CSV row's line: the header is line 1. A Parquet file has rows, not lines.
            where = f"row {number}" if path.suffix == ".parquet" else f"line {number + 1}"
            raise UsageError(f"{path} {where}: {problem} (fix or delete that row)")
    for column in (*COUNTS, *RATES):
        frame[column] = pd.to_numeric(frame[column])
    return frame.astype({c: "int64" for c in COUNTS})


def _number(value: Any) -> float | None:
    """A finite number, whatever type the file gave it (text in a CSV, strings in a Parquet column)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def row_problem(row: Mapping[Hashable, Any]) -> str | None:
    """What is wrong with one row of a trend file, or None: it can be shown and compared."""
    for name in NAMES:
        value = row[name]
        if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
            return f"{name} is empty (a truncated row?)"
    numbers: dict[str, float] = {}
    for name in COUNTS:
        number = _number(row[name])
        if number is None or number < 0 or not number.is_integer():
            return f"{name} is {_shown(row[name])}, not a whole number of 0 or more"
        numbers[name] = number
    for name in RATES:
        number = _number(row[name])
        if number is None or not 0 <= number <= 1:
            return f"{name} is {_shown(row[name])}, not a number from 0 to 1"
        numbers[name] = number
    for name in ("duplicates", "lost"):
        if numbers[name] > numbers["intents"]:
            return f"{name} {numbers[name]:.0f} exceed the intents {numbers['intents']:.0f}"
    low, rate, high = (numbers[c] for c in ("duplicate_ci_low", "duplicate_rate", "duplicate_ci_high"))
    if not low - SLACK <= rate <= high + SLACK:
        return f"duplicate_rate {rate:g} is outside its interval {low:g}–{high:g}"
    return None


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
