"""Issue #22's corpus: a server that echoes its token in every field and encoding (``leaky.py``),
driven through every command; no form of the token in any file written or on the terminal, no
ESC byte on the terminal, no markup from the server in report.md or the step summary, and every
JUnit file valid against tests/schemas/junit.xsd."""

from __future__ import annotations

import base64
import glob
import html
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import xmlschema
import yaml

from harness.init.connect import INIT_PREFIX
from tests.helpers.cli import CLI, mcp_chaos, start_cli_run

pytestmark = pytest.mark.integration

LEAKY = str(Path(__file__).with_name("leaky.py"))
TOKEN = 'Zq9S3cr3t+/=&<>"x'
ENV = {"LEAKY_TOKEN": TOKEN}
JUNIT_XSD = Path(__file__).parents[1] / "schemas" / "junit.xsd"


def token_forms() -> list[str]:
    raw = TOKEN.encode()
    return [
        TOKEN,
        json.dumps(TOKEN)[1:-1],
        quote(TOKEN, safe=""),
        quote_plus(TOKEN),
        base64.b64encode(raw).decode(),
        base64.b64encode(b"user:" + raw).decode(),
        html.escape(TOKEN),
        html.escape(TOKEN, quote=False),
        raw.hex(),
        "Zq9S3cr3t",  # any part a cut or a collapse could leave behind
    ]


def leaky(mode: str = "echo", intents: int = 4) -> dict[str, Any]:
    return {
        "name": "leaky",
        "seed": 1,
        "target": {
            "command": ["{python}", LEAKY, mode],
            "env": {"LEDGER": "{data_dir}/ledger.jsonl", "LEAKY_TOKEN": "${LEAKY_TOKEN}"},
            "headers": {"Authorization": "Bearer ${LEAKY_TOKEN}"},
            "ready_timeout_s": 30,
        },
        "workload": {"intents": intents, "tool": "create_note", "arguments": {"memo": "{marker}"}},
        "client": {"max_attempts": 2, "backoff": {"initial_s": 0.01, "max_s": 0.02}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl"}}},
    }


def scenario_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def assert_nothing_leaked(root: Path, *terminal: str) -> list[Path]:
    """Every file under ``root`` and every terminal text: no form of the token; the terminal has no
    ESC; Markdown has no server markup; JUnit is valid. Returns the files checked."""
    written = [p for p in root.rglob("*") if p.is_file()]
    for form in token_forms():
        for text in terminal:
            assert form not in text, f"{form!r} on the terminal"
        leaked = [p for p in written if form.encode() in p.read_bytes()]
        assert not leaked, f"{form!r} in {leaked}"
    for text in terminal:
        assert "\x1b" not in text
    schema = xmlschema.XMLSchema(str(JUNIT_XSD))
    for path in written:
        if path.suffix == ".xml":
            schema.validate(str(path))
        if path.suffix == ".md":
            text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))  # code is literal
            assert not re.search(r"(?<!\\)<img", text), path  # escaped, it renders as text
            assert "![x](" not in text, path
            assert "\x1b" not in text, path
    return written


