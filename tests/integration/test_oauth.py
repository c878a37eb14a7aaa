"""``target.auth``: an OAuth-protected reference server driven through whole chaos runs with kills.

The reference target (``INVOICES_OAUTH_*``) is a protected resource as the MCP specification
describes, behind the reference authorization server (targets/authserver), whose tokens live one
second: every run below has its tokens expire, refreshed (the code flow's refresh token) or
replaced at the server's 401 (client credentials), while the pod is killed. Each token the server
issued is in a file; none may appear in anything the run wrote or printed.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.audit.auditor import AuditResult
from harness.client.oauth import OAuthSettings
from harness.errors import TargetError
from harness.history import FaultKind, Verdict, read_history
from harness.loopback import free_port
from harness.rundir import prepare_run_dir
from harness.runner import run_and_audit
from harness.scenario import parse_scenario
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
    """The reference authorization server on a free port, its tokens living 1 s; stopped by its pid."""
    port = free_port()
    issued = tmp_path / "issued.txt"
    issued.touch()
    log = (tmp_path / "authserver.log").open("wb")
    command = [sys.executable, str(AUTH_SERVER), str(port), "--key", KEY, "--client", f"{CLIENT}:{SECRET}"]
    proc = subprocess.Popen([*command, "--ttl", "1", "--issued", str(issued)], stdout=log, stderr=log)
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
    """300 intents with 2 kills; the client's secret and the server's key from the environment."""
    data = invoice_scenario(
        intents=300,
        concurrency=8,
        env={
            "INVOICES_OAUTH_ISSUER": server.url,
            "INVOICES_OAUTH_KEY": "${OAUTH_TEST_KEY}",
            "INVOICES_PRE_COMMIT_MS": "15",
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
    # Tokens live 1 s and the run lasts longer: replaced at the server's 401 (client credentials have
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
        INVOICES_PRE_COMMIT_MS="15",
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
