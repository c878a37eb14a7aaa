"""Findings remembered between runs: a run saves the findings a replay can make again, the next run of
the scenario replays them first; one still failing fails that run even where the run itself found
nothing, and one fixed is forgotten. The finding comes from a failpoint (the server exits right after
its invoice's commit, once), so every run of the test starts from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import mcp_chaos
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration


def test_a_remembered_duplicate_is_replayed_first_and_forgotten_once_fixed(tmp_path: Path) -> None:
    scenario = tmp_path / "invoices.yaml"
    data = invoice_scenario(mode="naive", intents=4, env={"INVOICES_FAILPOINT": "after_business_commit@2"})
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    results, folder = tmp_path / "results", tmp_path / "results" / "findings" / "itest"

    first = mcp_chaos("run", scenario, "--results", results, "--quiet", "--no-preflight")
    assert first.returncode == 1, first.stdout + first.stderr
    assert f"remembered: 1 finding(s) in {folder}" in first.stdout
    (saved,) = folder.glob("*.json")
    assert saved.name == "duplicate-response-guessed.json"
    kept = json.loads(saved.read_text(encoding="utf-8"))
    assert (kept["verdict"], kept["point"], kept["runs"], len(kept["intents"])) == (
        "duplicate",
        "response",
        1,
        1,
    )
    assert "INVOICES_MODE: naive" in kept["scenario_yaml"]

    # The same build without the failpoint: the run finds nothing, the remembered duplicate is still there.
    second = mcp_chaos(
        "run", scenario, "--results", results, "--quiet", "--no-preflight",
        "--set", "target.env.INVOICES_FAILPOINT=",
    )  # fmt: skip
    assert "duplicate attempt 1: before its answer" in second.stderr, second.stderr
    assert "STILL FAILING" in second.stderr
    assert second.stdout.startswith("exactly once: 4 of 4 intents"), second.stdout  # the run found nothing
    failed = "gate: failed by remembered findings still failing: duplicate at response (exit 1)"
    assert failed in second.stdout
    assert second.returncode == 1
    assert [p.name for p in folder.glob("*.json")] == [saved.name]

    # The fix: replayed FIXED (confirmed against the build that made it, still failing there), forgotten.
    third = mcp_chaos(
        "run", scenario, "--results", results, "--quiet", "--no-preflight",
        "--set", "target.env.INVOICES_MODE=atomic",
    )  # fmt: skip
    assert "FIXED (forgotten)" in third.stderr, third.stderr
    assert "the run's own build, killed there: duplicate in 3 of 3 tries" in third.stderr
    assert third.returncode == 0, third.stdout + third.stderr
    assert list(folder.glob("*.json")) == []


def test_no_findings_neither_replays_nor_remembers(tmp_path: Path) -> None:
    scenario = tmp_path / "invoices.yaml"
    data = invoice_scenario(mode="naive", intents=4, env={"INVOICES_FAILPOINT": "after_business_commit@2"})
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = mcp_chaos("run", scenario, "--results", tmp_path, "--quiet", "--no-preflight", "--no-findings")
    assert done.returncode == 1
    assert "remembered" not in done.stdout + done.stderr
    assert not (tmp_path / "findings").exists()
