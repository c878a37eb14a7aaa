"""Quality: lost writes lead the report, fail the gate, and carry the cause that explains them.

Against file-store flaws that need no retry to lose a write (targets/notes: a load-modify-save
without a lock, a rewrite in place torn by a crash, a failure answered as a success) and against
a server this project did not write (the official memory server, pinned in tests/servers), the
harness must say "lost" first, exit 1 under the default gate and under a duplicate threshold, name
the cause of most lost intents, and tell the story of one. Runs go through the command line in
process, as a user's would.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness.cli import main
from tests.helpers.paths import MEMORY_SERVER
from tests.helpers.third_party import CHINESE, NEVER_BACK, TORN_DOCUMENT, WEDGED_AFTER, WIPED

pytestmark = pytest.mark.quality

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "targets" / "notes" / "server.py"


def notes_scenario(
    flaw: str, intents: int = 300, kills: int = 2, concurrency: int = 8, **env: str
) -> dict[str, Any]:
    return {
        "name": f"notes-{flaw}",
        "seed": 3,
        "target": {
            "command": [sys.executable, str(NOTES)],
            "transport": "stdio",
            "env": {"NOTES_FILE": "{data_dir}/notes.jsonl", "NOTES_FLAW": flaw, **env},
            "ready_timeout_s": 30,
            "restart_delay_s": 0.2,
        },
        "workload": {
            "intents": intents,
            "concurrency": concurrency,
            "tool": "add_note",
            "arguments": {"title": "{marker}", "body": "note {index}"},
        },
        "client": {"attempt_timeout_s": 10, "max_attempts": 10, "backoff": {"initial_s": 0.05, "max_s": 0.5}},
        **({"faults": {"kill": {"count": kills, "min_uptime_s": 0.2}}} if kills else {}),
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}},
    }


def run_cli(
    tmp_path: Path, data: dict[str, Any], capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, str, Path]:
    """``mcp-chaos run`` of the scenario: exit code, what it printed, the run directory."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["run", str(path), "--results", str(tmp_path / "r"), "--run-id", "run", "--quiet", *flags])
    return code, capsys.readouterr().out, tmp_path / "r" / "run"


def lost(run_dir: Path) -> pd.Series:
    rows = pd.read_csv(run_dir / "intents.csv", keep_default_na=False)
    return rows.loc[rows["verdict"] == "lost", "cause"]


def test_lost_updates_lead_fail_a_duplicate_threshold_and_have_no_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, run_dir = run_cli(tmp_path, notes_scenario("lost_update"), capsys, "--max-duplicates", "1000")
    assert code == 1, out
    causes = lost(run_dir)
    assert len(causes) >= 30, out  # concurrent adds at concurrency 8 overwrite each other
    assert (causes == "no_fault").mean() >= 0.8, causes.value_counts()
    assert out.startswith(f"LOST: {len(causes)} of 300 intents")
    assert "gate: FAILED: " in out
    assert f"{len(causes)} lost (the default gate fails on any lost)" in out
    report = (run_dir / "report.md").read_text()
    assert "### lost · no_fault" in report
    assert "concurrent writes are lost (load-modify-save without a lock or transaction)" in report
    assert "lost (no_fault): the client saw ok, 0 effects at the end" in report  # a story


def test_a_torn_file_is_lost_after_a_crash_with_the_pod_log_that_tells_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = notes_scenario("torn_file", kills=0, NOTES_FAILPOINT="mid_write@150")
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    causes = lost(run_dir)
    assert len(causes) >= 100, out  # the restart started empty and overwrote what it could not read
    assert out.startswith("LOST: ")
    report = (run_dir / "report.md").read_text()
    assert "## Pod logs around the faults" in report
    assert "after:  Error loading notes: " in report  # the start after the crash said so


