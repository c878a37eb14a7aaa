"""The servers people run: 2025 sessions, stdio, bearer tokens, keys in _meta or a header, other stores.

Every target here is the reference invoices server as a real process, configured
into the shape under test; failpoints make the interesting cases certain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.errors import AuditError
from harness.history import EventType, Outcome, Verdict, read_history
from tests.helpers.cli import mcp_chaos, mcp_chaos_process
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]
CRASH_AFTER_COMMIT = {"INVOICES_FAILPOINT": "after_business_commit@3"}


def sessions(mode: str, intents: int = 3, concurrency: int = 1, **kw: Any) -> dict[str, Any]:
    data = invoice_scenario(mode=mode, intents=intents, concurrency=concurrency, **kw)
    data["target"]["env"]["INVOICES_SESSIONS"] = "stateful"
    data["client"]["protocol"] = "2025-11-25"
    return data


@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("atomic", 0)])
def test_a_crash_loses_the_session_and_the_client_opens_another(run: Run, mode: str, duplicates: int) -> None:
    result = run(sessions(mode, env=CRASH_AFTER_COMMIT))
    s = result.summary
    assert s.protocol == "2025-11-25"
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    # The server forgot the session with the process: the retry was told so (404), the client
    # opened a new session, and the retry after that went through.
    assert (s.sessions.opened, s.sessions.lost) == (2, 1)
    assert s.sessions.lost_after == {"crash": 1}
    assert s.attempts.by_outcome[Outcome.SESSION_LOST] == 1
    events = [e["type"] for e in read_history(result.run_dir / "history.jsonl")]
    lost = events.index(EventType.SESSION_LOST)
    assert (
        events.index(EventType.POD_EXITED) < lost < len(events) - events[::-1].index(EventType.SESSION_OPENED)
    )


def test_a_session_per_worker(run: Run) -> None:
    data = sessions(
        "atomic", intents=40, concurrency=4, env={"INVOICES_FAILPOINT": "after_business_commit@30"}
    )
    data["client"]["sessions"] = "per_worker"
    s = run(data).summary
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 40
    assert s.sessions.lost >= 1
    assert s.sessions.opened - s.sessions.lost == 4  # each worker's last session was still open at the end


def test_auto_takes_2026_where_the_server_speaks_it(run: Run) -> None:
    s = run(invoice_scenario(intents=2)).summary
    assert s.protocol == "2026-07-28"
    assert s.sessions.opened == 0


@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("keyed", 1), ("atomic", 0)])
def test_a_stdio_server_dies_and_is_started_again(run: Run, mode: str, duplicates: int) -> None:
    data = invoice_scenario(mode=mode, env={**CRASH_AFTER_COMMIT, "INVOICES_TRANSPORT": "stdio"})
    data["target"]["transport"] = "stdio"
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    assert s.pods.crashes == 1
    assert s.protocol == "2025-11-25"
    assert (s.sessions.opened, s.sessions.lost) == (2, 1)  # one handshake per process; one died
    assert "serving MCP on stdio" in (result.run_dir / "pods" / "pod-0.log").read_text()  # stderr is the log


@pytest.mark.parametrize("key_in", ["meta", "header"])
def test_the_key_can_travel_in_meta_or_a_header(run: Run, key_in: str) -> None:
    data = invoice_scenario(mode="atomic", env={**CRASH_AFTER_COMMIT, "INVOICES_KEY_FROM": key_in})
    del data["workload"]["arguments"]["idempotency_key"]
    data["client"]["key_in"] = key_in
    s = run(data).summary
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3  # the server found the key where it looks: replayed


def cli(
    tmp_path: Path, data: dict[str, Any], *args: str, env: dict[str, str] | None = None, process: bool = False
) -> Any:
    """In this process, or as a real one (``process``) where everything it prints is the point."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    command = mcp_chaos_process if process else mcp_chaos
    proc = command("run", str(path), "--results", str(tmp_path / "r"), *args, env=env)
    return proc, time.monotonic() - started


TOKEN = "tok-3f9a1c-never-written-down"


