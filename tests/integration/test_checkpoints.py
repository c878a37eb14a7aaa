"""Checkpoint reads around real kills, crashes and restarts, on real stores.

Each run has one worker and holds dispatching while a kill is due, so at the kill
at most the last dispatched intent is in flight: what a read before the kill must
have seen is known exactly (every earlier intent), and a transactional store
(SQLite, PostgreSQL) keeps it across the restart. The notes target's torn file
(a deterministic failpoint) erases everything its restart finds: what the read
before the kill saw is gone at the end.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from harness import rundir
from harness.effects.registry import source_of
from harness.history import (
    CheckpointWhen,
    EventType,
    FaultKind,
    RunStatus,
    SeenEffects,
    Verdict,
    read_history,
)
from harness.run.final_read import Reach, read_now
from harness.run.runner import execute
from harness.scenario import parse_scenario
from tests.helpers.paths import ROOT
from tests.helpers.processes import alive
from tests.helpers.scenarios import invoice_scenario, run_scenario

pytestmark = pytest.mark.integration

NOTES = ROOT / "targets" / "notes" / "server.py"
NAMESPACE = "cp"


def notes_scenario(flaw: str, *, intents: int, concurrency: int = 1, **env: str) -> dict[str, Any]:
    """The notes target over stdio: one note per intent, titled with its marker, counted in its file."""
    return {
        "name": "notes",
        "seed": 2,
        "target": {
            "command": ["{python}", str(NOTES)],
            "transport": "stdio",
            "env": {"NOTES_FILE": "{data_dir}/notes.jsonl", "NOTES_FLAW": flaw, **env},
            "restart_delay_s": 0.05,
        },
        "workload": {
            "intents": intents,
            "concurrency": concurrency,
            "tool": "add_note",
            "arguments": {"title": "{marker}", "body": "note {index}"},
        },
        "client": {"attempt_timeout_s": 10, "max_attempts": 30, "backoff": {"initial_s": 0.02, "max_s": 0.2}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}},
    }


def held_kills(count: int, **kw: Any) -> dict[str, Any]:
    return {"count": count, "hold_dispatch": True, **kw}


def run_only(data: dict[str, Any], results: Path) -> tuple[Path, RunStatus]:
    """The run without its audit (whose effect source may be the thing that fails)."""
    scenario = parse_scenario(data)
    run_dir = rundir.prepare_run_dir(results, scenario)
    status = asyncio.run(
        execute(scenario, run_dir, out=io.StringIO(), progress_interval_s=None, namespace=NAMESPACE)
    )
    return run_dir, status


def events(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_history(run_dir / rundir.HISTORY))


def checkpoints(run_dir: Path, when: CheckpointWhen) -> list[dict[str, Any]]:
    return [e for e in events(run_dir) if e["type"] == EventType.EFFECTS_CHECKPOINT and e["when"] == when]


def seen(event: dict[str, Any]) -> set[int]:
    found = SeenEffects.from_event(event)
    assert found is not None, f"the read failed: {event.get('error')}"
    return set(found.indices())


def check_around_kills(run_dir: Path, *, complete: bool = True) -> None:
    """One read before each kill, recorded right before it; one after each restart, after its pod_ready.

    With one worker and dispatching held from a kill's trigger on, its read (taken before the kill
    lands on new work) can have no intent from its trigger on, and every intent but the last one
    dispatched had ended: a store that commits before it answers has them all (``complete``).
    """
    history = events(run_dir)
    by_seq = {e["seq"]: e for e in history}
    kills = [e for e in history if e["type"] == EventType.FAULT and e["fault"] == FaultKind.KILL]
    before = checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT)
    assert kills
    assert [e["fault_seq"] for e in before] == [k["seq"] for k in kills]
    for event, kill in zip(before, kills, strict=True):
        assert event["seq"] == kill["seq"] - 1  # recorded right before the kill, once it happened
        assert event["pod"] == kill["pod"] == "pod-0"
        trigger = int(kill["trigger"].split()[2])  # "after intent N +0.000s"
        assert seen(event) <= set(range(trigger))
        if complete:
            assert set(range(trigger - 1)) <= seen(event)
    readies = [e["seq"] for e in history if e["type"] == EventType.POD_READY][1:]  # after restarts
    after = checkpoints(run_dir, CheckpointWhen.AFTER_RESTART)
    assert [e["fault_seq"] for e in after] == readies
    assert all(e["seq"] > e["fault_seq"] and by_seq[e["fault_seq"]]["pod"] == e["pod"] for e in after)
    assert all(e["took_s"] >= 0 for e in before + after)


def test_reads_before_kills_and_after_restarts_on_sqlite(tmp_path: Path) -> None:
    data = invoice_scenario(mode="atomic", intents=40, kills=held_kills(2))
    run_dir, status = run_only(data, tmp_path)
    assert status is RunStatus.COMPLETED
    check_around_kills(run_dir)
    # A committed invoice survives a kill: the read after each restart has what the one before had.
    before = checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT)
    after = checkpoints(run_dir, CheckpointWhen.AFTER_RESTART)
    assert len(after) == 2
    for b, a in zip(before, after, strict=True):
        assert seen(b) <= seen(a)


@pytest.mark.postgres
@pytest.mark.usefixtures("postgres_server")
def test_reads_of_a_live_postgresql_source(tmp_path: Path) -> None:
    data = invoice_scenario(mode="atomic", intents=30, kills=held_kills(1))
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["audit"]["effects"]["sql"]["url"] = "{postgres_url}"
    run_dir, status = run_only(data, tmp_path)
    assert status is RunStatus.COMPLETED
    check_around_kills(run_dir)
    (before,) = checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT)
    (after,) = checkpoints(run_dir, CheckpointWhen.AFTER_RESTART)
    assert seen(before) <= seen(after)


def test_a_torn_file_erases_what_the_read_after_the_crash_saw(tmp_path: Path) -> None:
    # The server's 20th save tears its file (the failpoint) and kills it. Restarted, it finds a line
    # that does not parse, says so and starts empty: its next save overwrites every note. The read
    # after the restart comes before that save (the one worker waits 5 s before its retry), so it
    # sees the notes the file still held, and none of them is there at the end.
    data = notes_scenario("torn_file", intents=30, NOTES_FAILPOINT="mid_write@20")
    data["client"].update(max_attempts=3, backoff={"initial_s": 5, "max_s": 5, "jitter": "none"})
    result = run_scenario(data, tmp_path)
    run_dir = result.run_dir
    assert result.summary.pods.crashes == 1
    assert "Error loading notes: line" in (run_dir / rundir.PODS / "pod-0.log").read_text()
    assert not checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT)  # nothing was injected
    (after,) = checkpoints(run_dir, CheckpointWhen.AFTER_RESTART)
    ready = [e for e in events(run_dir) if e["type"] == EventType.POD_READY][1]
    assert (after["fault_seq"], after["pod"]) == (ready["seq"], "pod-0")
    saw = seen(after)
    assert len(saw) >= 15  # the 19 notes before the torn save, but the line it cut
    assert saw <= set(range(19))
    final = source_of(parse_scenario(data).audit.effects).count(run_dir)
    markers = result.intents.set_index("intent")["marker"]
    assert all(final[markers[i]] == 0 for i in saw)  # seen, then vanished
    assert all(final[markers[i]] == 1 for i in range(19, 30))  # the retry and what came after


def test_no_fault_no_read(tmp_path: Path) -> None:
    # Lost updates lose notes with no fault at all; with no pod fault and no restart, nothing is read.
    data = notes_scenario("lost_update", intents=30, concurrency=4)
    result = run_scenario(data, tmp_path)
    assert result.summary.pods.exits == 0
    assert result.summary.verdicts[Verdict.LOST] > 0
    assert not [e for e in events(result.run_dir) if e["type"] == EventType.EFFECTS_CHECKPOINT]


def test_a_failing_read_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    data = invoice_scenario(mode="atomic", intents=20, kills=held_kills(1))
    data["audit"]["effects"]["sql"]["query"] = "SELECT memo AS marker FROM no_such_table"
    run_dir, status = run_only(data, tmp_path)
    assert status is RunStatus.COMPLETED
    reads = checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT) + checkpoints(
        run_dir, CheckpointWhen.AFTER_RESTART
    )
    assert len(reads) == 2
    assert all("no such table: no_such_table" in e["error"] and "seen" not in e for e in reads)
    assert events(run_dir)[-1]["type"] == EventType.RUN_ENDED


COUNT_INVOICES = (  # no braces: the command is a template
    "import sqlite3, sys, time; time.sleep(2); "
    "db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True); "
    "[print('%s,%d' % row) for row in db.execute('SELECT memo, COUNT(*) FROM invoices GROUP BY memo')]"
)


def test_a_slow_read_is_abandoned(tmp_path: Path) -> None:
    # The command takes 2 s, the checkpoints may take 0.05 s: abandoned; the final read, with its
    # own minute, counts every invoice.
    data = invoice_scenario(mode="atomic", intents=20, kills=held_kills(1))
    data["audit"] = {
        "effects": {"command": {"command": ["{python}", "-c", COUNT_INVOICES, "{data_dir}/invoices.db"]}},
        "checkpoints": {"timeout_s": 0.05},
    }
    result = run_scenario(data, tmp_path)
    timed_out = "abandoned after 0.05s (audit.checkpoints.timeout_s)"
    (before,) = checkpoints(result.run_dir, CheckpointWhen.BEFORE_FAULT)
    assert before["error"] == timed_out  # the kill waits for it
    # The read after the restart runs beside the run: abandoned by its timeout, or by the run's end
    # when the last intents finished first (they did, once, on a loaded machine).
    (after,) = checkpoints(result.run_dir, CheckpointWhen.AFTER_RESTART)
    assert after["error"] in {timed_out, "abandoned: the run ended during the read"}
    assert "seen" not in before
    assert "seen" not in after
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 20


def test_checkpoints_can_be_turned_off(tmp_path: Path) -> None:
    data = invoice_scenario(mode="atomic", intents=20, kills=held_kills(1))
    data["audit"]["checkpoints"] = False
    run_dir, status = run_only(data, tmp_path)
    history = events(run_dir)
    assert status is RunStatus.COMPLETED
    assert [e for e in history if e["type"] == EventType.FAULT]
    assert not [e for e in history if e["type"] == EventType.EFFECTS_CHECKPOINT]


def test_each_rollout_step_is_read_before_and_after(tmp_path: Path) -> None:
    data = invoice_scenario(mode="atomic", intents=300, concurrency=2)
    data["target"]["replicas"] = 2
    data["target"]["env"]["INVOICES_PRE_COMMIT_MS"] = "50"
    data["faults"] = {"rollout": {"count": 1, "window": [0.05, 0.1], "signal": "SIGKILL"}}
    run_dir, status = run_only(data, tmp_path)
    assert status is RunStatus.COMPLETED
    history = events(run_dir)
    steps = [e for e in history if e["type"] == EventType.FAULT]
    before = checkpoints(run_dir, CheckpointWhen.BEFORE_FAULT)
    after = checkpoints(run_dir, CheckpointWhen.AFTER_RESTART)
    assert [(e["pod"], e["fault_seq"], e["seq"] + 1) for e in before] == [
        (e["pod"], e["seq"], e["seq"]) for e in steps
    ]
    assert [e["pod"] for e in after] == ["pod-0", "pod-1"]
    assert all(seen(b) <= seen(a) for b, a in zip(before, after, strict=True))


def test_an_abandoned_command_does_not_outlive_its_read(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    sleeper = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
    effects = parse_scenario(
        invoice_scenario(
            audit={"effects": {"command": {"command": ["{python}", "-c", sleeper, str(pid_file)]}}}
        )
    ).audit.effects

    async def abandon() -> int:
        reading = asyncio.create_task(
            read_now(
                source_of(effects),
                tmp_path,
                Reach(pod_url="", protocol="", headers={}, postgres_url=None, namespace="x"),
            )
        )
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.02)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        return int(pid_file.read_text())

    assert not alive(asyncio.run(abandon()))
