"""Trend files: a run whose interval no longer overlaps the previous run's is flagged, per scenario."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.audit.stats import Rate
from harness.errors import UsageError
from harness.report.trend import COLUMNS, flagged, render, write_output


def frame(rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    data = []
    for i, (scenario, duplicates, intents) in enumerate(rows):
        rate = Rate(duplicates, intents)
        data.append(
            {
                "run_id": f"r{i}",
                "started_at": f"2026-11-{i + 1:02d}T03:17:00+00:00",
                "series": scenario,
                "scenario": scenario,
                "target": "x",
                "intents": intents,
                "duplicates": duplicates,
                "duplicate_rate": rate.value,
                "duplicate_ci_low": rate.ci95[0],
                "duplicate_ci_high": rate.ci95[1],
                "lost": 0,
                "lost_rate": 0.0,
                "status": "completed",
                "gate_passed": True,
            }
        )
    return pd.DataFrame(data, columns=COLUMNS)


def test_a_shift_beyond_the_interval_is_flagged_per_scenario() -> None:
    rows = frame([("a", 37, 2700), ("b", 0, 2700), ("a", 35, 2700), ("b", 1, 2700), ("a", 0, 2700)])
    assert flagged(rows).tolist() == [False, False, False, False, True]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_render_says_when_the_newest_run_moved(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"trend{suffix}"
    rows = frame([("a", 37, 2700), ("a", 34, 2700)])
    rows.to_parquet(path) if suffix == ".parquet" else rows.to_csv(path, index=False)
    table, moved = render(path)
    assert not moved
    assert "| a      | r1  |   34/2,700 |" in table
    moved_rows = frame([("a", 37, 2700), ("a", 34, 2700), ("a", 0, 2700)])
    moved_rows.to_parquet(path) if suffix == ".parquet" else moved_rows.to_csv(path, index=False)
    table, moved = render(path)
    assert moved
    assert table.splitlines()[-1].endswith("| MOVED       |")


def test_a_file_that_is_not_a_trend_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="is not a trend file: it lacks run_id"):
        render(path)
    with pytest.raises(UsageError, match="holds no runs yet"):
        render(tmp_path / "missing.csv")


def test_the_output_is_a_page_with_the_plot_or_the_table(tmp_path: Path) -> None:
    path = tmp_path / "trend.csv"
    frame([("a", 37, 2700), ("a", 34, 2700)]).to_csv(path, index=False)
    write_output(path, tmp_path / "trend.html")
    page = (tmp_path / "trend.html").read_text()
    assert page.startswith("<!doctype html>")
    assert page.count('src="data:image/png;base64,') == 1
    write_output(path, tmp_path / "trend.md")
    assert (tmp_path / "trend.md").read_text() == render(path)[0]


GOOD = frame([("a", 37, 2700), ("a", 34, 2700)])


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("duplicate_rate", float("nan"), "duplicate_rate is (nan|''), not a number from 0 to 1"),
        ("duplicate_ci_high", "lots", "duplicate_ci_high is 'lots', not a number from 0 to 1"),
        ("duplicate_ci_low", "1e400", "duplicate_ci_low is '1e400', not a number from 0 to 1"),
        ("duplicate_rate", 1.5, "duplicate_rate is '?1.5'?, not a number from 0 to 1"),
        ("intents", -3, "intents is '?-3'?, not a whole number of 0 or more"),
        ("duplicates", 2.5, "duplicates is '?2.5'?, not a whole number of 0 or more"),
        ("duplicates", 9999, "duplicates 9999 exceed the intents 2700"),
        ("duplicate_rate", 0.5, "duplicate_rate 0.5 is outside its interval"),
        ("run_id", None, r"run_id is empty \(a truncated row\?\)"),
    ],
)
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_damaged_row_is_named(tmp_path: Path, suffix: str, column: str, value: Any, problem: str) -> None:
    rows = GOOD.astype({column: object})
    rows.loc[1, column] = value
    path = tmp_path / f"trend{suffix}"
    if suffix == ".parquet":
        # Text in a numeric column makes the column one of strings, as a hand-edited Parquet file has.
        if any(isinstance(v, str) for v in rows[column]):
            rows[column] = rows[column].astype(str)
        rows.to_parquet(path)
    else:
        rows.to_csv(path, index=False)
    where = "row 2" if suffix == ".parquet" else "line 3"
    with pytest.raises(UsageError, match=re.escape(f"{path} {where}: ") + problem) as raised:
        render(path)
    assert "\n" not in raised.value.message


def test_a_truncated_line_is_named_not_shown_as_nan(tmp_path: Path) -> None:
    path = tmp_path / "trend.csv"
    GOOD.to_csv(path, index=False)
    text = path.read_text()
    path.write_text(text[: text.rindex(",", 0, text.rindex(",", 0, len(text) - 40))])
    with pytest.raises(UsageError, match=re.escape(f"{path} line 3: ")):
        render(path)


def test_numbers_written_as_strings_in_parquet_are_read(tmp_path: Path) -> None:
    path = tmp_path / "trend.parquet"
    GOOD.astype({c: str for c in ("intents", "duplicates", "duplicate_rate", "duplicate_ci_low")}).to_parquet(
        path
    )
    table, moved = render(path)
    assert "|   34/2,700 |" in table
    assert not moved
