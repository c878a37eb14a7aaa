"""A small, fast MCP 2026-07-28 Streamable HTTP client with typed outcomes.

This is the driver's hot path: thousands of calls per second must cost the
harness less CPU than they cost the server under test, or the harness measures
its own limits. So it is built on asyncio protocols and llhttp's C parser
(``httptools``, what uvicorn uses) instead of a general-purpose HTTP client.
Readiness probes (``server/discover``) go through the same client, so what
"ready" means and what the driver sends cannot drift apart.

What it implements of the 2026-07-28 Streamable HTTP transport:

* one stateless POST per request, with ``MCP-Protocol-Version``, ``Mcp-Method``,
  ``Mcp-Name`` and ``Accept: application/json, text/event-stream`` headers and
  the per-request ``_meta`` (protocol version, client capabilities, client info);
* both response forms: one ``application/json`` body, or a ``text/event-stream``
  carrying notifications and then the final JSON-RPC response;
* HTTP/1.1 keep-alive with a pool of idle connections, chunked bodies.

It never retries: one call is one attempt, and every failure comes back as a
:class:`CallResult` with an :class:`Outcome`, never as an exception. Retrying
(with a new JSON-RPC id) is the driver's decision. A timeout closes the
connection, which under 2026-07-28 is also how a client cancels a request.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson

from harness._version import __version__
from harness.history import Detail, Outcome, excerpt

PROTOCOL_VERSION = "2026-07-28"
DISCOVER_ID = 0
"""The request id of readiness probes; the driver's ids start at 1."""


@dataclass(slots=True)
class CallResult:
    """The typed outcome of one attempt."""

    outcome: Outcome
    detail: Detail | None = None
    status: int | None = None
    form: str | None = None
    """``json`` or ``sse``: the response form the server chose."""
    result: dict[str, Any] | None = None
    """The JSON-RPC ``result`` object (ok and tool_error)."""
    error_code: str | int | None = None
    """A tool error contract's ``code``, or a JSON-RPC error's numeric code."""
    retryable: bool | None = None
    retry_after_ms: int | None = None
    notifications: int = 0
    message: str | None = None
    """What the server or the OS said, as an excerpt (tool error text, JSON-RPC error message,
    the start of an HTTP error body): why an intent was rejected, for people."""


class SseParser:
    """Incremental ``text/event-stream`` parser yielding each event's data.

    Only ``data`` fields matter under 2026-07-28 (event ids and resumability are
    gone); comments (keep-alive pings) and other fields are skipped.
    """

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        events: list[bytes] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
                continue
            if line[0] == 0x3A:  # ":" comment
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
        self._buf = buf[start:]
        return events


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection carrying one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.lost = False
        self._waiter: asyncio.Future[None] | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.status: int | None = None
        self.received = 0
        self.is_sse = False
        self.body: list[bytes] = []
        self.complete = False
        self.keep_alive = True
        self.final: dict[str, Any] | None = None
        self.notifications = 0
        self.parse_error: str | None = None
        self._sse: SseParser | None = None
        self._ctype = b""
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports are not asyncio.Transport subclasses.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.parse_error = f"bad HTTP from server: {exc}"
            self.abort()
            self._wake()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._ctype = value.lower()

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        if self._ctype.startswith(b"text/event-stream"):
            self.is_sse = True
            self._sse = SseParser()

    def on_body(self, body: bytes) -> None:
        if self._sse is None:
            self.body.append(body)
            return
        for data in self._sse.feed(body):
            try:
                msg = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg:
                self.notifications += 1
            elif "result" in msg or "error" in msg:
                self.final = msg
                # A compliant server ends the stream right after its response; one
                # that does not must not hold the attempt until its timeout.
                if self._grace is None:
                    self._grace = self._loop.call_later(1.0, self._wake)

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- exchange
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def reusable(self) -> bool:
        return not self.lost and self.complete and self.keep_alive and self.parse_error is None

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.lost = True

    async def exchange(self, request: bytes) -> None:
        """Send one request and wait until its response is complete or the connection is gone."""
        assert self.transport is not None
        self._reset()
        self._waiter = self._loop.create_future()
        if self.lost:
            return
        self.transport.write(request)
        await self._waiter
        self._waiter = None


def _text_of(result: dict[str, Any]) -> str:
    """The text blocks of a tool result, joined: what a person reads as the tool's answer."""
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return " ".join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type", "text") == "text"
        and isinstance(block.get("text"), str)
    )