def test_a_bearer_token_from_the_environment_is_sent_and_never_written(tmp_path: Path) -> None:
    data = invoice_scenario(intents=5, env={"INVOICES_BEARER_TOKEN": "${MCP_TOKEN}"})
    data["target"]["headers"] = {"Authorization": "Bearer ${MCP_TOKEN}"}
    proc, _ = cli(tmp_path, data, "--run-id", "auth", env={"MCP_TOKEN": TOKEN}, process=True)
    assert proc.returncode == 0, proc.stderr
    assert "| exactly_once |       5 |" in proc.stdout
    assert TOKEN not in proc.stdout + proc.stderr
    run_dir = tmp_path / "r" / "auth"
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(written) >= 6
    assert not [p for p in written if TOKEN.encode() in p.read_bytes()]
    assert "${MCP_TOKEN}" in (run_dir / "scenario.yaml").read_text()


def test_a_missing_token_fails_in_seconds_with_the_fix(tmp_path: Path) -> None:
    data = invoice_scenario(env={"INVOICES_BEARER_TOKEN": TOKEN})
    proc, elapsed = cli(tmp_path, data)
    assert proc.returncode == 3
    assert "it answered HTTP 401" in proc.stderr
    assert "set target.headers" in proc.stderr
    assert elapsed < 15  # not the 30 s ready_timeout_s


def test_a_variable_the_environment_lacks_is_a_scenario_error(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["headers"] = {"Authorization": "Bearer ${MCP_CHAOS_UNSET_TOKEN}"}
    proc, _ = cli(tmp_path, data)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "mcp-chaos: error: target.headers.Authorization uses ${MCP_CHAOS_UNSET_TOKEN}, "
        "which is not set in the environment: export it"
    )
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


def test_a_wrong_path_fails_in_seconds_with_the_fix(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["path"] = "/not-mcp"
    proc, elapsed = cli(tmp_path, data)
    assert proc.returncode == 3
    assert "HTTP 404" in proc.stderr
    assert "check target.path" in proc.stderr
    assert elapsed < 15


def test_effects_from_a_command(run: Run) -> None:
    data = invoice_scenario(mode="naive", env=CRASH_AFTER_COMMIT)
    script = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); print('marker,effects'); "
        "[print(f'{m},{n}') for m, n in db.execute('SELECT memo, COUNT(*) FROM invoices GROUP BY memo')]"
    )
    script = script.replace("{", "{{").replace("}", "}}")
    data["audit"] = {
        "effects": {"command": {"command": ["{python}", "-c", script, "{data_dir}/invoices.db"]}}
    }
    result = run(data)
    assert result.summary.verdicts[Verdict.DUPLICATE] == 1
    record = orjson.loads((result.run_dir / "effects.json").read_bytes())
    assert record["source"].startswith("command ")
    assert sorted(record["effects"].values()) == [1, 1, 2]


def test_a_failing_effects_command_is_an_audit_error(run: Run) -> None:
    data = invoice_scenario(intents=1)
    data["audit"] = {
        "effects": {"command": {"command": ["{python}", "-c", "import sys; sys.exit('no ledger here')"]}}
    }
    failed = r"the final read of effects failed: .*exited with 1: no ledger here"
    with pytest.raises(AuditError, match=failed):
        run(data)


def test_effects_from_a_json_lines_file(run: Run) -> None:
    data = invoice_scenario(
        # Killed after the ledger line is written (the ledger is written after the commit).
        mode="naive",
        env={"INVOICES_FAILPOINT": "after_key_record@3", "INVOICES_LEDGER": "{data_dir}/ledger.jsonl"},
    )
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "marker"}}}
    s = run(data).summary
    assert s.verdicts[Verdict.DUPLICATE] == 1
    assert s.effects.total == 4


def resumable(mode: str, resume: bool, **kw: Any) -> dict[str, Any]:
    data = sessions(mode, **kw)
    data["target"]["env"].update(
        {"INVOICES_TRANSPORT": "sse", "INVOICES_EVENT_STORE": "memory", "INVOICES_PRE_COMMIT_MS": "10"}
    )
    data["workload"]["request_progress"] = True
    data["client"]["resume"] = resume
    return data


