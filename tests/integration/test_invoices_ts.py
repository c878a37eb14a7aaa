"""The TypeScript reference target (targets/invoices-ts) as a real Node process on a real PostgreSQL.

It speaks the 2025 protocol with sessions (initialize, Mcp-Session-Id, MCP-Protocol-Version),
kept in the process's memory. Each test drives it with raw HTTP (or the official Python SDK
client), kills it with its own failpoints (SIGKILL at a chosen point, counted in the store) or
from here, starts it again on the same port and store, and counts invoices per memo with the
harness's audit query. Node and npm are needed (node_modules are installed with `npm ci` once);
PostgreSQL's server binaries too.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import psycopg
import pytest

from harness.loopback import free_port
from harness.services import Postgres
from tests.helpers.paths import TS_DIR
from tests.helpers.scenarios import EFFECTS_QUERY

pytestmark = pytest.mark.integration


SERVER = TS_DIR / "server.mjs"
PROTOCOL = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream"}
SESSION_NOT_FOUND = {"jsonrpc": "2.0", "error": {"code": -32001, "message": "Session not found"}, "id": None}
NO_SESSION = {
    "jsonrpc": "2.0",
    "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
    "id": None,
}


@pytest.fixture(scope="module")
def postgres(postgres_server: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """One throwaway cluster for the module, started and stopped on one event loop."""
    loop = asyncio.new_event_loop()
    pg = Postgres(tmp_path_factory.mktemp("postgres"), "invoices", free_port())
    try:
        loop.run_until_complete(pg.start())
        yield pg
    finally:
        loop.run_until_complete(pg.stop())
        loop.close()


@pytest.fixture
def database(postgres: Postgres) -> str:
    """A fresh database per test (its own invoices and failpoint counts), as a postgresql:// URL."""
    server, _, _ = postgres.url.rpartition("/")
    name = f"ts_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def effects(database: str) -> dict[str, int]:
    """Invoices per memo, by the harness's audit query, unchanged."""
    with psycopg.connect(database) as conn:
        return {str(marker): int(n) for marker, n in conn.execute(EFFECTS_QUERY).fetchall()}


class TsTarget:
    """The TypeScript invoices server as a real child process; started again on the same port and store."""

    def __init__(self, node: str, database: str, logs: Path, **env: str) -> None:
        self.node = node
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = {**os.environ, "PORT": str(self.port), "INVOICES_DB": database, **env}
        self.logs = logs
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        self.start()

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.close_log()
        self.starts += 1
        self.log = open(self.logs / f"invoices-ts-{self.port}-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [self.node, str(SERVER)], env=self.env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"invoices-ts exited with {self.proc.returncode}: {self.output()}")
            try:
                httpx.get(self.url, timeout=1)  # any HTTP answer: it listens once its store is open
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"invoices-ts not ready in 30 s: {self.output()}")

    def wait(self) -> int:
        """The exit status of a process that is dying (a failpoint) or was killed."""
        assert self.proc is not None
        return self.proc.wait(timeout=30)

    def output(self) -> str:
        return (self.logs / f"invoices-ts-{self.port}-{self.starts}.log").read_text(errors="replace")

    def close_log(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        self.close_log()


@pytest.fixture
def ts(node: str, database: str, tmp_path: Path) -> Iterator[Callable[..., TsTarget]]:
    """Start TypeScript targets on this test's database; every one is killed afterwards."""
    started: list[TsTarget] = []

    def start(**env: str) -> TsTarget:
        target = TsTarget(node, database, tmp_path, **env)
        started.append(target)
        return target

    yield start
    for target in started:
        target.stop()


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, in either form: a JSON body or an event stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        return [
            json.loads(line.removeprefix("data: "))
            for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: "
        ]
    return [response.json()]


def initialize_params(version: str) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}