def test_a_torn_file_s_lost_notes_vanished_in_the_crash_that_tore_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The 60th save tears the file and kills the server (a deterministic failpoint). The read after
    # the restart still finds the notes the file held (the one worker waits 5 s before its retry);
    # the restarted server cannot parse the torn line, starts empty, and its first save drops them.
    data = notes_scenario("torn_file", intents=100, kills=0, concurrency=1, NOTES_FAILPOINT="mid_write@60")
    data["client"].update(max_attempts=3, backoff={"initial_s": 5, "max_s": 5, "jitter": "none"})
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1
    assert out.startswith("LOST: ")
    rows = pd.read_csv(run_dir / "intents.csv", keep_default_na=False)
    gone = rows[rows["verdict"] == "lost"]
    assert len(gone) >= 50  # the 59 notes before the torn save, but the line it cut
    assert (gone["cause"] == "vanished").mean() >= 0.8, gone["cause"].value_counts()
    assert gone.loc[gone["cause"] == "vanished", "vanished_after"].str.match(r"crash#1 pod-0 @").all()
    report = (run_dir / "report.md").read_text()
    assert "### lost · vanished" in report
    assert "vanished after crash#1" in report
    assert "not crash-safe" in report  # the fix: write a temporary file, fsync, rename


def test_a_failure_answered_as_a_success_is_named_with_the_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = notes_scenario("error_as_success", kills=0)
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1
    causes = lost(run_dir)
    assert len(causes) >= 20
    assert (causes == "error_as_success").mean() >= 0.8, causes.value_counts()
    assert "ok replies that read as failures: " in out
    report = (run_dir / "report.md").read_text()
    assert "Database error: no such table" in report
    assert "(an ok reply that reads as a failure)" in report


