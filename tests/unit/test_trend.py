"""Trend files: a run whose interval no longer overlaps the previous run's is flagged, per scenario."""

from __future__ import annotations

from pathlib import Path

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
