"""Hostile targets and bad input, each found by an adversarial pass, kept as a reproduction.

Secrets that servers echo back, in every form they echo them; header values that
would inject requests; answers that say "no" in ways that must not be waited
out, and ones that must; a stdio server that breaks its channel; a target that
leaves its process group; effect sources with torn or garbage content.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.errors import AuditError
from harness.history import EventType, FaultKind, Outcome, Verdict, read_history
from harness.loopback import free_port
from tests.helpers.cli import CLI, mcp_chaos, mcp_chaos_process
from tests.helpers.processes import alive
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]
HOSTILE = str(Path(__file__).with_name("hostile.py"))
SECRET = 'Tok"en\\9-ünï'  # quotes, a backslash and non-ASCII: escaped or mangled forms get echoed


def hostile(mode: str, **target: Any) -> dict[str, Any]:
    data = invoice_scenario()
    data["target"] = {**data["target"], "command": ["{python}", HOSTILE, mode], **target}
    return data


def cli(
    tmp_path: Path, data: dict[str, Any], *args: str, env: dict[str, str] | None = None, process: bool = False
) -> Any:
    """In this process, or as a real one (``process``) where everything it prints is the point."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    command = mcp_chaos_process if process else mcp_chaos
    proc = command(*args, str(path), "--results", str(tmp_path / "r"), env=env)
    return proc, time.monotonic() - started