def _tool_error_contract(result: dict[str, Any], text: str) -> tuple[str | None, bool | None, int | None]:
    """Read ``code``/``retryable``/``retry_after_ms`` from a tool error, if it follows the contract.

    The contract may sit in ``structuredContent`` or as a JSON object in the text
    (possibly after a prefix such as the SDK's ``Error executing tool``).
    """
    contract: Any = result.get("structuredContent")
    if not isinstance(contract, dict) or "code" not in contract:
        contract = None
        if (brace := text.find("{")) >= 0:
            try:
                contract = orjson.loads(text[brace:])
            except orjson.JSONDecodeError:
                contract = None
    if not isinstance(contract, dict):
        return None, None, None
    code = contract.get("code")
    retryable = contract.get("retryable")
    after = contract.get("retry_after_ms")
    return (
        str(code) if code is not None else None,
        retryable if isinstance(retryable, bool) else None,
        after if isinstance(after, int) and not isinstance(after, bool) else None,
    )


def interpret_message(msg: Any, request_id: int, *, status: int | None, form: str) -> CallResult:
    """Turn one JSON-RPC response message into a CallResult."""

    def protocol_error(detail: Detail, message: str, **kw: Any) -> CallResult:
        return CallResult(
            Outcome.PROTOCOL_ERROR, detail, status=status, form=form, message=excerpt(message), **kw
        )

    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return protocol_error(Detail.NOT_JSONRPC, "not a JSON-RPC 2.0 message")
    if "error" in msg:
        err = msg["error"] if isinstance(msg["error"], dict) else {}
        code = err.get("code")
        return protocol_error(
            Detail.JSONRPC_ERROR,
            f"JSON-RPC error {code}: {err.get('message', '')}",
            error_code=code if isinstance(code, int) else None,
        )
    if msg.get("id") != request_id:
        return protocol_error(Detail.ID_MISMATCH, f"response id {msg.get('id')!r} != request id {request_id}")
    result = msg.get("result")
    if not isinstance(result, dict):
        return protocol_error(Detail.BAD_RESULT, "result is not an object")
    if result.get("resultType", "complete") != "complete":
        return protocol_error(
            Detail.INPUT_REQUIRED,
            f"resultType {result.get('resultType')!r} (multi round-trip requests are not driven yet)",
            result=result,
        )
    if result.get("isError") is True:
        text = _text_of(result)
        code, retryable, after = _tool_error_contract(result, text)
        return CallResult(
            Outcome.TOOL_ERROR,
            Detail.ERROR_CONTRACT if code is not None else Detail.NO_ERROR_CONTRACT,
            status=status,
            form=form,
            result=result,
            error_code=code,
            retryable=retryable,
            retry_after_ms=after,
            message=excerpt(text) if text else None,
        )
    return CallResult(Outcome.OK, status=status, form=form, result=result)