def test_the_official_memory_server_loses_concurrent_writes_with_no_fault(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    published_servers: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    drafted = main(
        [
            "init",
            "--command",
            f"{published_servers} {MEMORY_SERVER}",
            "--transport",
            "stdio",
            "--env",
            "MEMORY_FILE_PATH={data_dir}/memory.jsonl",
            "--tool",
            "create_entities",
            "-o",
            "drafted.yaml",
        ]
    )
    assert drafted == 0
    capsys.readouterr()
    code = main(["run", "drafted.yaml", "--quiet", "--set", "workload.intents=400", "--run-id", "memory"])
    out = capsys.readouterr().out
    assert code == 1, out
    run_dir = tmp_path / "results" / "memory"
    causes = lost(run_dir)
    assert len(causes) >= 40, out
    assert out.startswith(f"LOST: {len(causes)} of 400 intents")
    # Most are the server's own. Since a witness read must have begun after the acknowledgement,
    # those lost near a kill are lost_across_restart instead: 73% no_fault in one CI run (171 of 233).
    assert (causes == "no_fault").mean() >= 0.65, causes.value_counts()
    assert "lost (no_fault): the client saw ok, 0 effects at the end" in (run_dir / "report.md").read_text()


def test_a_store_torn_by_kills_is_blamed_on_the_kills_never_on_the_server_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The notes server rewrites its file in place and starts empty on a torn one: it loses nothing
    without faults, and under kills loses most of what it acknowledged. A checkpoint read that catches
    the file mid-rewrite reads as empty or torn; it is read again until two reads agree, and an intent
    no whole read showed dropped before the next kill is lost across that restart, not by the server on
    its own (no_fault would send a person looking for a race that is not there)."""
    # How much four random kills tear is luck (one CI run lost 23, another 316): the 150th save tears
    # the file for certain (the failpoint, a crash), so there is always much to blame, and the kills
    # tear what they happen to.
    data = notes_scenario(
        "torn_file", intents=600, kills=4, NOTES_WORK_MS="5", NOTES_FAILPOINT="mid_write@150"
    )
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    causes = lost(run_dir)
    assert len(causes) >= 100, out
    counts = causes.value_counts()
    assert causes.isin(["vanished", "lost_across_restart", "kill", "crash"]).mean() >= 0.9, counts
    # A few may still read as the server's own: a whole, stable read after the acknowledgement that
    # held later notes and not this one (two overlapping rewrites in place can leave exactly that,
    # every line parsing), which is what a lost update looks like too. Seen: 0 to 7 of ~350 (7 of 320
    # in a full run on a loaded machine, over a 2% bound); the point is that they stay a few.
    assert counts.get("no_fault", 0) <= 0.05 * len(causes), counts
    # "seen and later gone" counts what a read saw, not the losses across a restart (never seen
    # stored, though their vanished_after names the restart too): it once counted both.
    rows = pd.read_csv(run_dir / "intents.csv", keep_default_na=False)
    named = rows[rows["vanished_after"] != ""]
    vanished = json.loads((run_dir / "summary.json").read_text())["checkpoints"]["vanished"]
    # At least every lost one blamed on a read; at most those not lost across a restart (one of those
    # is blamed on a kill that hit its attempt instead, when one did).
    assert (rows["cause"] == "vanished").sum() <= vanished <= (named["cause"] != "lost_across_restart").sum()
    control = notes_scenario("torn_file", intents=600, kills=0, NOTES_WORK_MS="5")
    (tmp_path / "control").mkdir()
    code, out, _ = run_cli(tmp_path / "control", control, capsys, "--no-preflight")
    assert code == 0, out  # without faults it loses nothing: what was lost above, the kills lost


def test_a_server_wedged_by_a_stale_lock_is_unavailable_and_ends_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 40th save dies holding its lock file; the restarted server passes its readiness check and
    then hangs every call on the lock. The run stops within a minute of the wedge (not after every
    intent's every retry), says UNAVAILABLE first, names the lock file and what the pod logged, and
    fails the gate."""
    data = notes_scenario("stale_lock", intents=600, kills=0, concurrency=4, NOTES_FAILPOINT="mid_write@40")
    data["client"].update(attempt_timeout_s=2, max_attempts=50)
    data["target"]["unavailable_after_s"] = 8
    started = time.monotonic()
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    took = time.monotonic() - started
    assert code == 1, out
    assert out.startswith("UNAVAILABLE: pod-0 was up again after crash#1 pod-0 @"), out
    headline = out.splitlines()[0]
    assert "lock-like files since the fault: notes.jsonl.lock" in headline
    assert "waiting for notes.jsonl.lock" in headline  # what it logged
    assert "remove stale locks at start-up" in headline
    assert "intents not started" in headline
    assert took < 60, took  # 600 intents x 50 attempts x 2 s, had it ground on
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    assert summary["unavailable"][0]["locks"] == ["notes.jsonl.lock"]
    assert "unavailable: pod-0 was up again" in "; ".join(summary["gate"]["violations"])


# The exiting server is given 30 s: its exit ends the wait, and on a loaded machine a 3 s wait ran out
# before the restarted process had exited.
@pytest.mark.parametrize(
    ("how", "said", "wait_s"), [("exit", "exited with code 1", 30), ("hang", "within 3s", 3)]
)
def test_a_server_that_never_comes_back_from_a_kill_is_unavailable_with_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, said: str, wait_s: int
) -> None:
    """Up once, then after the kill it exits as it starts, or never answers: the worst finding, audited
    and reported like a pod that came back and answered nothing. It once ended the run with a
    configuration error (exit 3, "check the command": the command had worked) and no report."""
    server = tmp_path / "items.py"
    server.write_text(NEVER_BACK)
    data = {
        "name": f"never-back-{how}",
        "seed": 1,
        "target": {
            "command": [sys.executable, str(server)],
            "env": {"ITEMS_FILE": "{data_dir}/items.jsonl", "NEVER_BACK": how},
            "ready_timeout_s": wait_s,
        },
        "workload": {"intents": 400, "concurrency": 4, "tool": "add", "arguments": {"text": "{marker}"}},
        # Early, and new intents wait for it: most of the workload is left when the pod is gone.
        "faults": {"kill": {"count": 1, "min_uptime_s": 0.2, "window": [0.2, 0.3], "hold_dispatch": True}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/items.jsonl", "marker_field": "text"}}},
    }
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    headline = out.splitlines()[0]
    assert headline.startswith("UNAVAILABLE: pod-0 did not come back after kill#1 pod-0 @"), out
    assert said in headline
    assert "check the command" not in headline
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    (row,) = summary["unavailable"]
    assert row["came_back"] is False
    assert (run_dir / "report.md").is_file()


def test_a_json_document_torn_by_a_crash_is_unreadable_and_its_leftovers_no_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 20th save rewrites the document in place, shorter, and the server dies before its truncate:
    a whole document, then the tail of the older one, which repeats the last tasks' titles. The restart
    cannot parse it and exits. Read as bytes, those tasks were duplicates, blamed on no fault, and the
    others exactly once; read as JSON, the store is unreadable (a finding of its own, with its parse
    error), every acknowledged task in it is lost to the crash that tore it, and the pod's fix is the
    parse error its log shows, not a stale lock."""
    server = tmp_path / "tasks.py"
    server.write_text(TORN_DOCUMENT)
    data = {
        "name": "torn-document",
        "seed": 1,
        "target": {
            "command": [sys.executable, str(server)],
            "transport": "stdio",
            "env": {"TASKS_FILE": "{data_dir}/tasks.json", "TORN_AT": "20"},
            "ready_timeout_s": 30,
            "restart_delay_s": 0.2,
        },
        "workload": {"intents": 60, "concurrency": 1, "tool": "add_task", "arguments": {"title": "{marker}"}},
        # The retries of the torn save outlast the restart, which ends the run (the pod never comes back).
        "client": {"attempt_timeout_s": 10, "max_attempts": 20, "backoff": {"initial_s": 0.5, "max_s": 0.5}},
        "audit": {
            "effects": {"files": {"dir": "{data_dir}", "pattern": "tasks.json", "format": "json"}},
        },
    }
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    headline, second = out.splitlines()[:2]
    assert headline.startswith("UNAVAILABLE: pod-0 did not come back after crash#1 pod-0 @"), out
    assert "json.decoder.JSONDecodeError: Extra data: line 1 column " in headline  # the log's last words
    fix = headline.split(". Fix ", 1)[1]
    assert fix.startswith('(its log shows a parse error: "…'), fix
    assert "json.decoder.JSONDecodeError: Extra data: line 1 column " in fix.split('"): ')[0]
    assert "its store did not parse after the fault: write it whole" in fix
    assert "remove stale locks" not in headline
    assert second.startswith(
        "also: STORE UNREADABLE: data/tasks.json does not parse as json (Extra data: line 1 column "
    ), out
    assert "it held the effects of 20 intents, none counted, 19 of them acknowledged, now lost" in second
    assert "(torn by crash#1 pod-0 @" in second
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdicts"]["duplicate"] == 0
    assert summary["verdicts"]["exactly_once"] == 0
    assert summary["verdicts"]["lost"] == 19
    assert summary["causes"]["lost"] == {"crash": 19}
    assert any(v.startswith("store unreadable: data/tasks.json") for v in summary["gate"]["violations"])
    # Counted as bytes (format: text), the same store reads as duplicates blamed on no fault.
    as_bytes = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    as_bytes["audit"]["effects"]["files"]["format"] = "text"
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(as_bytes))
    assert main(["audit", str(run_dir), "--no-html"]) == 1
    counted = json.loads((run_dir / "summary.json").read_text())
    assert counted["verdicts"]["duplicate"] > 0
    assert counted["causes"]["duplicate"] == {"no_fault": counted["verdicts"]["duplicate"]}
    assert counted["unreadable"] == []


def wedged_scenario(server: Path, **more: Any) -> dict[str, Any]:
    return {
        "name": "wedged",
        "seed": 1,
        "target": {
            "command": [sys.executable, str(server)],
            "env": {"DATA": "{data_dir}", "WEDGE_AFTER": "0"},
            "ready_timeout_s": 30,
            "unavailable_after_s": 3,
        },
        # Few enough that a run which never sees the wedge still ends, every intent given up; retries
        # enough to outlast a restart.
        "workload": {"intents": 20, "concurrency": 2, "tool": "add", "arguments": {"text": "{marker}"}},
        "client": {
            "attempt_timeout_s": 1,
            "max_attempts": 5,
            "backoff": {"initial_s": 1, "max_s": 1, "jitter": "none"},
        },
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/items.jsonl", "marker_field": "text"}}},
        **more,
    }


def test_a_server_wedged_after_answering_once_since_its_restart_is_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Back from the kill, it answers one call and then times out on every other, waiting on a lock: the
    published git-backed store that did so went 11 minutes (942 timeouts) without UNAVAILABLE, because
    only a pod that had answered nothing since its restart was watched. The second kill, planned after
    intent 12, never comes: the harness stopped the run, and the line that says so blames neither the
    workload nor its length."""
    server = tmp_path / "items.py"
    server.write_text(WEDGED_AFTER)
    kills = {"kill": {"count": 2, "min_uptime_s": 0.2, "window": [0.2, 0.95], "hold_dispatch": True}}
    code, out, run_dir = run_cli(tmp_path, wedged_scenario(server, faults=kills), capsys, "--no-preflight")
    assert code == 1, out
    headline, *rest = out.splitlines()
    assert headline.startswith("UNAVAILABLE: pod-0 answered 1 call after kill#1 pod-0 @"), out
    assert ", then none of " in headline
    fix = headline.split(". Fix ", 1)[1]
    assert fix.startswith('(its log shows a lock file: "'), fix
    assert "items: waiting for items.lock" in fix
    # The first kill may also land after an effect and before its answer: a duplicate's "also" line
    # then comes first (the verdicts' order), as it did in one full run of the suite (2026-12-07).
    (inconclusive,) = [line for line in rest if line.startswith("also: INCONCLUSIVE")]
    assert inconclusive.startswith(
        "also: INCONCLUSIVE: 1 of 2 planned kills did not happen (the harness stopped the run before "
        "them: pod-0 answered no call for "
    ), out
    assert "dispatched" not in inconclusive
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    (row,) = summary["unavailable"]
    assert row["answered"] == 1
    assert row["came_back"] is True


def test_a_server_that_stops_answering_with_no_fault_at_all_is_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Liveness holds at any time, not only after a restart: a server that answers five calls and then
    none, with no fault, is found within unavailable_after_s of its silence."""
    server = tmp_path / "items.py"
    server.write_text(WEDGED_AFTER)
    data = wedged_scenario(server)
    data["target"]["env"]["WEDGE_AFTER"] = "5"
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    assert out.startswith("UNAVAILABLE: pod-0 answered 5 calls after its start, then none of "), out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped"
    assert summary["intents"]["started"] < 30  # it stopped starting them


def test_a_store_emptied_by_the_first_kill_is_the_headline_not_four_causes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first kill leaves the store empty and every later write acknowledged and kept nowhere: the
    headline says that first ("the store was empty after kill#1 ...; every later write was acknowledged
    and not stored"), not only a count and four causes; the pod log's repeated stack trace is one
    line with its count, not the section filled with copies of it."""
    server = tmp_path / "wiped.py"
    server.write_text(WIPED)
    data = {
        "name": "wiped",
        "seed": 1,
        "target": {"command": [sys.executable, str(server)], "env": {"ITEMS_FILE": "{data_dir}/items.jsonl"}},
        "workload": {"intents": 300, "concurrency": 4, "tool": "add", "arguments": {"text": "{marker}"}},
        "faults": {"kill": {"count": 2, "min_uptime_s": 0.2, "window": [0.2, 0.6]}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/items.jsonl", "marker_field": "text"}}},
    }
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    headline = out.splitlines()[0]
    assert headline.startswith("LOST: the store was empty after kill#1 pod-0 @"), headline
    assert "; every later write was acknowledged and not stored (" in headline, headline
    assert headline.index("every later write") < headline.index("causes:"), headline
    summary = json.loads((run_dir / "summary.json").read_text())
    [first] = [e for e in summary["evidence"] if e["fault"].startswith("kill#1 ")]
    shown = first["after"]
    assert len(shown) == len(set(shown)), shown  # each repeated line once
    assert any("store unreadable" in line and "(repeated " in line for line in shown), shown


def test_a_failure_answered_as_a_success_in_chinese_is_blamed_on_the_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every fourth call fails and stores nothing, answered ok with an error in Chinese: no English
    word says so, but the reply is unlike every reply of the notes the store kept ("已创建笔记 #：..."),
    so each lost intent's cause is error_as_success (it was no_fault, as if the server had dropped a
    write it had said it stored)."""
    server = tmp_path / "zh.py"
    server.write_text(CHINESE)
    data = {
        "name": "zh",
        "seed": 1,
        "target": {
            "command": [sys.executable, str(server)],
            "env": {"NOTES_FILE": "{data_dir}/notes.jsonl", "FAIL_EVERY": "4"},
        },
        "workload": {"intents": 40, "concurrency": 1, "tool": "add_note", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "text"}}},
    }
    code, out, run_dir = run_cli(tmp_path, data, capsys, "--no-preflight")
    assert code == 1, out
    causes = lost(run_dir)
    assert len(causes) == 10, out
    assert set(causes) == {"error_as_success"}, causes.value_counts()
    assert "error_as_success 10" in out.splitlines()[0]