def test_a_run_its_reports_junit_trend_step_summary_and_audit_leak_nothing(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, leaky())
    out = tmp_path / "out"
    out.mkdir()
    summary = out / "step-summary.md"
    env = {**ENV, "GITHUB_STEP_SUMMARY": str(summary)}
    run = mcp_chaos(
        "run", path, "--results", tmp_path / "r", "--run-id", "leak", "--no-preflight",
        "--junit", out / "run.xml", "--trend", out / "trend.csv", env=env,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    audit = mcp_chaos("audit", tmp_path / "r" / "leak", env=env)
    assert audit.returncode in (0, 1), audit.stderr
    written = assert_nothing_leaked(tmp_path, run.stdout, run.stderr, audit.stdout, audit.stderr)
    assert summary in written
    assert (out / "run.xml") in written
    assert "tool_error" in (tmp_path / "r" / "leak" / "report.md").read_text()
    pod_log = (tmp_path / "r" / "leak" / "pods" / "pod-0.log").read_text()
    assert "request with" in pod_log  # the server logged the token: redacted
    assert "***" in pod_log


def test_a_megabyte_code_is_cut_everywhere(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, leaky("big", intents=6))
    summary = tmp_path / "step-summary.md"
    env = {**ENV, "GITHUB_STEP_SUMMARY": str(summary)}
    run = mcp_chaos("run", path, "--results", tmp_path / "r", "--run-id", "big", "--no-preflight", env=env)
    assert run.returncode in (0, 1), run.stderr
    assert_nothing_leaked(tmp_path, run.stdout, run.stderr)
    assert (tmp_path / "r" / "big" / "history.jsonl").stat().st_size < 100_000
    assert summary.stat().st_size < 20_000
    assert len(run.stdout) < 20_000


def test_the_preflight_leaks_nothing(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, leaky())
    proc = mcp_chaos("validate", "--preflight", path, "--results", tmp_path / "r", env=ENV)
    assert proc.returncode == 0, proc.stderr  # the one call's reply quotes the token: redacted
    assert "preflight" in proc.stderr
    assert_nothing_leaked(tmp_path, proc.stdout, proc.stderr)


def test_contract_and_all_its_outputs_leak_nothing(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, leaky())
    out = tmp_path / "out"
    out.mkdir()
    proc = mcp_chaos(
        "contract", path, "--results", tmp_path / "r", "--run-id", "c", "--handle-wait", "0",
        "--json", out / "c.json", "--junit", out / "c.xml", "--snapshot", out / "snap.json", env=ENV,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    written = assert_nothing_leaked(tmp_path, proc.stdout, proc.stderr)
    assert {out / "c.json", out / "c.xml", out / "snap.json"} <= set(written)
    json.loads((out / "c.json").read_text(encoding="utf-8"))
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert {len(re.findall(r"(?<!\\)\|", line)) for line in table} == {4}  # no cell broke its row


def test_init_and_a_401_leak_nothing(tmp_path: Path) -> None:
    header = "Authorization: Bearer ${LEAKY_TOKEN}"
    common = ["--env", "LEAKY_TOKEN=${LEAKY_TOKEN}", "--env", "LEDGER={data_dir}/l.jsonl", "--header", header]
    done = mcp_chaos(
        "init", "--command", f"{sys.executable} {LEAKY} echo", *common, "-o", tmp_path / "ok.yaml", env=ENV
    )
    assert done.returncode == 0, done.stderr
    assert "${LEAKY_TOKEN}" in (tmp_path / "ok.yaml").read_text()
    denied = mcp_chaos(
        "init", "--command", f"{sys.executable} {LEAKY} deny", *common, "-o", tmp_path / "no.yaml", env=ENV
    )
    assert denied.returncode == 3, denied.stderr
    assert "credentials" in denied.stderr
    assert_nothing_leaked(tmp_path, done.stdout, done.stderr, denied.stdout, denied.stderr)
    # The log's tail is in the message, which names no file: init keeps no directory for it.
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"{INIT_PREFIX}{os.getpid()}.*"))


def test_init_refuses_a_header_a_shell_expanded() -> None:
    proc = mcp_chaos("init", "--command", "true", "--header", f"Authorization: Bearer {TOKEN}", env=ENV)
    assert proc.returncode == 2
    assert TOKEN not in proc.stderr
    assert "single quotes" in proc.stderr
    assert "'Authorization: Bearer ${TOKEN}'" in mcp_chaos_help()


def mcp_chaos_help() -> str:
    return subprocess.run([*CLI, "init", "--help"], capture_output=True, text=True, check=True).stdout


def test_a_sigkilled_run_leaves_its_pod_log_redacted(tmp_path: Path) -> None:
    data = leaky(intents=100_000)
    os.environ.update(ENV)  # the child run inherits the token
    try:
        proc, run_dir = start_cli_run(tmp_path, data, run_id="killed", attempts=10, timeout=60)
    finally:
        del os.environ["LEAKY_TOKEN"]
    watchdogs = [
        int(pid)
        for pid in os.listdir("/proc")
        if pid.isdigit() and _parent(int(pid)) == proc.pid and b"watchdog" in _cmdline(int(pid))
    ]
    assert watchdogs, "the run started no watchdog"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    for pid in watchdogs:  # it ends once it has killed the pods and redacted their logs
        while _state(pid) != b"Z" and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "***" in (run_dir / "pods" / "pod-0.log").read_text()
    assert_nothing_leaked(run_dir / "pods")


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"Z"