SEVER_AFTER_COMMIT = {
    "fault": "sever_response",
    "intent": 1,
    "attempt": 1,
    "after_events": 2,
    "wait_for_server": False,
}


@pytest.mark.parametrize(("resume", "duplicates"), [(True, 0), (False, 1)])
def test_a_cut_stream_is_resumed_instead_of_re_issued(run: Run, resume: bool, duplicates: int) -> None:
    # The proxy cuts intent 1's stream right after the progress event that follows the commit;
    # the server lives on and keeps the stream's events. Resumed, the naive design runs once.
    data = resumable("naive", resume)
    data["faults"] = {"stream": [SEVER_AFTER_COMMIT]}
    s = run(data).summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert (s.sessions.resumed, s.attempts.retries) == ((1, 0) if resume else (0, 1))


def test_a_stream_closed_after_its_priming_event_is_resumed_after_the_retry_it_asked_for(run: Run) -> None:
    """2025-11-25 (SEP-1699): a server may close a call's stream right after a priming event that carries
    an id and ``retry:``; the client comes back with GET and Last-Event-ID after that interval, and the
    answer is there. Nothing is re-issued: the naive design charges once, with no fault at all."""
    data = resumable("naive", True)
    del data["client"]["resume"]  # the default at 2025-11-25
    data["target"]["env"]["INVOICES_SSE_POLL_MS"] = "300"
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3
    assert (s.sessions.resumed, s.attempts.retries) == (3, 0)
    events = list(read_history(result.run_dir / "history.jsonl"))
    started = {e["id"]: e["t"] for e in events if e["type"] == "attempt_started"}
    took = [e["t"] - started[e["id"]] for e in events if e["type"] == "attempt_ended"]
    assert min(took) >= 0.3  # the client waited as the server's retry: field said
    # A client that does not resume (an older version's default, or resume: false) re-issues each call
    # whose stream closed, and every re-issue closes again: the naive design charges once per attempt.
    data["client"] |= {"resume": False, "max_attempts": 2}
    without = run(data).summary
    assert without.verdicts[Verdict.EXACTLY_ONCE] == 0
    assert without.attempts.retries == 3


def test_a_stream_closed_again_after_each_reconnection_is_come_back_for_each_time(run: Run) -> None:
    """A server that polls (SEP-1699) may close the stream the client came back on too: the client comes
    back again, as long as the stream moved on, and the history says how many times; the call is still
    one attempt, not a retry."""
    data = resumable("naive", True)
    del data["client"]["resume"]
    data["target"]["env"] |= {"INVOICES_SSE_POLL_MS": "100", "INVOICES_SSE_POLLS": "3"}
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3
    assert (s.sessions.resumed, s.attempts.retries) == (3, 0)
    events = list(read_history(result.run_dir / "history.jsonl"))
    ended = [e for e in events if e["type"] == "attempt_ended"]
    assert [e["reconnections"] for e in ended] == [3, 3, 3]
    assert all(e["resumed"] is True for e in ended)


def test_a_stream_broken_by_a_crash_cannot_be_resumed(run: Run) -> None:
    data = resumable("naive", True, env=CRASH_AFTER_COMMIT)
    s = run(data).summary
    assert (s.sessions.resumed, s.sessions.resume_failed) == (0, 1)  # the events died with the process
    assert s.verdicts[Verdict.DUPLICATE] == 1  # so the call was re-issued


@pytest.mark.postgres
def test_a_2025_only_server_refuses_a_pinned_2026_client_in_seconds(
    tmp_path: Path, node: str, postgres_server: None
) -> None:
    data = invoice_scenario()
    data["target"]["command"] = [node, str(ROOT / "targets" / "invoices-ts" / "server.mjs")]
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["services"] = {"postgres": {}}
    data["audit"]["effects"]["sql"]["url"] = "{postgres_url}"
    data["client"]["protocol"] = "2026-07-28"
    proc, elapsed = cli(tmp_path, data)
    assert proc.returncode == 3
    assert "it does not speak 2026-07-28; set client.protocol: auto" in proc.stderr
    assert "No valid session ID provided" in proc.stderr  # the server's own answer
    assert elapsed < 20