class Session:
    """One MCP session over raw HTTP: the 2025 handshake, then requests carrying its headers."""

    def __init__(self, url: str) -> None:
        self.url = url
        # No keep-alive: a connection must not outlive the server process it went to.
        self.http = httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0))
        self.id: str | None = None
        self.protocol = PROTOCOL
        self.next_id = 0

    def close(self) -> None:
        self.http.close()

    def post(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        sent = dict(ACCEPT)
        if self.id is not None:
            sent |= {"Mcp-Session-Id": self.id, "MCP-Protocol-Version": self.protocol}
        return self.http.post(self.url, json=message, headers=sent | (headers or {}))

    def request(self, method: str, params: dict[str, Any], **kw: Any) -> httpx.Response:
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}, **kw)

    def initialize(self, version: str = PROTOCOL) -> httpx.Response:
        response = self.request("initialize", initialize_params(version))
        assert response.status_code == 200, response.text
        self.id = response.headers.get("mcp-session-id")
        self.protocol = messages(response)[-1]["result"]["protocolVersion"]
        initialized = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert initialized.status_code == 202, initialized.text
        return response

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tools/call answered 200 with a JSON-RPC result: the CallToolResult."""
        response = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert "result" in body, body
        result: dict[str, Any] = body["result"]
        return result


@pytest.fixture
def sessions() -> Iterator[Callable[[str], Session]]:
    opened: list[Session] = []

    def open_session(url: str) -> Session:
        session = Session(url)
        opened.append(session)
        return session

    yield open_session
    for session in opened:
        session.close()


def invoice(memo: str, key: str | None = "k-1", amount: int = 1250) -> dict[str, Any]:
    return {"customer_id": "cust-1", "amount_cents": amount, "memo": memo, "idempotency_key": key}


def error_body(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is True, result
    body: dict[str, Any] = json.loads(result["content"][0]["text"])
    return body


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("asked", "negotiated"),
    [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2026-07-28", "2025-11-25")],
)
def test_initialize_opens_a_2025_session(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session], asked: str, negotiated: str
) -> None:
    t = ts()
    s = sessions(t.url)
    response = s.initialize(asked)
    assert response.headers["content-type"].startswith("application/json")
    assert s.id is not None
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", s.id)
    result = response.json()["result"]
    assert result["protocolVersion"] == negotiated
    assert result["serverInfo"]["name"] == "reference-invoices-ts"
    tools = {tool["name"]: tool for tool in s.request("tools/list", {}).json()["result"]["tools"]}
    assert sorted(tools) == ["count_invoices", "create_invoice"]
    assert tools["count_invoices"]["annotations"]["readOnlyHint"] is True
    assert tools["create_invoice"]["inputSchema"]["required"] == ["customer_id", "amount_cents", "memo"]
    assert tools["create_invoice"]["inputSchema"]["properties"]["amount_cents"]["type"] == "integer"
    another = sessions(t.url)
    another.initialize()
    assert another.id != s.id


@pytest.mark.postgres
def test_each_call_logs_the_traceparent_it_was_sent(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session]
) -> None:
    t = ts(INVOICES_MODE="naive")
    s = sessions(t.url)
    s.initialize()
    in_header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    in_meta = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    sent = s.request(
        "tools/call",
        {"name": "create_invoice", "arguments": invoice("tp-1")},
        headers={"traceparent": in_header},
    )
    assert sent.status_code == 200, sent.text
    meta = {"name": "create_invoice", "arguments": invoice("tp-2"), "_meta": {"traceparent": in_meta}}
    assert s.request("tools/call", meta).status_code == 200
    s.call("create_invoice", invoice("tp-3"))  # none sent: nothing logged
    log = t.output()
    assert f"tools/call create_invoice memo=tp-1 traceparent={in_header}" in log
    assert f"tools/call create_invoice memo=tp-2 traceparent={in_meta}" in log
    assert "memo=tp-3" not in log


@pytest.mark.postgres
def test_atomic_retry_replays_byte_identically(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session], database: str
) -> None:
    t = ts(INVOICES_MODE="atomic")
    s = sessions(t.url)
    s.initialize()
    first = s.call("create_invoice", invoice("atomic-1"))
    again = s.call("create_invoice", invoice("atomic-1"))
    assert "isError" not in first
    assert again["content"][0]["text"] == first["content"][0]["text"]  # the stored text, byte for byte
    assert again == first
    assert first["structuredContent"] == json.loads(first["content"][0]["text"])
    assert first["structuredContent"]["invoice_id"] == "inv_00000001"
    other = sessions(t.url)  # another session (another client) retrying the same intent
    other.initialize()
    assert other.call("create_invoice", invoice("atomic-1")) == first
    reused = error_body(s.call("create_invoice", invoice("atomic-2", amount=999)))
    assert reused["code"] == "idempotency_key_reused"
    assert (reused["retryable"], reused["retry_after_ms"]) == (False, None)
    assert effects(database) == {"atomic-1": 1}
    counted = s.call("count_invoices", {"memo_prefix": "atomic-"})
    assert counted["structuredContent"] == {"effects": {"atomic-1": 1}}


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("mode", "arguments", "body"),
    [
        (
            "naive",
            invoice("bad", amount=0),
            {
                "code": "invalid_amount",
                "message": "amount_cents must be positive",
                "retryable": False,
                "retry_after_ms": None,
                "recovery": "Send a positive amount.",
            },
        ),
        (
            "keyed",
            invoice("nokey", key=None),
            {
                "code": "idempotency_key_required",
                "message": "create_invoice needs an idempotency_key",
                "retryable": False,
                "retry_after_ms": None,
                "recovery": "Generate a unique key for this invoice and call again with it.",
            },
        ),
    ],
)
def test_tool_errors_are_the_python_targets_bytes(
    ts: Callable[..., TsTarget],
    sessions: Callable[[str], Session],
    database: str,
    mode: str,
    arguments: dict[str, Any],
    body: dict[str, Any],
) -> None:
    s = sessions(ts(INVOICES_MODE=mode).url)
    s.initialize()
    result = s.call("create_invoice", arguments)
    assert result["isError"] is True
    assert result["content"][0]["text"] == json.dumps(body)  # what the Python target's json.dumps writes
    assert effects(database) == {}


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("point", "mode", "after_crash", "after_retry"),
    [
        ("after_business_commit", "naive", 1, 2),
        ("after_business_commit", "keyed", 1, 2),
        ("after_business_commit", "atomic", 1, 1),
        ("after_key_record", "keyed", 1, 1),
        ("before_business_commit", "naive", 0, 1),
    ],
)
def test_crash_then_retry_with_the_same_key(
    ts: Callable[..., TsTarget],
    sessions: Callable[[str], Session],
    database: str,
    point: str,
    mode: str,
    after_crash: int,
    after_retry: int,
) -> None:
    t = ts(INVOICES_MODE=mode, INVOICES_FAILPOINT=f"{point}@1")
    s = sessions(t.url)
    s.initialize()
    with pytest.raises(httpx.TransportError):  # the process died with the call in flight
        s.call("create_invoice", invoice("crash-1"))
    assert t.wait() == -signal.SIGKILL
    assert effects(database) == ({"crash-1": after_crash} if after_crash else {})
    t.start()
    stale = s.request("tools/call", {"name": "create_invoice", "arguments": invoice("crash-1")})
    assert (stale.status_code, stale.json()) == (404, SESSION_NOT_FOUND)  # its session died with it
    retry = sessions(t.url)
    retry.initialize()
    result = retry.call("create_invoice", invoice("crash-1"))  # the client's retry: same key, new request id
    assert "isError" not in result
    assert result["structuredContent"]["memo"] == "crash-1"
    assert effects(database) == {"crash-1": after_retry}
    if after_retry == 1 and after_crash == 1:
        assert result["structuredContent"]["invoice_id"] == "inv_00000001"  # a replay of the first
    # The failpoint is counted in the store: it fired once, and the restarted process lives on.
    assert "isError" not in retry.call("create_invoice", invoice("crash-2", key="k-2"))
    assert t.proc is not None
    assert t.proc.poll() is None


@pytest.mark.postgres
def test_sessions_die_with_the_process(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session]
) -> None:
    t = ts()
    s = sessions(t.url)
    s.initialize()
    assert "isError" not in s.call("count_invoices", {"memo_prefix": "x"})
    assert t.proc is not None
    t.proc.kill()  # as a pod kill does
    assert t.wait() == -signal.SIGKILL
    t.start()
    old = s.request("tools/call", {"name": "count_invoices", "arguments": {"memo_prefix": "x"}})
    assert (old.status_code, old.json()) == (404, SESSION_NOT_FOUND)
    # Re-initializing while still sending the dead id is refused the same way: start without it.
    stale = s.request("initialize", initialize_params(PROTOCOL))
    assert (stale.status_code, stale.json()) == (404, SESSION_NOT_FOUND)
    fresh = sessions(t.url)
    no_session = fresh.request("tools/list", {})
    assert (no_session.status_code, no_session.json()) == (400, NO_SESSION)
    discover = fresh.request("server/discover", {}, headers={"MCP-Protocol-Version": "2026-07-28"})
    assert (discover.status_code, discover.json()) == (400, NO_SESSION)
    fresh.initialize()
    assert fresh.id != s.id
    modern = fresh.request("tools/list", {}, headers={"MCP-Protocol-Version": "2026-07-28"})
    assert modern.status_code == 400
    assert modern.json()["error"]["code"] == -32000
    assert modern.json()["error"]["message"].startswith(
        "Bad Request: Unsupported protocol version: 2026-07-28 (supported versions: 2025-11-25,"
    )
    in_session = fresh.request("server/discover", {})
    assert in_session.status_code == 200
    assert in_session.json()["error"] == {"code": -32601, "message": "Method not found"}
    headers = {"Mcp-Session-Id": fresh.id or "", "MCP-Protocol-Version": fresh.protocol}
    assert fresh.http.delete(t.url, headers=headers).status_code == 200  # the client ends its session
    ended = fresh.request("tools/list", {})
    assert (ended.status_code, ended.json()) == (404, SESSION_NOT_FOUND)


@pytest.mark.postgres
def test_sigterm_stops_gracefully(ts: Callable[..., TsTarget], sessions: Callable[[str], Session]) -> None:
    t = ts()
    sessions(t.url).initialize()
    assert t.proc is not None
    t.proc.send_signal(signal.SIGTERM)
    assert t.wait() == 0


@pytest.mark.postgres
def test_stateless_mode(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session], database: str
) -> None:
    t = ts(INVOICES_SESSIONS="stateless", INVOICES_MODE="atomic")
    s = sessions(t.url)
    response = s.initialize()
    assert "mcp-session-id" not in response.headers
    assert s.id is None
    first = s.call("create_invoice", invoice("stateless-1"))
    fresh = sessions(t.url)  # no initialize at all: every request stands alone
    assert fresh.call("create_invoice", invoice("stateless-1")) == first
    assert effects(database) == {"stateless-1": 1}
    assert httpx.get(t.url, headers=ACCEPT).status_code == 405
    modern = fresh.request("tools/list", {}, headers={"MCP-Protocol-Version": "2026-07-28"})
    assert modern.status_code == 400


@pytest.mark.postgres
def test_sse_transport_streams_progress(
    ts: Callable[..., TsTarget], sessions: Callable[[str], Session]
) -> None:
    s = sessions(ts(INVOICES_TRANSPORT="sse", INVOICES_MODE="atomic").url)
    s.initialize()
    params = {"name": "create_invoice", "arguments": invoice("sse-1"), "_meta": {"progressToken": "p-1"}}
    response = s.request("tools/call", params)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = messages(response)
    progress = [m["params"]["progress"] for m in streamed if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3]
    assert streamed[-1]["id"] == s.next_id
    assert streamed[-1]["result"]["structuredContent"]["memo"] == "sse-1"


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_official_python_client(ts: Callable[..., TsTarget], database: str, mode: str) -> None:
    from mcp.client.client import Client

    t = ts(INVOICES_MODE="keyed")

    async def main() -> tuple[str, list[Any]]:
        async with Client(t.url, mode=mode) as client:
            arguments = invoice("sdk-1")
            results = [await client.call_tool("create_invoice", arguments) for _ in range(2)]
            return client.protocol_version, results

    version, (first, again) = asyncio.run(main())
    assert version == PROTOCOL  # "auto" probes server/discover, gets 400, falls back to initialize
    assert not first.is_error
    assert first.structured_content["memo"] == "sdk-1"
    assert again.content[0].text == first.content[0].text
    assert effects(database) == {"sdk-1": 1}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "PORT and INVOICES_DB must be set"),
        ({"INVOICES_DB": "/data/invoices.db"}, "PostgreSQL only"),
        ({"INVOICES_MODE": "sloppy"}, "INVOICES_MODE='sloppy'; choose one of naive, keyed, atomic"),
        ({"HOST": "0.0.0.0"}, "only listens on loopback"),
        ({"INVOICES_FAILPOINT": "after_business_commit@0"}, "use POINT@N"),
        ({"INVOICES_LATENCY_JITTER": "2"}, "must be a number from 0 to 1"),
        ({"INVOICES_SESSIONS": "sticky"}, "choose sessions or stateless"),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(node: str, env: dict[str, str], message: str) -> None:
    base = {"PATH": os.environ.get("PATH", ""), "PORT": str(free_port())} if env else {}
    if env and "INVOICES_DB" not in env:
        base["INVOICES_DB"] = "postgresql://postgres@127.0.0.1:9/none"
    done = subprocess.run(
        [node, str(SERVER)], env=base | env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("invoices-ts: ")
    assert message in lines[0]
