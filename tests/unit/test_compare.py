"""`compare` on summaries as found: damaged counts are a one-line error, mixed scenarios a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers.cli import mcp_chaos


def run_dir(
    tmp_path: Path, name: str, *, duplicates: Any = 3, intents: Any = 100, scenario: str = "s"
) -> Path:
    path = tmp_path / name
    path.mkdir()
    summary = {
        "run_id": name,
        "scenario": scenario,
        "verdicts": {"duplicate": duplicates},
        "intents": {"started": intents},
    }
    (path / "summary.json").write_bytes(orjson.dumps(summary))
    return path


@pytest.mark.parametrize(
    ("duplicates", "intents", "problem"),
    [
        (150, 100, "verdicts.duplicate 150 exceeds intents.started 100"),
        (-1, 100, "verdicts.duplicate is -1, not a whole number of 0 or more"),
        (3, -5, "intents.started is -5, not a whole number of 0 or more"),
        (2.5, 100, "verdicts.duplicate is 2.5, not a whole number of 0 or more"),
        ("3", 100, "verdicts.duplicate is '3', not a whole number of 0 or more"),
        (True, 100, "verdicts.duplicate is True, not a whole number of 0 or more"),
    ],
)
def test_damaged_counts_are_one_line(tmp_path: Path, duplicates: Any, intents: Any, problem: str) -> None:
    good = run_dir(tmp_path, "good")
    bad = run_dir(tmp_path, "bad", duplicates=duplicates, intents=intents)
    proc = mcp_chaos("compare", str(good), str(bad))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"mcp-chaos: error: {bad / 'summary.json'}: {problem}")
    assert proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_runs_of_different_scenarios_are_compared_with_a_warning(tmp_path: Path) -> None:
    a = run_dir(tmp_path, "a", scenario="kill-mid-commit")
    b = run_dir(tmp_path, "b", duplicates=0, scenario="sever-streams")
    proc = mcp_chaos("compare", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "mcp-chaos: warning: the runs come from different scenarios (kill-mid-commit, sever-streams): "
        "a difference may be the scenario's, not the design's (compared anyway)\n"
    )
    assert "| a (kill-mid-commit) vs b (sever-streams) |" in proc.stdout


def test_runs_of_one_scenario_are_compared_without_a_word(tmp_path: Path) -> None:
    proc = mcp_chaos("compare", str(run_dir(tmp_path, "a")), str(run_dir(tmp_path, "b", duplicates=0)))
    assert proc.returncode == 0
    assert proc.stderr == ""
