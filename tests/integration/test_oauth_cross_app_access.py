"""``target.auth.grant: cross_app_access`` (SEP-990, enterprise-managed authorization) against a real
identity provider and a real authorization server, each a small HTTP server on 127.0.0.1 written
here: the client exchanges its ID token at the provider for an ID-JAG (RFC 8693), trades the ID-JAG
at the authorization server (RFC 7523 jwt-bearer), and sends the token it gets. The servers check
every parameter the conformance suite's scenario checks, and record what they issued: none of it,
nor the ID token, may appear in anything a run wrote or printed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.server
import io
import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest

from harness.client.oauth import Challenge, IdentityProvider, OAuthSettings, OAuthTokens
from harness.history import FaultKind, Verdict, read_history
from harness.run.runner import run_and_audit
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = pytest.mark.integration

KEY = "reference-signing-key-for-the-xaa-tests-0001"
"""The key the authorization server signs its tokens with (HS256), shared with the reference target."""
CLIENT, SECRET = "xaa-client", "client-secret-for-the-xaa-tests-5e1c"
IDP_CLIENT = "idp-client-of-the-xaa-tests"
ID_TOKEN = "eyJhbGciOiJub25lIn0.the-person-s-id-token-for-the-xaa-tests.c2ln"
MCP_URL = "http://127.0.0.1:9/mcp"
"""The MCP endpoint the tokens are for: in the flow tests only named (the ID-JAG's resource), never called."""
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256(claims: dict[str, Any]) -> str:
    """A JWT as the reference target checks its tokens (HS256 with :data:`KEY`)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = hmac.new(KEY.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


class Server:
    """One HTTP server on 127.0.0.1 in a thread: ``answer(method, path, headers, form)`` is its
    handler, returning a status and a JSON body; every request is kept."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[tuple[str, str, dict[str, str], dict[str, str]]] = []
        kept = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer({})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                self._answer(form)

            def _answer(self, form: dict[str, str]) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                kept.append((self.command, self.path, headers, form))
                status, body = answer(self.command, self.path, headers, form)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Enterprise:
    """An enterprise's identity provider and the MCP server's authorization server, as SEP-990 has
    them: the provider exchanges :data:`ID_TOKEN` (and only it) for an ID-JAG naming the audience
    and resource asked for; the authorization server takes an ID-JAG it issued for itself, from
    :data:`CLIENT` authenticated by HTTP Basic, and answers tokens living ``ttl_s``."""

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self.ttl_s = ttl_s
        self.grants: dict[str, dict[str, str]] = {}
        self.issued: list[str] = []
        self.lock = threading.Lock()
        self.idp = Server(self._idp)
        self.auth = Server(self._auth)

    def close(self) -> None:
        self.idp.close()
        self.auth.close()

    def _idp(self, method: str, path: str, headers: dict[str, str], form: dict[str, str]) -> tuple[int, Any]:
        wanted = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        }
        if method != "POST" or path != "/token" or any(form.get(k) != v for k, v in wanted.items()):
            return 400, {"error": "invalid_request"}
        if form.get("subject_token") != ID_TOKEN:
            return 400, {
                "error": "invalid_grant",
                "error_description": "the ID token is not one this IdP issued",
            }
        grant = f"id-jag-{secrets.token_hex(16)}"
        with self.lock:
            self.grants[grant] = {"aud": form.get("audience", ""), "resource": form.get("resource", "")}
            self.issued.append(grant)
        return 200, {
            "access_token": grant,
            "issued_token_type": wanted["requested_token_type"],
            "token_type": "N_A",
        }

    def _auth(self, method: str, path: str, headers: dict[str, str], form: dict[str, str]) -> tuple[int, Any]:
        url = self.auth.url
        if method == "GET" and path == "/.well-known/oauth-authorization-server":
            return 200, {
                "issuer": url,
                "authorization_endpoint": f"{url}/authorize",  # RFC 8414 requires one; never used here
                "token_endpoint": f"{url}/token",
                "grant_types_supported": [JWT_BEARER],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "response_types_supported": ["code"],
            }
        if method != "POST" or path != "/token":
            return 404, {"error": "not_found"}
        basic = headers.get("authorization", "").removeprefix("Basic ")
        client, _, secret = base64.b64decode(basic).decode().partition(":")
        if (unquote(client), unquote(secret)) != (CLIENT, SECRET):
            return 401, {"error": "invalid_client"}
        with self.lock:
            grant = self.grants.pop(form.get("assertion", ""), None)  # each ID-JAG is taken once
        if form.get("grant_type") != JWT_BEARER or grant is None or grant["aud"] != url:
            return 400, {"error": "invalid_grant"}
        now = time.time()
        claims = {"iss": url, "sub": CLIENT, "aud": grant["resource"], "scope": "invoices", "iat": now}
        token = hs256(claims | {"exp": now + self.ttl_s, "jti": secrets.token_hex(8)})
        with self.lock:
            self.issued.append(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.ttl_s}

    def settings(self, **change: Any) -> OAuthSettings:
        idp = IdentityProvider(f"{self.idp.url}/token", ID_TOKEN, client_id=IDP_CLIENT)
        given: dict[str, Any] = {
            "grant": "cross_app_access",
            "client_id": CLIENT,
            "client_secret": SECRET,
            "issuer": self.auth.url,
            "idp": idp,
        }
        return OAuthSettings(**(given | change))


@pytest.fixture
def enterprise() -> Iterator[Enterprise]:
    found = Enterprise()
    try:
        yield found
    finally:
        found.close()