@pytest.mark.parametrize(
    ("command", "flag", "bad"),
    [
        ("run", "GITHUB_STEP_SUMMARY", "dir"),
        ("run", "--junit", "missing/j.xml"),
        ("run", "--trend", "dir"),  # a missing folder is fine: the trend writer makes it
        ("contract", "--json", "missing/c.json"),
        ("contract", "--junit", "dir"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, command: str, flag: str, bad: str
) -> None:
    (tmp_path / "dir").mkdir()
    target = str(tmp_path / bad)
    env = {**ENV, flag: target} if flag.isupper() else ENV
    options = [] if flag.isupper() else [flag, target]
    path = scenario_file(tmp_path, leaky())
    proc = mcp_chaos(command, path, "--results", tmp_path / "r", *options, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"mcp-chaos: error: {flag} {target}: ")
    assert proc.stderr.count("\n") == 1
    assert not (tmp_path / "r").exists()  # nothing ran


def test_credentials_written_out_in_the_target_s_env_and_headers_stay_out_of_the_scenario_as_run(
    tmp_path: Path,
) -> None:
    """``API_TOKEN: "literal-value"`` where ``${VAR}`` was meant: the redactor hides the value in what
    the run writes, and the scenario as run (scenario.yaml, report.md, report.html) masks it."""
    from harness.auditing import audit_and_report
    from tests.helpers.scenarios import invoice_scenario, run_scenario

    token, bearer = "literal-api-token-0f3c9a", "literal-bearer-77d2e1"
    data = invoice_scenario(env={"API_TOKEN": token, "TOKEN_TTL": "60"})
    data["target"]["headers"] = {"Authorization": f"Bearer {bearer}", "X-Trace": "trace-1"}
    run_dir = run_scenario(data, tmp_path / "r").run_dir
    audit_and_report(run_dir)
    shown = yaml.safe_load((run_dir / "scenario.yaml").read_text())["target"]
    assert shown["env"]["API_TOKEN"] == "***"
    assert shown["env"]["TOKEN_TTL"] == "60"  # too short to be a credential
    assert shown["headers"] == {"Authorization": "Bearer ***", "X-Trace": "trace-1"}
    for name in ("scenario.yaml", "report.md", "report.html"):
        text = (run_dir / name).read_text()
        assert "API_TOKEN" in text, name  # the scenario as run is there, its credentials masked
        assert token not in text, name
        assert bearer not in text, name


def test_a_downstream_call_s_query_keeps_no_credential_in_its_record(tmp_path: Path) -> None:
    """The downstream proxy records each call's path through the run's redactor: a declared secret the
    target's client sent partly URL-encoded (only ``<`` and ``>``, as many clients do), and the value of
    a query parameter named like a credential that no scenario declared, are masked there."""
    import asyncio

    import orjson

    from harness.downstream import DownstreamProxy
    from harness.redaction import Redactor
    from harness.scenario import DownstreamService

    partly = TOKEN.replace("<", "%3C").replace(">", "%3E")
    api_key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    target = f"/v1/charges?memo=ab-m0000001&q={partly}&api_key={api_key}&n=2"

    async def call() -> bytes:
        proxy = DownstreamProxy(tmp_path, DownstreamService(), redact=Redactor([TOKEN]).text)
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = await reader.read()
            writer.close()
            return answer
        finally:
            await proxy.close()

    assert asyncio.run(call()).startswith(b"HTTP/1.1 200")
    (record,) = [orjson.loads(line) for line in (tmp_path / "downstream.jsonl").read_bytes().splitlines()]
    assert record["markers"] == ["ab-m0000001"]
    assert record["path"] == "/v1/charges?memo=ab-m0000001&q=***&api_key=***&n=2"
