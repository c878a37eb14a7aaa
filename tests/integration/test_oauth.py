"""``target.auth``: an OAuth-protected reference server driven through whole chaos runs with kills.

The reference target (``INVOICES_OAUTH_*``) is a protected resource as the MCP specification
describes, behind the reference authorization server (targets/authserver), whose tokens live one
second: every run below has its tokens expire, refreshed (the code flow's refresh token) or
replaced at the server's 401 (client credentials), while the pod is killed. Each token the server
issued is in a file; none may appear in anything the run wrote or printed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import io
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.client.oauth import OAuthSettings
from harness.errors import TargetError
from harness.history import FaultKind, Verdict, read_history
from harness.loopback import free_port
from harness.run.runner import run_and_audit
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario
from tests.helpers.cli import mcp_chaos_process
from tests.helpers.paths import ROOT
from tests.helpers.processes import RemoteTarget
from tests.helpers.scenarios import EFFECTS_QUERY, fault_row, invoice_scenario

pytestmark = pytest.mark.integration

AUTH_SERVER = ROOT / "targets" / "authserver" / "server.py"
KEY = "reference-signing-key-for-the-oauth-tests-0001"
CLIENT, SECRET = "nightly-job", "client-secret-for-the-oauth-tests-7f3a"


@dataclass
class AuthServer:
    url: str
    issued: Path

    def tokens(self) -> list[str]:
        return [line for line in self.issued.read_text().splitlines() if line]


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    """The reference authorization server on a free port, its tokens living 3 s (a run outlives several);
    stopped by its pid. A token of 1 s expired between its flow and its use on a loaded machine (the
    flow itself took longer), and the replacement did too: 3 to 280 of 300 intents ended refused."""
    with authorization_server(tmp_path, "--ttl", "3") as server:
        yield server


@contextlib.contextmanager
def authorization_server(tmp_path: Path, *args: str, port: int | None = None) -> Iterator[AuthServer]:
    """The reference authorization server on ``port`` (a free one) with ``args``, until the block ends;
    the tokens it issues in a file unless ``args`` makes them megabytes."""
    port = free_port() if port is None else port
    issued = tmp_path / "issued.txt"
    issued.touch()
    log = (tmp_path / "authserver.log").open("wb")
    command = [sys.executable, str(AUTH_SERVER), str(port), "--key", KEY, "--client", f"{CLIENT}:{SECRET}"]
    record = [] if "--token-bytes" in args else ["--issued", str(issued)]
    proc = subprocess.Popen([*command, *args, *record], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/.well-known/oauth-authorization-server", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "the authorization server exited"
            assert time.monotonic() < deadline, "the authorization server did not answer in 30 s"
            time.sleep(0.05)
        yield AuthServer(url, issued)
    finally:
        proc.kill()
        proc.wait()
        log.close()


def oauth_scenario(server: AuthServer, grant: str) -> dict[str, Any]:
    """300 intents with 2 kills; the client's secret and the server's key from the environment. The
    run outlasts a token of 3 s whatever the machine's speed: each call works 160 ms before its
    commit, so 300 calls eight at a time take at least 6 s (with 15 ms a quiet machine finished
    a run of another test within one token's life)."""
    data = invoice_scenario(
        intents=300,
        concurrency=8,
        env={
            "INVOICES_OAUTH_ISSUER": server.url,
            "INVOICES_OAUTH_KEY": "${OAUTH_TEST_KEY}",
            "INVOICES_PRE_COMMIT_MS": "160",
        },
        kills={"count": 2, "min_uptime_s": 0.3},
    )
    data["target"]["auth"] = {
        "grant": grant,
        "client_id": CLIENT,
        "client_secret": "${OAUTH_TEST_SECRET}",
        "issuer": server.url,
    }
    return data


def run_oauth(server: AuthServer, grant: str, results: Path) -> tuple[AuditResult, str, Path]:
    """A whole run, its audit and every report; what it printed."""
    scenario = parse_scenario(oauth_scenario(server, grant))
    run_dir = prepare_run_dir(results, scenario)
    out = io.StringIO()
    result = asyncio.run(run_and_audit(scenario, run_dir, out=out, progress_interval_s=0.5, html=True))
    return result, out.getvalue(), run_dir


@pytest.fixture
def oauth_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OAUTH_TEST_SECRET", SECRET)
    monkeypatch.setenv("OAUTH_TEST_KEY", KEY)


@pytest.mark.usefixtures("oauth_env")
@pytest.mark.parametrize(
    ("grant", "why"), [("client_credentials", "refused"), ("authorization_code", "expiring")]
)
def test_an_oauth_protected_server_is_driven_through_kills_with_its_tokens_in_no_output(
    auth_server: AuthServer, tmp_path: Path, grant: str, why: str
) -> None:
    result, printed, run_dir = run_oauth(auth_server, grant, tmp_path / "results")
    summary = result.summary
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == 300, summary.verdicts
    assert fault_row(summary, FaultKind.KILL).injected == 2
    events = list(read_history(run_dir / "history.jsonl"))
    refreshed = [e for e in events if e["type"] == "token_refreshed"]
    # Tokens live 3 s and the run lasts longer: replaced at the server's 401 (client credentials have
    # no refresh token) or refreshed in the last quarter of their life (the code flow's refresh token).
    assert refreshed, "no token was replaced during the run"
    whys = {e["why"] for e in refreshed}
    # The code flow refreshes ahead of expiry; a request sent just before it and read by the server just
    # after is refused all the same, and replaced. Client credentials have no refresh token: only that.
    assert why in whys
    assert whys <= ({"refused"} if grant == "client_credentials" else {"expiring", "refused"})
    assert not [e for e in events if e.get("outcome") == "auth_error"], "a refusal reached an attempt"
    tokens = auth_server.tokens()
    assert len(tokens) >= 2
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert written
    for secret in (*tokens, SECRET, KEY):
        assert secret not in printed
        for path in written:
            assert secret.encode() not in path.read_bytes(), f"{path.relative_to(run_dir)} holds a secret"


@pytest.mark.usefixtures("oauth_env")
def test_a_client_the_authorization_server_refuses_stops_the_run_saying_so(
    auth_server: AuthServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OAUTH_TEST_SECRET", "not-the-secret-the-server-knows")
    data = oauth_scenario(auth_server, "client_credentials")
    data["target"]["ready_timeout_s"] = 10
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(tmp_path / "results", scenario)
    with pytest.raises(TargetError) as raised:
        asyncio.run(run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False))
    message = raised.value.message
    assert "target.auth" in message
    assert "invalid_client" in message
    assert "not-the-secret-the-server-knows" not in message


@pytest.mark.usefixtures("oauth_env")
def test_a_protected_server_the_harness_does_not_start_is_driven_through_kills_by_command(
    auth_server: AuthServer, tmp_path: Path
) -> None:
    """The case OAuth is for: a remote server (``target.url``), killed and restarted by the user's
    commands, through stream faults, its tokens found, replaced and never written anywhere."""
    settings = OAuthSettings(client_id=CLIENT, client_secret=SECRET, issuer=auth_server.url)
    remote = RemoteTarget(
        tmp_path,
        settings,
        INVOICES_MODE="atomic",
        INVOICES_OAUTH_ISSUER=auth_server.url,
        INVOICES_OAUTH_KEY=KEY,
        INVOICES_PRE_COMMIT_MS="160",  # outlasts a token: see oauth_scenario
    )
    try:
        data = oauth_scenario(auth_server, "client_credentials")
        data["target"] = {
            "url": remote.url,
            "kill_command": remote.command("kill"),
            "restart_command": remote.command("start"),
            "restart_delay_s": 0.05,
            "auth": data["target"]["auth"],
        }
        sever = {"fault": "sever_response", "tool": "create_invoice", "probability": 0.05}
        data["faults"]["stream"] = [sever]
        data["audit"] = {"effects": {"sql": {"url": f"sqlite:///{remote.db}", "query": EFFECTS_QUERY}}}
        scenario = parse_scenario(data)
        run_dir = prepare_run_dir(tmp_path / "results", scenario)
        out = io.StringIO()
        result = asyncio.run(run_and_audit(scenario, run_dir, out=out, progress_interval_s=0.5, html=False))
    finally:
        remote.stop()
    summary = result.summary
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == 300, summary.verdicts
    assert fault_row(summary, FaultKind.KILL).injected == 2
    assert summary.injected(FaultKind.SEVER_RESPONSE) > 0
    events = list(read_history(run_dir / "history.jsonl"))
    assert [e for e in events if e["type"] == "token_refreshed"]
    for secret in (*auth_server.tokens(), SECRET, KEY):
        assert secret not in out.getvalue()
        for path in (p for p in run_dir.rglob("*") if p.is_file()):
            assert secret.encode() not in path.read_bytes(), f"{path.relative_to(run_dir)} holds a secret"


class Thief:
    """A real HTTP server on 127.0.0.1 that a hostile authorization server's metadata points at: it
    keeps every request it gets (method, path, headers) and refuses each."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        kept = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._keep()

            def do_POST(self) -> None:
                self._keep()

            def _keep(self) -> None:
                kept.append((self.command, self.path, dict(self.headers)))
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "invalid_client"}')

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Thief:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def refused_run(data: dict[str, Any], tmp_path: Path) -> str:
    """A run that must stop before its first intent, with a TargetError: its one-line message."""
    data["target"]["ready_timeout_s"] = 10
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(tmp_path / "results", scenario)
    with pytest.raises(TargetError) as raised:
        asyncio.run(run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False))
    assert "\n" not in raised.value.message
    return raised.value.message


@pytest.mark.usefixtures("oauth_env")
@pytest.mark.parametrize(
    ("grant", "endpoint"),
    [
        ("client_credentials", "token_endpoint"),
        ("authorization_code", "authorization_endpoint"),
        ("authorization_code", "registration_endpoint"),
        ("client_credentials", "revocation_endpoint"),
        ("client_credentials", "jwks_uri"),
    ],
)
def test_credentials_go_to_the_pinned_issuer_only(tmp_path: Path, grant: str, endpoint: str) -> None:
    """An authorization server whose metadata puts an endpoint on another host: the client sends that
    host nothing (before, its token request carried the client's secret there) and the run stops,
    naming both hosts."""
    with Thief() as thief:
        place = f"{endpoint}={thief.url}/{endpoint}"
        with authorization_server(tmp_path, "--endpoint", place) as server:
            message = refused_run(oauth_scenario(server, grant), tmp_path)
    assert thief.requests == []
    assert (
        f"target.auth.issuer: the authorization server's metadata puts {endpoint} on {thief.url[7:]}"
        in message
    )
    assert f"not on the pinned issuer's host {server.url[7:]}" in message


@pytest.mark.usefixtures("oauth_env")
def test_a_flow_that_fails_is_one_line_with_no_traceback_and_no_echo_of_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``mcp-chaos run`` whose client the authorization server refuses, quoting the HTTP Basic
    credentials it got (base64 of the id and the URL-encoded secret, RFC 6749 2.3.1): one line with
    the server's reason, no SDK traceback or log on either stream, no trace of the secret anywhere."""
    secret = 'wrong/secret+&<>"x y=='
    monkeypatch.setenv("OAUTH_TEST_SECRET", secret)
    with authorization_server(tmp_path, "--quote-credentials") as server:
        data = oauth_scenario(server, "client_credentials")
        data["target"]["ready_timeout_s"] = 10
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        done = mcp_chaos_process("run", path, "--results", tmp_path / "r", "--no-preflight")
    assert done.returncode == 3, done.stderr
    printed = done.stdout + done.stderr
    assert "Traceback" not in printed
    assert "OAuth flow error" not in printed
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("mcp-chaos: error: ")]
    assert "invalid_client" in error
    assert "refused credentials: Basic " in error  # what the server quoted, the secret's part masked
    assert "***" in error
    basic = base64.b64encode(f"{CLIENT}:{quote(secret, safe='')}".encode()).decode()
    start = (len(CLIENT) + 1 + 3) // 3 * 4 + 4  # past the id's base64 and the secret's first group
    windows = {basic[i : i + 8] for i in range(start, len(basic) - 8)}
    written = [p.read_text(errors="replace") for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert written
    for text in (printed, *written):
        assert secret not in text
        assert not [w for w in windows if w in text]


@pytest.mark.usefixtures("oauth_env")
@pytest.mark.parametrize(
    ("size", "said"),
    [
        (
            8_000_000,
            "the authorization server's answer to POST http://127.0.0.1:{port}/token is over 1024 KiB",
        ),
        (40_000, "the authorization server issued a token of"),
    ],
)
def test_a_token_too_large_to_send_is_refused_saying_so(tmp_path: Path, size: int, said: str) -> None:
    """An 8 MB token ended in advice to raise ready_timeout_s, the target never answering a request
    that carried it: the answer, and the token, are bounded, and the run says which."""
    port = free_port()
    with authorization_server(tmp_path, "--token-bytes", str(size), port=port) as server:
        message = refused_run(oauth_scenario(server, "client_credentials"), tmp_path)
    assert said.format(port=port) in message
    assert "ready_timeout_s" not in message