class McpHttpClient:
    """A pool of keep-alive connections to one MCP endpoint; one attempt per call."""

    def __init__(self, url: str, *, client_name: str = "mcp-chaos") -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"MCP endpoint must be http://HOST:PORT/PATH, got {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.path = parts.path or "/"
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        self._meta: dict[str, Any] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": client_name, "version": __version__},
        }
        self._head_prefix = (
            f"POST {self.path} HTTP/1.1\r\n"
            f"Host: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: {PROTOCOL_VERSION}\r\n"
        ).encode()

    def build_request(
        self,
        method: str,
        params: dict[str, Any],
        request_id: int,
        *,
        name: str | None = None,
        request_progress: bool = False,
    ) -> bytes:
        """The exact bytes of one POST; ``params`` gets the per-request ``_meta``."""
        meta = {**self._meta, "progressToken": request_id} if request_progress else self._meta
        body = orjson.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
        )
        head = f"Mcp-Method: {method}\r\n"
        if name is not None:
            head += f"Mcp-Name: {name}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        return self._head_prefix + head.encode() + body

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        request_id: int,
        timeout: float,
        request_progress: bool = False,
    ) -> CallResult:
        """One ``tools/call`` attempt."""
        request = self.build_request(
            "tools/call",
            {"name": name, "arguments": arguments},
            request_id,
            name=name,
            request_progress=request_progress,
        )
        return await self.send(request, request_id, timeout=timeout)

    async def discover(self, *, timeout: float) -> CallResult:
        """One ``server/discover`` request (2026-07-28 servers MUST answer it): a readiness probe.

        OK only for a JSON-RPC result; the timeout bounds the whole exchange, so a
        server whose answer never ends cannot hold the probe.
        """
        request = self.build_request("server/discover", {}, DISCOVER_ID)
        return await self.send(request, DISCOVER_ID, timeout=timeout)

    async def send(self, request: bytes, request_id: int, *, timeout: float) -> CallResult:
        """Send prepared request bytes and classify what comes back."""
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                conn = await self._acquire()
                await conn.exchange(request)
        except TimeoutError:
            if conn is None:
                return CallResult(Outcome.TIMEOUT, Detail.TIMEOUT_CONNECT)
            conn.abort()
            self._open.discard(conn)
            detail = Detail.TIMEOUT_NO_RESPONSE if conn.status is None else Detail.TIMEOUT_MID_RESPONSE
            return CallResult(Outcome.TIMEOUT, detail, status=conn.status)
        except ConnectionRefusedError:
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED)
        except OSError as exc:
            return CallResult(
                Outcome.TRANSPORT_ERROR, Detail.CONNECT_FAILED, message=excerpt(str(exc.strerror or exc))
            )
        except BaseException:
            if conn is not None:
                conn.abort()
                self._open.discard(conn)
            raise
        result = self._classify(conn, request_id)
        if conn.reusable:
            self._idle.append(conn)
        else:
            conn.abort()
            self._open.discard(conn)
        return result

    def _classify(self, conn: _Connection, request_id: int) -> CallResult:
        if conn.parse_error is not None:
            return CallResult(
                Outcome.PROTOCOL_ERROR, Detail.BAD_HTTP, status=conn.status, message=excerpt(conn.parse_error)
            )
        form = "sse" if conn.is_sse else "json"
        if conn.is_sse:
            if conn.final is not None:
                res = interpret_message(conn.final, request_id, status=conn.status, form=form)
                res.notifications = conn.notifications
                return res
            return CallResult(
                Outcome.TRANSPORT_ERROR,
                Detail.SSE_ENDED if conn.complete else Detail.CLOSED_MID_RESPONSE,
                status=conn.status,
                form=form,
                notifications=conn.notifications,
            )
        if not conn.complete:
            detail = Detail.CLOSED_BEFORE_RESPONSE if conn.received == 0 else Detail.CLOSED_MID_RESPONSE
            return CallResult(Outcome.TRANSPORT_ERROR, detail, status=conn.status)
        body = b"".join(conn.body)
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            return CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.NOT_JSON if conn.status == 200 else Detail.HTTP_STATUS,
                status=conn.status,
                message=excerpt(f"HTTP {conn.status}: {body[:400].decode('utf-8', 'replace')}"),
            )
        res = interpret_message(msg, request_id, status=conn.status, form=form)
        if conn.status != 200 and res.outcome is not Outcome.PROTOCOL_ERROR:
            return CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.HTTP_STATUS,
                status=conn.status,
                form=form,
                message=excerpt(f"HTTP {conn.status}: {body[:400].decode('utf-8', 'replace')}"),
            )
        return res

    async def _acquire(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost:
                return conn
            self._open.discard(conn)
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(lambda: _Connection(loop), self.host, self.port)
        self._open.add(proto)
        return proto

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()

    async def __aenter__(self) -> McpHttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(slots=True)
class Readiness:
    """What waiting for a server to answer ``server/discover`` came to."""

    ready: bool
    after_s: float
    last: CallResult | None = None
    """The last probe's result when not ready: what the server did answer, if anything."""
    exited: bool = False
    """The server's process went away while we waited (``alive`` said so)."""


async def wait_ready(
    url: str,
    *,
    timeout_s: float,
    alive: Callable[[], bool] = lambda: True,
    interval_s: float = 0.05,
    probe_timeout_s: float = 2.0,
) -> Readiness:
    """Probe ``url`` until it answers ``server/discover``, ``alive()`` turns false, or time is up.

    The deadline bounds the whole wait, probes included (each is cut at
    ``probe_timeout_s`` and at the deadline), so no server can hold it longer.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    last: CallResult | None = None
    async with McpHttpClient(url) as client:
        while True:
            if not alive():
                return Readiness(False, time.monotonic() - started, last, exited=True)
            left = deadline - time.monotonic()
            if left <= 0:
                return Readiness(False, time.monotonic() - started, last)
            last = await client.discover(timeout=min(probe_timeout_s, left))
            if last.outcome is Outcome.OK:
                return Readiness(True, time.monotonic() - started)
            await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