def test_a_token_the_server_echoes_back_is_written_nowhere(tmp_path: Path) -> None:
    data = hostile("echo401", headers={"Authorization": "Bearer ${HOSTILE_TOKEN}"})
    proc, elapsed = cli(tmp_path, data, "run", env={"HOSTILE_TOKEN": SECRET}, process=True)
    assert proc.returncode == 3
    assert "it wants credentials" in proc.stderr
    assert elapsed < 15
    forms = [SECRET, orjson.dumps(SECRET).decode()[1:-1], repr(SECRET)[1:-1], "Tok"]
    written = [p for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert any(p.name == "pod-0.log" for p in written)  # the server logged the token: redacted there too
    for form in forms:
        assert form not in proc.stdout + proc.stderr
        assert not [p for p in written if form.encode() in p.read_bytes()], form


def test_a_variable_that_would_inject_a_header_is_refused(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["headers"] = {"Authorization": "Bearer ${HOSTILE_TOKEN}"}
    proc, _ = cli(tmp_path, data, "run", env={"HOSTILE_TOKEN": "abcd\r\nX-Evil: 1"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "mcp-chaos: error: target.headers.Authorization: a variable it uses holds a line break or NUL, "
        "which no header value may carry"
    )


def test_a_variable_with_a_control_character_is_refused_before_any_request(tmp_path: Path) -> None:
    """``\\x01`` (or DEL) expanded into a header was sent: the server answered 400 to every request and
    the run ended in "did not answer server/discover" (exit 3), naming the server, not the variable."""
    data = invoice_scenario()
    data["target"]["headers"] = {"Authorization": "Bearer ${HOSTILE_TOKEN}"}
    proc, _ = cli(tmp_path, data, "run", env={"HOSTILE_TOKEN": "abcd\x01ef"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "mcp-chaos: error: target.headers.Authorization: a variable it uses holds a control character, "
        "which no header value may carry (HTTP allows none but a tab)"
    )


@pytest.mark.parametrize(
    ("mode", "fix"), [("nonce401", "set target.headers"), ("json404", "check target.path")]
)
def test_answers_that_vary_but_say_the_same_fail_fast(tmp_path: Path, mode: str, fix: str) -> None:
    proc, elapsed = cli(tmp_path, hostile(mode), "run")
    assert proc.returncode == 3
    assert fix in proc.stderr
    assert elapsed < 15  # not the 30 s ready_timeout_s, although no two answers are the same


def test_a_busy_server_is_waited_for(tmp_path: Path) -> None:
    """The server answers 429 before the run starts (a server the harness does not start, at
    target.url), and the run is a process of its own: what is tested is the wait and what it says.
    Twice in CI, at its busiest, a run in the test's worker got no answer to any probe (within 20 s
    of a command's start, then within 3 s of a server that had just answered 429), which no run of
    its own reproduced, loaded or not."""
    port = free_port()
    server = subprocess.Popen([sys.executable, HOSTILE, "busy429"], env={**os.environ, "PORT": str(port)})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 120
        while not answers_429(url):
            assert server.poll() is None, "the busy server exited"
            assert time.monotonic() < deadline, "the busy server never listened"
            time.sleep(0.1)
        data = invoice_scenario()
        data["target"] = {"url": url, "ready_timeout_s": 10}
        data.pop("faults", None)
        proc, elapsed = cli(tmp_path, data, "run", "--no-preflight", process=True)
    finally:
        server.kill()
        server.wait()
    assert proc.returncode == 3, proc.stderr
    assert "within 10s; it last answered: HTTP 429" in proc.stderr  # "not now" is not a wrong answer
    assert elapsed >= 10


def answers_429(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=1)
    except urllib.error.HTTPError as e:
        return e.code == 429
    except OSError:
        return False
    return False


def test_a_stdio_server_whose_channel_breaks_is_restarted(run: Run, tmp_path: Path) -> None:
    data = hostile("stdio_huge", transport="stdio", env={"LEDGER": str(tmp_path / "ledger.jsonl")})
    data["audit"] = {"effects": {"jsonl": {"path": str(tmp_path / "ledger.jsonl")}}}
    result = run(data)
    s = result.summary
    # The first answer could not be read: the host killed the server and started it again, and
    # the retry ran it a second time (the server keeps no keys). Nothing was left unfinished.
    assert s.pods.crashes == 1
    assert s.verdicts[Verdict.DUPLICATE] == 1
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 2
    lost = [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == EventType.SESSION_LOST]
    assert lost[0]["reason"] == "it wrote a line on stdout longer than the harness reads (64 MiB)"


ESCAPER = (
    "import os, subprocess, sys, time; "
    "server = subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True); "
    "print('server', server.pid, flush=True); server.wait()"
)


def test_a_server_that_leaves_its_process_group_is_killed_with_it(run: Run) -> None:
    data = invoice_scenario(mode="naive", intents=60, concurrency=4, kills={"count": 1, "min_uptime_s": 0.3})
    data["target"]["env"]["INVOICES_POST_COMMIT_MS"] = "30"
    data["target"]["command"] = ["{python}", "-c", ESCAPER, data["target"]["command"][1]]
    result = run(data)
    s = result.summary
    assert s.injected(FaultKind.KILL) == 1
    assert s.attempts.retries > 0  # the kill reached the server that served the calls
    log = (result.run_dir / "pods" / "pod-0.log").read_text()
    servers = [int(line.split()[1]) for line in log.splitlines() if line.startswith("server ")]
    assert len(servers) == 2  # started twice: once, and again after the kill
    assert not any(alive(pid) for pid in servers)


def test_most_intents_rejected_is_inconclusive(run: Run) -> None:
    data = invoice_scenario(intents=6)
    data["workload"]["tool"] = "create_invoicez"  # a typo: every call is refused
    s = run(data).summary
    assert s.verdicts[Verdict.REJECTED] == 6
    assert not s.conclusive
    assert s.inconclusive[0].startswith("6 of 6 intents never took effect")
    assert "Unknown tool" in s.inconclusive[0]


def test_a_torn_line_inside_a_ledger_counts_the_record_after_it(run: Run, tmp_path: Path) -> None:
    data = invoice_scenario(mode="naive", intents=2, env={"INVOICES_LEDGER": "{data_dir}/ledger.jsonl"})
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl"}}}
    result = run(data)
    ledger = result.run_dir / "data" / "ledger.jsonl"
    first, second = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(first[:9] + second)  # a writer killed mid-line, then one appended to it
    audit = mcp_chaos("audit", str(result.run_dir))
    assert audit.returncode == 1, audit.stderr  # the torn effect's intent is lost: the default gate fails
    summary = orjson.loads((result.run_dir / "summary.json").read_bytes())
    assert (summary["verdicts"]["exactly_once"], summary["verdicts"]["lost"]) == (1, 1)


@pytest.mark.parametrize(
    ("output", "error"),
    [
        (r"import sys; sys.stdout.write('a\rb,1\n')", "not CSV lines 'marker,effects'"),
        ("print('m,-5')", "not 'marker,effects' (a count >= 0)"),
    ],
)
def test_garbage_from_an_effects_command_is_an_audit_error(run: Run, output: str, error: str) -> None:
    data = invoice_scenario(intents=1)
    data["audit"] = {"effects": {"command": {"command": ["{python}", "-c", output]}}}
    with pytest.raises(AuditError, match=re.escape(error)):
        run(data)


def test_auditing_a_run_that_failed_says_why_it_failed(tmp_path: Path) -> None:
    data = hostile("json404")
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl"}}}
    proc, _ = cli(tmp_path, data, "run", "--no-preflight")
    assert proc.returncode == 3
    (run_dir,) = (tmp_path / "r").iterdir()
    audit = mcp_chaos("audit", str(run_dir))
    assert audit.returncode == 4
    assert "this run failed before it measured anything (target pod pod-0 did not answer" in audit.stderr


def test_a_lost_session_does_not_use_up_the_attempts(run: Run) -> None:
    data = invoice_scenario(mode="atomic", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    data["target"]["env"]["INVOICES_SESSIONS"] = "stateful"
    # The retry waits until the restarted pod is up (no jitter): it meets the server that forgot.
    # 3 s, and max_s with it: the default cap (1 s) made it 1 s, less than a restart on a loaded machine.
    backoff = {"initial_s": 3, "max_s": 3, "jitter": "none"}
    data["client"].update({"protocol": "2025-11-25", "max_attempts": 2, "backoff": backoff})
    s = run(data).summary
    # Intent 1: broken by the crash (1), told its session was gone (not charged), replayed (2).
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3
    assert s.attempts.by_outcome[Outcome.SESSION_LOST] == 1


def test_fault_rows_for_crashes_have_no_plan(run: Run) -> None:
    data = invoice_scenario(mode="atomic", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    result = run(data)
    assert fault_row(result.summary, FaultKind.CRASH).planned is None
    assert "| crash |       — |" in (result.run_dir / "report.md").read_text()


@pytest.mark.parametrize("through_proxy", [False, True])
def test_a_response_that_is_not_http_is_a_protocol_error_not_retried(run: Run, through_proxy: bool) -> None:
    data = hostile("bad_http", env={"LEDGER": "{data_dir}/ledger.jsonl"})
    data["audit"] = {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl"}}}
    data["client"]["max_attempts"] = 3
    if through_proxy:  # any stream rule puts the fault proxy between driver and pod
        data["faults"] = {
            "stream": [{"fault": "delay", "tool": "create_invoice", "delay_s": 0.001, "probability": 1.0}]
        }
    result = run(data)
    attempts = [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == "attempt_ended"]
    assert len(attempts) == 3  # one per intent: a protocol error is not a dropped connection to retry
    assert {e["outcome"] for e in attempts} == {Outcome.PROTOCOL_ERROR.value}
    assert {e["detail"] for e in attempts} == {"bad_http"}


def test_a_read_tool_that_answers_nonsense_counts_is_named_by_the_audit(run: Run) -> None:
    data = hostile("bad_counts", env={"LEDGER": "{data_dir}/ledger.jsonl"})
    data["audit"] = {"effects": {"tool": {"tool": "count_invoices"}}}
    with pytest.raises(
        AuditError, match="read tool 'count_invoices' answered 'many' is not a count of effects"
    ):
        run(data)


def test_an_answer_that_trickles_forever_cannot_hold_readiness(tmp_path: Path) -> None:
    # A real process: its timeout fails the test if a regression lets the wait hang.
    proc, took = cli(tmp_path, hostile("trickle", ready_timeout_s=3), "run", process=True)
    assert proc.returncode == 3, proc.stderr
    assert "not ready" in proc.stderr or "did not answer" in proc.stderr, proc.stderr
    assert took < 20  # 3 s of patience, then the pod is stopped; a per-read timeout waited forever


def test_passwords_in_urls_are_written_nowhere(run: Run, tmp_path: Path) -> None:
    data = invoice_scenario(intents=2)
    data["target"]["env"]["UPSTREAM_URL"] = "https://svc:s3cr%40t@127.0.0.1:1/api"
    data["audit"] = {
        "effects": {"sql": {"url": "postgresql://app:hunter2@127.0.0.1:1/x", "query": "SELECT 1"}}
    }
    with pytest.raises(
        AuditError, match=re.escape("audit query failed on postgresql://app:***@127.0.0.1:1/x")
    ):
        run(data)
    (run_dir,) = (tmp_path / "results").iterdir()
    written = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    assert b"postgresql://app:***@127.0.0.1:1/x" in (run_dir / "scenario.yaml").read_bytes()
    for secret in (b"hunter2", b"s3cr%40t", b"s3cr@t"):
        assert secret not in written


def catalog_init(tmp_path: Path, tools: list[dict[str, Any]], noise: str = "") -> Any:
    """``init`` against a stdio server listing ``tools`` (and printing ``noise`` first), as a real process:
    its timeout fails the test if init hangs."""
    (tmp_path / "catalog.json").write_text(orjson.dumps(tools).decode())
    env = ["--env", f"CATALOG={tmp_path / 'catalog.json'}", *(["--env", f"NOISE={noise}"] if noise else [])]
    command = f"{{python}} {HOSTILE} stdio_catalog"
    args = ["init", "--command", command, "--transport", "stdio", *env, "-o", "drafted.yaml"]
    return mcp_chaos_process(*args, cwd=tmp_path, timeout=90)


def test_init_gives_up_on_a_pattern_that_backtracks_forever(tmp_path: Path) -> None:
    """``^(a+)+$`` matched against a default that almost fits takes exponential time, holding the GIL:
    the search is abandoned at its deadline and the field is a TODO, and init ends."""
    schema = {
        "type": "object",
        "properties": {
            "memo": {"type": "string"},
            "code": {"type": "string", "pattern": "^(a+)+$", "default": "a" * 40 + "!"},
        },
        "required": ["memo", "code"],
    }
    made = catalog_init(tmp_path, [{"name": "create", "inputSchema": schema}])
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "drafted.yaml").read_text()
    drafted = yaml.safe_load(text)
    assert drafted["workload"]["tool"] == "create"
    assert drafted["workload"]["arguments"]["memo"] == "{marker}"
    assert drafted["workload"]["arguments"]["code"] == "TODO"
    assert "TODO: finding a value for code took longer than" in text


def test_init_reads_past_what_a_stdio_server_prints_before_speaking(tmp_path: Path) -> None:
    """``booting... `` on stdout with no newline, then MCP: init skips it rather than waiting for a line."""
    schema = {"type": "object", "properties": {"memo": {"type": "string"}}, "required": ["memo"]}
    made = catalog_init(tmp_path, [{"name": "create", "inputSchema": schema}], noise="booting... ")
    assert made.returncode == 0, made.stderr
    drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
    assert drafted["workload"]["arguments"] == {"memo": "{marker}"}


def test_ctrl_c_ends_init_while_a_search_backtracks(tmp_path: Path) -> None:
    """The search runs in a child init can abandon: Ctrl-C ends init at once (exit 130), the child dies.

    Without it, init finished the search (or its deadline) first and exited 0 with a draft.
    """
    schema = {
        "type": "object",
        "properties": {
            "memo": {"type": "string"},
            "code": {"type": "string", "pattern": "^(a+)+$", "default": "a" * 60 + "!"},
        },
        "required": ["memo", "code"],
    }
    (tmp_path / "catalog.json").write_text(orjson.dumps([{"name": "create", "inputSchema": schema}]).decode())
    command = f"{{python}} {HOSTILE} stdio_catalog"
    args = [
        "init",
        "--command",
        command,
        "--transport",
        "stdio",
        "--env",
        f"CATALOG={tmp_path / 'catalog.json'}",
    ]
    proc = subprocess.Popen(
        [*CLI, *args, "-o", "drafted.yaml"], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        searcher = None
        deadline = time.monotonic() + 60
        while searcher is None and time.monotonic() < deadline and proc.poll() is None:
            searcher = next((p for p in children(proc.pid) if b"harness.init.values" in cmdline(p)), None)
            time.sleep(0.02)
        assert searcher is not None, "init's search child was not seen"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert not (tmp_path / "drafted.yaml").exists()
    deadline = time.monotonic() + 10
    while alive(searcher) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(searcher)


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"


def on_postgres(mode: str, **target: Any) -> dict[str, Any]:
    """A hostile PostgreSQL mode, its effects counted in PostgreSQL (or at the effect sink, or by its
    read tool, as the test sets ``audit``)."""
    data = hostile(mode, **target)
    data["target"]["env"] = {"DB": "{postgres_url}", "DATA": "{data_dir}"}
    data["workload"]["arguments"] = {"memo": "{marker}"}
    data["services"] = {"postgres": {}}
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": QUERY}}}
    return data


def forms(secret: str) -> list[str]:
    """A secret as a server's SQL, headers and the harness's files would carry it."""
    json_form = orjson.dumps(secret).decode()
    return [secret, json_form[1:-1], base64.b64encode(secret.encode()).decode(), quote(secret, safe="")]


@pytest.mark.postgres
def test_a_token_a_server_commits_or_sends_as_a_downstream_key_is_written_nowhere(
    tmp_path: Path, postgres_server: None
) -> None:
    """The server writes its token into its INSERT's literals (raw, base64, URL-encoded, JSON) and
    sends it as its downstream's Idempotency-Key: the crash points captured both raw into the history,
    summary.json, report.md, crashpoints.md, --json, the reproducers and the terminal, and the sink
    into sink.jsonl."""
    token = "tok-LIVE-9f8e7d6c5b4a"
    data = on_postgres("pg_token")
    data["target"]["env"].update(TOKEN="${HOSTILE_TOKEN}", SINK="{sink_url}")
    data["audit"] = {"effects": {"sink": {"marker_field": "marker", "dedupe_by_key": True}}}
    emitted, table = tmp_path / "emitted", tmp_path / "table.json"
    args = [
        "crashpoints",
        "--jobs",
        "1",
        "--repeat",
        "1",
        "--only",
        "request,db_commit#1",
        "--no-preflight",  # every call carries the same key: the sink counts the second as a replay
        "--emit",
        str(emitted),
        "--json",
        str(table),
    ]
    proc, _ = cli(tmp_path, data, *args, env={"HOSTILE_TOKEN": token})
    assert proc.returncode == 1, proc.stderr  # the token as everyone's key: the sink took each call once
    (run_dir,) = (tmp_path / "r").iterdir()
    history = (run_dir / "history.jsonl").read_text()
    assert """VALUES ($1, '*** *** *** \\"***\\"')""" in history  # captured, and redacted
    assert '"key":"***"' in (run_dir / "sink.jsonl").read_text()
    written = [p for p in [*run_dir.rglob("*"), *emitted.iterdir(), table] if p.is_file()]
    assert {"crashpoints.md", "summary.json", "report.md", "sink.jsonl"} <= {p.name for p in written}
    assert list(emitted.glob("crashpoint-*.yaml"))
    for form in forms(token):
        assert form not in proc.stdout + proc.stderr, form
        assert not [p for p in written if form.encode() in p.read_bytes()], form


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["pg_leak", "pg_lock"])
def test_a_pod_that_holds_postgresql_cannot_cost_the_run_its_final_read(
    mode: str, tmp_path: Path, postgres_server: None
) -> None:
    """A pod that leaks connections until PostgreSQL refuses more ("too many clients"), or that holds an
    exclusive lock on the table the effects query reads: the final read shared PostgreSQL with the
    live pod and failed (exit 4, the run's results lost) or waited ready_timeout_s + 60 s for the lock."""
    data = on_postgres(mode, ready_timeout_s=10)
    proc, took = cli(tmp_path, data, "run", "--no-preflight", process=True)
    assert proc.returncode == 0, proc.stderr
    assert took < 40
    (run_dir,) = (tmp_path / "r").iterdir()
    collected = [e for e in read_history(run_dir / "history.jsonl") if e["type"] == "effects_collected"]
    assert collected == [{**collected[0], "markers": 3}]
    if mode == "pg_leak":  # it did leak: PostgreSQL turned it away
        assert "too many clients" in (run_dir / "postgres.log").read_text()


@pytest.mark.postgres
def test_the_final_read_does_not_wait_for_a_pod_its_supervisor_gave_up_on(
    tmp_path: Path, postgres_server: None
) -> None:
    """The pod cannot start again after its kill (max_restarts 1): the read tool's final read waited
    ready_timeout_s + 60 s for it all the same (a run that failed at 2 s exited at 90 s)."""
    data = on_postgres("pg_once", max_restarts=1, ready_timeout_s=10)
    data["workload"]["intents"] = 6
    data["client"]["max_attempts"] = 3
    data["faults"] = {"kill": {"count": 1, "hold_dispatch": True}}
    data["audit"] = {"effects": {"tool": {"tool": "count_invoices"}}}
    proc, took = cli(tmp_path, data, "run", "--no-preflight", process=True)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "mcp-chaos: error: the final read of effects failed: pod pod-0 is down for good "
        "(it did not come back after it died)"
    )
    assert took < 30


def test_an_emit_directory_in_a_folder_no_one_may_write_is_refused_before_any_work(tmp_path: Path) -> None:
    """Found unwritable after the whole exploration, it ended in a traceback and no table."""
    data = on_postgres("pg_token")
    proc, _ = cli(tmp_path, data, "crashpoints", "--emit", "/proc/self/emit")
    assert proc.returncode == 2
    assert (
        proc.stderr
        == "mcp-chaos: error: --emit /proc/self/emit: cannot be made (No such file or directory)\n"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["crashpoints", "--repeat", "100000"],
            "--repeat '100000': give the tries per crash state, an integer from 1 to 100",
        ),
        (
            ["contract", "--only", "crash_points", "--repeat", "100000"],
            "--repeat '100000': give the tries per crash state, an integer from 1 to 100",
        ),
        (
            ["crashpoints", "--budget", "1e9"],
            "--budget '1e9': give the exploration's seconds, from 0 (list the states, try none) to 86400",
        ),
    ],
    ids=["crashpoints", "contract", "budget"],
)
def test_tries_out_of_range_are_one_line_naming_the_flag_before_any_work(
    args: list[str], message: str, tmp_path: Path, postgres_server: None
) -> None:
    """``crashpoints --repeat 100000`` named ``target.max_restarts``, then announced the 100000 tries
    before refusing them; ``contract --crash-repeat 100000`` started the target and reported the check
    as "could not finish", pointing at the target's log. Both read the one option table now."""
    proc, _ = cli(tmp_path, on_postgres("pg_token"), *args)
    assert proc.returncode == 2
    assert proc.stderr == f"mcp-chaos: error: {message}\n"
    assert not (tmp_path / "r").exists()


PLANTER = (
    "import os, sys; run_dir, victim, server = sys.argv[1:4]; "
    "log = os.path.join(run_dir, 'pods', 'pod-0.log'); "
    "os.path.islink(log) or (os.unlink(log), os.symlink(victim, log)); "
    "os.execv(sys.executable, [sys.executable, server])"
)


def test_a_pod_log_the_target_links_out_of_the_run_is_neither_written_nor_rewritten(
    run: Run, tmp_path: Path
) -> None:
    """A server that puts a link to a file of the user's in place of its own log: each restart appended
    the pod's output to that file, and the redaction of the logs rewrote it with its secrets masked."""
    secret = "tok-LIVE-9f8e7d6c5b4a"
    victim = tmp_path / "netrc"
    victim.write_text(f"machine example.com password {secret}\n")
    data = invoice_scenario(mode="atomic", intents=6, kills={"count": 1, "hold_dispatch": True})
    server = data["target"]["command"][1]
    data["target"]["command"] = ["{python}", "-c", PLANTER, "{run_dir}", str(victim), server]
    data["target"]["env"]["TOKEN"] = "${HOSTILE_TOKEN}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HOSTILE_TOKEN", secret)
        result = run(data)
    assert result.summary.injected(FaultKind.KILL) == 1  # restarted once: its log opened again
    assert victim.read_text() == f"machine example.com password {secret}\n"
