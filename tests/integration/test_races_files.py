"""``mcp-chaos races --second call`` on the notes reference target (a JSON-lines file, its pod's file
operations traced): two calls side by side, the second sent at each point of the first (its request,
each file operation of its save, its answer) and held at each of its own while the first runs.

The notes server saves on one event loop with synchronous file I/O, so a call held at a file operation
stops every call: those orderings are blocked (the server serializes there). With the lost_update flaw
(load, work, save the whole file, no lock) the ordering where both calls are at the server at once
loses one note, in every run: the later save was loaded before the other's. The server's own work
between load and save (``NOTES_WORK_MS``, 150 ms) is what lets the second load there; a call's way from
the door to its load takes a few milliseconds."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.cli import main
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.integration

NOTES = ROOT / "targets" / "notes" / "server.py"
BOTH_AT_WORK = "first:request"
"""The second call sent as the first reaches the server: both load before either saves."""
FIX = (
    "loads the file, changes it, saves it whole with no lock: hold one lock across load-modify-save, "
    "or append"
)


def notes(flaw: str) -> dict[str, Any]:
    env = {"NOTES_TRANSPORT": "http", "NOTES_FILE": "{data_dir}/notes.jsonl", "NOTES_FLAW": flaw}
    return {
        "name": f"notes-{flaw}",
        "seed": 5,
        "target": {
            "command": ["{python}", str(NOTES)],
            "env": {**env, "NOTES_WORK_MS": "150"},
            "ready_timeout_s": 30,
        },
        "workload": {
            "intents": 3,
            "tool": "add_note",
            "arguments": {"title": "{marker}", "body": "note {index}"},
        },
        "client": {"attempt_timeout_s": 10},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}},
    }


def races(flaw: str, tmp_path: Path, name: str) -> tuple[int, dict[str, Any], float]:
    """``mcp-chaos races --second call`` of the notes target: its exit code, its JSON, its seconds."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump(notes(flaw)), encoding="utf-8")
    out = tmp_path / f"{name}.json"
    started = time.monotonic()
    code = main(
        [
            *("races", str(scenario), "--second", "call", "--hold-limit", "1"),
            *("--json", str(out), "--results", str(tmp_path), "--quiet"),
        ]
    )
    return code, orjson.loads(out.read_bytes()), time.monotonic() - started


def table(found: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["id"], o["made"], o["verdict"]) for o in found["orderings"]]


def test_a_load_modify_save_store_loses_a_note_where_both_calls_load_before_either_saves_every_time(
    tmp_path: Path,
) -> None:
    tables = []
    for repetition in range(2):
        code, found, seconds = races("lost_update", tmp_path, f"lost{repetition}")
        assert code == 1
        assert not found["untried"], found["untried"]
        assert found["clean_call"] == [
            *("request", "fs_truncate#1", "fs_write#1", "fs_fsync#1", "fs_rename#1", "fs_fsync#2", "response")
        ]
        rows = {o["id"]: o for o in found["orderings"]}
        lost = rows[BOTH_AT_WORK]
        assert (lost["made"], lost["finding"], lost["verdicts"]) == (
            "made",
            "lost",
            {"exactly_once": 1, "lost": 1},
        )
        assert lost["fix"] == FIX
        assert [a["attempt"] for a in lost["answers"]] == ["first", "second"]  # both answered ok
        # The interleaving of their saves: one call's write, then the other's, each placed by the note
        # it names (the other's rename, fsync and truncate, while both were at work, are either's).
        writes = [step for step in lost["ran"] if step.endswith(":fs_write#1")]
        assert sorted(writes) == ["1:fs_write#1", "2:fs_write#1"], lost["ran"]
        assert [o["id"] for o in found["orderings"] if o["finding"]] == [BOTH_AT_WORK]
        for one in found["orderings"]:
            if ":fs_" in one["id"]:  # a held save stops the server's one event loop
                assert one["made"] == "blocked", one
                assert one["why"].endswith("the server serializes here"), one
        assert seconds < 90, seconds  # about 25 s alone on 2 cores
        tables.append(table(found))
    assert tables[0] == tables[1]  # the same table every time


def test_a_store_that_locks_and_replaces_its_file_has_no_finding_every_ordering_made_or_blocked(
    tmp_path: Path,
) -> None:
    code, found, seconds = races("none", tmp_path, "none")
    assert code == 0
    assert found["findings"] == 0
    assert len(found["orderings"]) == 14
    assert {o["made"] for o in found["orderings"]} == {"made", "blocked"}
    assert {o["verdict"] for o in found["orderings"]} == {"exactly_once"}
    assert found["conclusion"] == "no finding: every one of the 14 orderings tried and judged"
    assert seconds < 90, seconds  # about 20 s alone on 2 cores


def test_the_lost_updates_emitted_test_fails_3_of_3_and_passes_once_the_store_locks(tmp_path: Path) -> None:
    """``races --second call --only first:request --emit DIR``: the reproducer tries the ordering three
    times after a clean call; its pytest file fails with three lost notes, and passes once the server
    holds its lock across load-modify-save (NOTES_FLAW=none)."""
    scenario = tmp_path / "lost.yaml"
    scenario.write_text(yaml.safe_dump(notes("lost_update")), encoding="utf-8")
    emitted = tmp_path / "emitted"
    started = time.monotonic()
    said = subprocess.run(
        [
            *(sys.executable, "-m", "harness.cli", "races", str(scenario), "--second", "call"),
            *("--only", BOTH_AT_WORK, "--emit", str(emitted), "--results", str(tmp_path / "r"), "--quiet"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert said.returncode == 1, said.stdout + said.stderr
    assert f"reproduce with: mcp-chaos races {scenario} --second=call --only {BOTH_AT_WORK}\n" in said.stdout
    reproducer = emitted / "race-first-request.yaml"
    test = emitted / "test_race_first_request.py"
    assert sorted(emitted.iterdir()) == [reproducer, test]
    made = yaml.safe_load(reproducer.read_text(encoding="utf-8"))
    race = made["faults"]["crash_points"]["race"]
    assert (race["only"], race["repeat"], race["second"]) == ([BOTH_AT_WORK], 3, "call")
    assert made["workload"]["concurrency"] == 2

    def pytest_on(test: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
        return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)

    still = pytest_on(test)
    assert still.returncode == 1, still.stdout + still.stderr
    assert "'lost': 3" in still.stdout, still.stdout  # each of the three tries lost a note
    made["target"]["env"]["NOTES_FLAW"] = "none"
    reproducer.write_text(yaml.safe_dump(made), encoding="utf-8")
    passed = pytest_on(test)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert time.monotonic() - started < 120  # about 30 s alone on 2 cores
