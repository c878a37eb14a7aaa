"""`mcp-chaos replay`: a run's finding made again, its kill at the point its attempt had reached, on a
fresh target: STILL FAILING against the design that made it, FIXED against one that takes the same
kill exactly once. The runs that find the finding use failpoints (the server exits right after its
invoice's commit, once), so that each test starts from a finding every time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.history import Verdict
from harness.replay import namespace_of
from tests.helpers.cli import mcp_chaos
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario, invoices_on_postgres, run_scenario

pytestmark = pytest.mark.integration


def found(data: dict[str, Any], results: Path) -> tuple[Path, int]:
    """A run with one duplicate: its directory and the duplicate's intent."""
    result = run_scenario(data, results)
    duplicates = result.intents.loc[result.intents["verdict"] == Verdict.DUPLICATE, "intent"].tolist()
    assert len(duplicates) == 1, result.intents["verdict"].tolist()
    return result.run_dir, int(duplicates[0])


def replayed(run_dir: Path, tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    out = tmp_path / f"replay-{len(list(tmp_path.iterdir()))}.json"
    done = mcp_chaos("replay", run_dir, *args, "--json", out, "--results", tmp_path)
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode, json.loads(out.read_text(encoding="utf-8")), done.stdout


def test_a_duplicate_no_point_of_which_was_seen_replays_killed_before_its_answer(tmp_path: Path) -> None:
    """SQLite: the harness sees no point of the call, so the replay kills the pod when the answer reaches
    it: the naive design makes the invoice twice in every try; the atomic one once."""
    data = invoice_scenario(mode="naive", intents=4, env={"INVOICES_FAILPOINT": "after_business_commit@2"})
    run_dir, intent = found(data, tmp_path / "results")
    explained = mcp_chaos("explain", run_dir)  # the finding says how to make it again
    assert f"reproduce with: mcp-chaos replay RUN_DIR {intent}" in explained.stdout, explained.stdout
    assert f"`mcp-chaos replay RUN_DIR {intent}`" in (run_dir / "report.md").read_text(encoding="utf-8")
    code, rows, told = replayed(run_dir, tmp_path)
    assert code == 1, told
    (row,) = rows
    assert (row["intent"], row["point"], row["result"]) == (intent, "response", "STILL FAILING")
    assert row["tries"] == ["duplicate"] * 3
    assert "replay: 1 STILL FAILING" in told
    # Made in the run's own namespace: the tries' markers and keys are made as the run's were.
    assert namespace_of(Path(row["run_dir"])) == namespace_of(run_dir) is not None
    # Against the atomic design: exactly once, and (the point being a guess) the run's own build, killed
    # there too, still made the duplicate: the kill is where the window is, so the fix is one.
    code, rows, told = replayed(run_dir, tmp_path, "--set", "target.env.INVOICES_MODE=atomic")
    assert code == 0, told
    assert [(r["result"], r["tries"]) for r in rows] == [("FIXED", ["exactly_once"] * 3)]
    assert rows[0]["why"].endswith("; the run's own build, killed there: duplicate in 3 of 3 tries")


@pytest.mark.postgres
def test_a_duplicate_replays_at_the_commit_its_attempt_had_made(
    tmp_path: Path, postgres_server: None
) -> None:
    """PostgreSQL: the story says the crash caught the attempt after its invoice's commit; the replay kills
    the pod at that commit (by its index in the call), three times of three a duplicate; against the
    atomic design, the same commit index is its one transaction, and the retry finds the key."""
    data = invoices_on_postgres("naive", INVOICES_FAILPOINT="after_business_commit@2")
    data["workload"]["intents"] = 4
    run_dir, intent = found(data, tmp_path / "results")
    code, rows, told = replayed(run_dir, tmp_path)
    assert code == 1, told
    (row,) = rows
    assert row["intent"] == intent
    assert row["point"] == "db_commit#2"  # the failpoint's own row, committed after the invoice's
    assert row["where"] == "attempt 1: after db_commit#2 (INSERT failpoint_hits), before its answer"
    assert (row["result"], row["tries"]) == ("STILL FAILING", ["duplicate"] * 3)
    code, rows, told = replayed(run_dir, tmp_path, str(intent), "--set", "target.env.INVOICES_MODE=atomic")
    assert code == 0, told
    assert [(r["result"], r["tries"]) for r in rows] == [("FIXED", ["exactly_once"] * 3)]


def test_a_duplicate_a_stream_fault_made_replays_with_its_rule_on_the_same_attempt(tmp_path: Path) -> None:
    """A duplicate made by a stream fault (the answer cut after the server finished): the replay makes the
    same rule hit the same attempt of each try; against the atomic design, the retry finds the key. An
    intent that is no finding is said to be none."""
    data = invoice_scenario(mode="naive", intents=2)
    data["faults"] = {"stream": [{"fault": "sever_response", "intent": 1, "attempt": 1}]}
    run_dir, intent = found(data, tmp_path / "results")
    code, rows, told = replayed(run_dir, tmp_path, "0", str(intent))
    assert code == 1, told
    rows.sort(key=lambda r: r["intent"])
    assert [(r["intent"], r["result"], r["point"]) for r in rows] == [
        (0, "COULD NOT REPRODUCE", None),
        (intent, "STILL FAILING", "stream:0@1"),
    ]
    assert rows[0]["where"] == "exactly_once: no finding to replay"
    assert rows[1]["where"] == "attempt 1: sever_response (faults.stream rule 0)"
    assert rows[1]["tries"] == ["duplicate"] * 3
    code, rows, told = replayed(run_dir, tmp_path, str(intent), "--set", "target.env.INVOICES_MODE=atomic")
    assert code == 0, told
    assert [(r["result"], r["why"]) for r in rows] == [
        ("FIXED", "struck by faults.stream rule 0 on attempt 1, exactly once in 3 of 3 tries")
    ]


def test_a_finding_no_fault_made_is_not_replayed_and_says_why(tmp_path: Path) -> None:
    """A server that answers success and stores nothing loses every intent with no fault at all: there is
    nothing to make again; replay says so, and exits 2."""
    data = invoice_scenario(mode="atomic", intents=1, env={"INVOICES_FLAW": "apologize"})
    result = run_scenario(data, tmp_path / "results")
    assert result.intents["verdict"].tolist() == [Verdict.LOST]
    code, rows, told = replayed(result.run_dir, tmp_path)
    assert code == 2, told
    assert [(r["result"], r["point"], r["where"]) for r in rows] == [
        (
            "COULD NOT REPRODUCE",
            None,
            "made with no fault: replay makes pod kills and stream faults again, not this",
        )
    ]


def test_notes_a_torn_rewrite_lost_replay_by_storing_one_and_killing_the_next_call(tmp_path: Path) -> None:
    """A file store rewritten in place (notes, ``torn_file``): the 4th save tears the file and kills the
    server (a failpoint), the restart starts empty and its next save drops the three notes acknowledged
    before. Their own calls saw no fault: the replay tells the loss from the fault that tore the file,
    finds the tearing call's window among its file operations (an exploration: the run saw none of
    them), and makes each try store a note and kill the next call there. Against the durable save (a
    temporary file, fsync, rename), the same kill loses nothing."""
    data = {
        "name": "notes-torn",
        "seed": 3,
        "target": {
            "command": ["{python}", str(ROOT / "targets" / "notes" / "server.py")],
            "env": {
                "NOTES_TRANSPORT": "http",
                "NOTES_FILE": "{data_dir}/notes.jsonl",
                "NOTES_FLAW": "torn_file",
                "NOTES_FAILPOINT": "mid_write@4",
            },
            "ready_timeout_s": 30,
            "restart_delay_s": 0.0,
        },
        "workload": {
            "intents": 6,
            "tool": "add_note",
            "arguments": {"title": "{marker}", "body": "note {index}"},
        },
        # Retries until the restarted server answers (its start took 1.3 s here, more on a busy machine).
        "client": {"attempt_timeout_s": 10, "max_attempts": 200, "backoff": {"initial_s": 0.1, "max_s": 0.2}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}},
    }
    result = run_scenario(data, tmp_path / "results")
    lost = result.intents.loc[result.intents["verdict"] == Verdict.LOST, "intent"].tolist()
    assert lost == [0, 1, 2], result.intents["verdict"].tolist()
    explained = mcp_chaos("explain", result.run_dir)  # no fault hit their calls, and still they replay
    assert "reproduce with: mcp-chaos replay RUN_DIR 0" in explained.stdout, explained.stdout
    code, rows, told = replayed(result.run_dir, tmp_path)
    assert code == 1, told
    assert [r["intent"] for r in rows] == lost
    for row in rows:  # one replay: the fault, not the lost intent's own attempt, is where it was made
        assert row["where"] == "lost when crash#1 tore notes.jsonl mid-rewrite of intent 3"
        assert (row["point"], row["result"], row["tries"]) == ("fs_write#1", "STILL FAILING", ["lost"] * 3)
        assert row["why"].endswith(
            "lost in 3 of 3 tries (each stored, then the next call killed at fs_write#1)"
        )
    # The failpoint is the torn build's alone: the durable save refuses it.
    fix = ("--set", "target.env.NOTES_FLAW=none", "--set", "target.env.NOTES_FAILPOINT=")
    code, rows, told = replayed(result.run_dir, tmp_path, "0", *fix)
    assert code == 0, told
    assert [(r["result"], r["tries"]) for r in rows] == [("FIXED", ["exactly_once"] * 3)]
    assert rows[0]["why"].endswith("the next call killed at fs_write#1, exactly once in 3 of 3 tries")
