"""Findings remembered between runs: a run saves the findings a replay can make again, the next run of
the scenario replays them first; one still failing fails that run even where the run itself found
nothing, and one fixed is forgotten. The finding comes from a failpoint (the server exits right after
its invoice's commit, once), so every run of the test starts from it."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from harness.remembered import Folder, Remembered
from harness.scenario import load_scenario
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
        "run", scenario, "--results", results, "--quiet", "--no-preflight", "--run-id", "second",
        "--junit", tmp_path / "second.xml", "--set", "target.env.INVOICES_FAILPOINT=",
    )  # fmt: skip
    assert "duplicate attempt 1: before its answer" in second.stderr, second.stderr
    assert "STILL FAILING" in second.stderr
    assert second.stdout.startswith("exactly once: 4 of 4 intents"), second.stdout  # the run found nothing
    failed = "gate: failed by remembered findings still failing: duplicate at response (exit 1)"
    assert failed in second.stdout
    assert second.returncode == 1
    assert [p.name for p in folder.glob("*.json")] == [saved.name]
    # Where a CI job's reader looks too: the report and the JUnit say the gate failed, and on what.
    report = (results / "second" / "report.md").read_text(encoding="utf-8")
    assert "## Remembered findings, replayed before this run" in report
    assert "**The gate failed on 1 still failing.**" in report
    junit = ET.parse(tmp_path / "second.xml").getroot()
    (case,) = [c for c in junit.iter("testcase") if c.get("name") == "remembered.duplicate@response"]
    failure = case.find("failure")
    assert failure is not None
    assert "STILL FAILING" in failure.get("message", "")

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


def test_a_keyed_duplicate_inside_the_call_replays_at_the_window_an_exploration_finds(tmp_path: Path) -> None:
    """The keyed design on SQLite: its rare duplicate falls between the invoice's commit and the key's,
    where a random run sees no point; a kill before the answer takes effect once. The replay then explores
    the call's file operations on the build that made it, finds the kill that duplicates, and makes it
    there 3 of 3. The finding is remembered as a nightly run would have left it (a committed file)."""
    scenario = tmp_path / "invoices.yaml"
    data = invoice_scenario(mode="keyed", intents=2)
    scenario.write_text(yaml.safe_dump(data), encoding="utf-8")
    results = tmp_path / "results"
    as_run = load_scenario(scenario).dump_yaml()
    where = "attempt 1: before its answer (no point of it observed)"
    Folder(results / "findings", "itest").save(
        Remembered(
            "itest", "duplicate", "response", True, "kill", where, "nightly", "t", [7], scenario_yaml=as_run
        )
    )
    done = mcp_chaos("run", scenario, "--results", results, "--quiet", "--no-preflight")
    assert "looking for the duplicate inside the call" in done.stderr, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("  duplicate "))
    assert re.search(r"STILL FAILING: the window is at fs_\w+#\d+ \(an exploration", line), line
    assert line.endswith("duplicate in 3 of 3 tries"), line
    assert done.returncode == 1, done.stdout