async def _authorize_twice(tokens: OAuthTokens) -> tuple[bool, str | None, bool, str | None]:
    """A first token for the server's 401, then another when the server refuses that one."""
    try:
        first = await tokens.authorize(Challenge(401, None), sent_with=None, version="2025-11-25")
        header = tokens.header
        second = await tokens.authorize(Challenge(401, None), sent_with=header, version="2025-11-25")
        return first, header, second, tokens.header
    finally:
        await tokens.aclose()


def test_the_id_token_is_exchanged_for_a_grant_the_authorization_server_trades_for_the_token(
    enterprise: Enterprise,
) -> None:
    seen: list[str] = []
    tokens = OAuthTokens(MCP_URL, enterprise.settings(), on_secret=seen.append)
    first, header, second, replaced = asyncio.run(_authorize_twice(tokens))
    assert first, tokens.failure
    assert second, tokens.failure
    assert header is not None
    assert replaced is not None
    assert header != replaced
    grants, access = enterprise.issued[0::2], enterprise.issued[1::2]
    assert [header, replaced] == [f"Bearer {token}" for token in access]
    # Each token came from a grant of its own, asked of the provider for this issuer and this server.
    exchanges = [r for r in enterprise.idp.requests if r[0] == "POST"]
    assert len(exchanges) == 2
    for _, _, _, form in exchanges:
        assert (form["audience"], form["resource"], form["client_id"]) == (
            enterprise.auth.url,
            MCP_URL,
            IDP_CLIENT,
        )
    trades = [r for r in enterprise.auth.requests if r[0] == "POST"]
    assert [form["assertion"] for _, _, _, form in trades] == grants
    assert all("client_secret" not in form for _, _, _, form in trades)  # HTTP Basic, not the form
    # Every grant and token reached the redactor before it was sent anywhere.
    assert set(grants) | set(access) <= set(seen)
    assert {ID_TOKEN, SECRET} <= set(enterprise.settings().secrets())


def test_a_refused_exchange_is_one_line_with_the_provider_s_reason_and_no_token(
    enterprise: Enterprise,
) -> None:
    stale = IdentityProvider(f"{enterprise.idp.url}/token", "an-id-token-the-idp-never-issued")
    tokens = OAuthTokens(MCP_URL, enterprise.settings(idp=stale))
    first, header, _, _ = asyncio.run(_authorize_twice(tokens))
    assert not first
    assert header is None
    assert tokens.failure is not None
    assert tokens.failure.startswith(
        "the identity provider refused the token exchange (HTTP 400, invalid_grant: the ID token is not one "
        "this IdP issued)"
    )
    assert "\n" not in tokens.failure
    assert "an-id-token" not in tokens.failure
    assert not [r for r in enterprise.auth.requests if r[0] == "POST"], "a grant went to the token endpoint"


def test_a_server_behind_enterprise_managed_authorization_is_driven_through_kills_with_no_secret_in_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference target takes the authorization server's tokens (INVOICES_OAUTH_*); they live
    2 s, so the run's tokens are refused and replaced through new grants while the pod is killed.
    The run outlasts a token whatever the machine's speed: each call works 150 ms before its commit,
    so 120 calls four at a time take at least 4.5 s after the first token (a token of 1 s could
    expire between its flow and its first use on a loaded machine: see test_oauth.py)."""
    enterprise = Enterprise(ttl_s=2.0)
    monkeypatch.setenv("XAA_TEST_SECRET", SECRET)
    monkeypatch.setenv("XAA_TEST_ID_TOKEN", ID_TOKEN)
    monkeypatch.setenv("XAA_TEST_KEY", KEY)
    data = invoice_scenario(
        intents=120,
        concurrency=4,
        env={
            "INVOICES_OAUTH_ISSUER": enterprise.auth.url,
            "INVOICES_OAUTH_KEY": "${XAA_TEST_KEY}",
            "INVOICES_PRE_COMMIT_MS": "150",
        },
        kills={"count": 1, "min_uptime_s": 0.3},
    )
    data["target"]["auth"] = {
        "grant": "cross_app_access",
        "client_id": CLIENT,
        "client_secret": "${XAA_TEST_SECRET}",
        "issuer": enterprise.auth.url,
        "idp": {"token_endpoint": f"{enterprise.idp.url}/token", "id_token": "${XAA_TEST_ID_TOKEN}"},
    }
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(tmp_path / "results", scenario)
    out = io.StringIO()
    try:
        result = asyncio.run(run_and_audit(scenario, run_dir, out=out, progress_interval_s=0.5, html=True))
    finally:
        enterprise.close()
    summary = result.summary
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == 120, summary.verdicts
    assert fault_row(summary, FaultKind.KILL).injected == 1
    events = list(read_history(run_dir / "history.jsonl"))
    assert not [e for e in events if e.get("outcome") == "auth_error"], "a refusal reached an attempt"
    # No refresh token in this grant: an expired token is replaced at the server's 401, by a new grant.
    refreshed = [e for e in events if e["type"] == "token_refreshed"]
    assert refreshed, "no token was replaced during the run"
    assert {e["why"] for e in refreshed} == {"refused"}
    assert len(enterprise.issued) >= 4
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert written
    for secret in (*enterprise.issued, ID_TOKEN, SECRET, KEY):
        assert secret not in out.getvalue()
        for path in written:
            assert secret.encode() not in path.read_bytes(), f"{path.relative_to(run_dir)} holds a secret"
