"""The folder of remembered findings: one file per verdict and point, merged across runs, forgotten once
fixed; files of another format named and skipped, never guessed; the gate's judgement of one still
failing."""

from __future__ import annotations

import json
from pathlib import Path

from harness.remembered import FORMAT, Folder, Remembered, markdown, outcome, told
from harness.replay import Finding, Replayed, Result
from harness.scenario import parse_scenario
from harness.scenario.gate import Gate
from tests.helpers.scenarios import invoice_scenario, invoices_on_postgres

SCENARIO = parse_scenario(invoices_on_postgres("naive"))
"""Its points include commits: the harness holds its PostgreSQL."""


def run_dir(tmp_path: Path, name: str, scenario: str = "name: x\n") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "scenario.yaml").write_text(scenario, encoding="utf-8")
    return d


def test_findings_at_one_point_are_one_file_and_a_later_run_counts_again(tmp_path: Path) -> None:
    folder = Folder(tmp_path / "db", "my scenario")
    found = [
        Finding(7, "duplicate", "kill", "db_commit#2", "attempt 1: after db_commit#2, before its answer"),
        Finding(9, "duplicate", "kill", "db_commit#2", "attempt 1: after db_commit#2, before its answer"),
        Finding(3, "lost", "kill", "response", "attempt 2: before its answer", guessed=True),
        Finding(
            4,
            "lost",
            "no_fault",
            None,
            "made with no fault: replay makes pod kills and stream faults again, not this",
        ),
    ]
    saved = folder.remember(run_dir(tmp_path, "run-1"), SCENARIO, found)
    assert folder.path == tmp_path / "db" / "my-scenario"
    assert sorted(p.name for p in folder.path.iterdir()) == [
        "duplicate-db_commit-2.json",
        "lost-response-guessed.json",
    ]
    assert [r.intents for r in saved] == [[7, 9], [3]]
    folder.remember(run_dir(tmp_path, "run-2"), SCENARIO, found[:1])
    (again,) = [r for r in folder.load() if r.point == "db_commit#2"]
    assert (again.run, again.runs, again.intents) == ("run-2", 2, [7])
    assert again.finding() == found[0]


def test_a_fixed_finding_is_forgotten_and_the_others_kept(tmp_path: Path) -> None:
    folder = Folder(tmp_path, "s")
    folder.remember(
        run_dir(tmp_path, "run-1"),
        SCENARIO,
        [Finding(1, "duplicate", "kill", "db_commit#1", "w"), Finding(2, "lost", "kill", "db_commit#2", "w")],
    )
    known = folder.load()
    replays = [
        Replayed("db_commit#1", "duplicate", [], Result.FIXED, "ok"),
        Replayed("db_commit#2", "lost", [], Result.STILL_FAILING, "lost in 3 of 3 tries"),
    ]
    pairs = told(replays, known)
    failing = outcome(pairs, folder)
    assert [r.verdict for r in failing] == ["lost"]
    assert [r.point for r in folder.load()] == ["db_commit#2"]
    section = markdown(pairs, folder, failing)
    assert "**The gate failed on 1 still failing.**" in section
    # Escaped for Markdown (a where quotes the server's statements): renders as written on the terminal.
    assert "- duplicate w \\[found by run-1\\]: FIXED (forgotten): ok" in section
    assert "- lost w \\[found by run-1\\]: STILL FAILING: lost in 3 of 3 tries" in section


def test_a_file_of_another_format_is_named_and_skipped(tmp_path: Path) -> None:
    folder = Folder(tmp_path, "s")
    folder.path.mkdir()
    (folder.path / "old.json").write_text(json.dumps({"format": FORMAT + 1}), encoding="utf-8")
    (folder.path / "torn.json").write_text("{", encoding="utf-8")
    assert folder.load() == []
    assert len(folder.skipped) == 2
    assert "format 2, not 1" in folder.skipped[0]


def test_a_finding_no_crash_point_can_hold_is_not_remembered(tmp_path: Path) -> None:
    """Replicas: a replay kills one pod at a point, which crash points refuse for several."""
    replicas = parse_scenario(invoice_scenario(target={**invoice_scenario()["target"], "replicas": 2}))
    saved = Folder(tmp_path, "s").remember(
        run_dir(tmp_path, "run-1"), replicas, [Finding(1, "duplicate", "kill", "response", "w", guessed=True)]
    )
    assert saved == []


def test_a_remembered_scenario_that_no_longer_loads_confirms_nothing() -> None:
    r = Remembered("s", "duplicate", "response", True, "kill", "w", "run-1", "t", scenario_yaml="name: [")
    assert r.scenario_as_run() is None


def test_the_gate_fails_on_one_remembered_finding_only_where_one_intent_fails_the_run() -> None:
    assert Gate().fails_at_first("duplicate")
    assert not Gate(expect=["duplicate"]).fails_at_first("duplicate")
    assert not Gate(max_duplicates=2).fails_at_first("duplicate")
    assert Gate(max_duplicates=2).fails_at_first("lost")
    assert not Gate(fail_on=["lost"]).fails_at_first("duplicate")
