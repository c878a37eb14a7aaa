"""A small, fast MCP Streamable HTTP client with typed outcomes, for both protocol generations.

This is the driver's hot path: thousands of calls per second must cost the
harness less CPU than they cost the server under test, or the harness measures
its own limits. So it is built on asyncio protocols and llhttp's C parser
(``httptools``, what uvicorn uses) instead of a general-purpose HTTP client.
Readiness probes go through the same client, so what "ready" means and what the
driver sends cannot drift apart.

2026-07-28 (``protocol="2026-07-28"``): one stateless POST per request, with
``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers and the
per-request ``_meta`` (protocol version, client capabilities, client info).

2025 (``protocol="2025-11-25"``, ``"2025-06-18"``, ``"2025-03-26"``): a session.
``initialize`` (its answer carries ``Mcp-Session-Id`` and the version the server
chose), then ``notifications/initialized``, then requests carrying the session
id and (from 2025-06-18) ``MCP-Protocol-Version``. A server that restarted no
longer knows the session and answers 404 (some answer 400 naming it): the
attempt ends as ``session_lost``, certainly not executed, and the next call
opens a new session first. Concurrent calls share one opening.

Both: either response form (one ``application/json`` body, or a
``text/event-stream`` carrying notifications and then the response), HTTP/1.1
keep-alive with a pool of idle connections, chunked bodies, extra headers on
every request (``Authorization``), and the intent's idempotency key in ``_meta``
or a header when the scenario puts it there. 401 and 403 are ``auth_error``.

It never retries: one call is one attempt, and every failure comes back as a
:class:`CallResult` with an :class:`Outcome`, never as an exception. Retrying
(with a new JSON-RPC id) is the driver's decision. A timeout closes the
connection, which under 2026-07-28 is also how a client cancels a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections import deque
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson

from harness._version import __version__
from harness.client.messages import CallResult, SseParser, interpret_message
from harness.history import Detail, EventType, HistoryWriter, Outcome, clip

MODERN = "2026-07-28"
SESSION_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
"""The 2025 revisions, newest first: what ``initialize`` offers and what a server may choose."""
PROTOCOLS = (MODERN, *SESSION_VERSIONS)
DISCOVER_ID = 0
"""The request id of readiness probes; the driver's ids start at 1, handshakes count down from -1."""
_GATEWAY_STATUSES = frozenset({502, 503, 504})
"""Statuses a gateway answers for a replica it could not reach or that failed it."""
_OK_STATUSES = (200, 202, 204)
SSE_END_GRACE_S = 0.05
"""How long an event stream may stay open after it carried the response."""


def session_digest(session: str | None) -> str | None:
    """A session id as the history keeps it: a digest (session ids are credentials of a sort)."""
    return None if session is None else hashlib.sha256(session.encode()).hexdigest()[:12]


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
        self.session: bytes | None = None
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
        name = name.lower()
        if name == b"content-type":
            self._ctype = value.lower()
        elif name == b"mcp-session-id":
            self.session = value

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
                # A compliant server ends the stream right after its response; one that does
                # not must not hold the attempt (nor widen the window a kill counts in): after
                # a moment the answer is taken and the connection dropped.
                if self._grace is None:
                    self._grace = self._loop.call_later(SSE_END_GRACE_S, self._wake)

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- exchange
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def last_event_id(self) -> str | None:
        if self._sse is None or self._sse.last_id is None:
            return None
        return self._sse.last_id.decode("utf-8", "replace")

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


class McpHttpClient:
    """A pool of keep-alive connections to one MCP endpoint, in one protocol; one attempt per call."""

    def __init__(
        self,
        url: str,
        *,
        protocol: str = MODERN,
        headers: Mapping[str, str] | None = None,
        key_meta: str | None = None,
        key_header: str | None = None,
        resume: bool = False,
        history: HistoryWriter | None = None,
        name: str = "client",
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"MCP endpoint must be http://HOST:PORT/PATH, got {url!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown MCP protocol version {protocol!r}; one of {', '.join(PROTOCOLS)}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.path = parts.path or "/"
        self.protocol = protocol
        """The version spoken: 2026-07-28, or the 2025 version asked for (then what the server chose)."""
        self.modern = protocol == MODERN
        self.session: str | None = None
        self.server_info: object = None
        """What the last ``initialize`` said of the server (``serverInfo``), as it sent it."""
        self._handshaken = False
        """A 2025 session is open (or the server has none, but took the handshake)."""
        self.name = name
        self.resume = resume and protocol != MODERN
        """2025: try to resume a broken event stream (GET with Last-Event-ID) before giving up on it."""
        self._history = history
        self._key_meta = key_meta
        self._key_header = key_header
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        self._opening: asyncio.Future[CallResult | None] | None = None
        self._handshake_ids = itertools.count(-1, -1)
        self._client_info = {"name": "mcp-chaos", "version": __version__}
        self._meta: dict[str, Any] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": self._client_info,
        }
        self._prefix = self._head_prefix()

    def _head_prefix(self, *, handshake: bool = False) -> bytes:
        """The request line and the headers every request of this client carries."""
        head = (
            f"POST {self.path} HTTP/1.1\r\n"
            f"Host: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
        )
        # 2025-03-26 had no version header; initialize comes before any version is agreed.
        if not handshake and self.protocol >= "2025-06-18":
            head += f"MCP-Protocol-Version: {self.protocol}\r\n"
        if self.session is not None and not handshake:
            head += f"Mcp-Session-Id: {self.session}\r\n"
        return (head + self._extra).encode()

    def build_request(
        self,
        method: str,
        params: dict[str, Any],
        request_id: int,
        *,
        name: str | None = None,
        request_progress: bool = False,
        key: str | None = None,
    ) -> bytes:
        """The exact bytes of one POST."""
        head = ""
        if self.modern:
            meta = {**self._meta, "progressToken": request_id} if request_progress else self._meta
            if key is not None and self._key_meta is not None:
                meta = {**meta, self._key_meta: key}
            params = {**params, "_meta": meta}
            head = f"Mcp-Method: {method}\r\n" + (f"Mcp-Name: {name}\r\n" if name is not None else "")
        else:
            meta = {"progressToken": request_id} if request_progress else {}
            if key is not None and self._key_meta is not None:
                meta[self._key_meta] = key
            if meta:
                params = {**params, "_meta": meta}
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        if key is not None and self._key_header is not None:
            head += f"{self._key_header}: {key}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        return self._prefix + head.encode() + body

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        request_id: int,
        timeout: float,
        request_progress: bool = False,
        key: str | None = None,
        answer: dict[str, Any] | None = None,
    ) -> CallResult:
        """One ``tools/call`` attempt (in the 2025 protocol, opening a session first if there is none)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        if not self.modern and not self._handshaken:
            failed = await self._ensure_session(timeout)
            if failed is not None:
                return failed
            timeout = max(0.001, timeout - (loop.time() - started))
        session = self.session
        request = self.build_request(
            "tools/call",
            {"name": name, "arguments": arguments, **(answer or {})},
            request_id,
            name=name,
            request_progress=request_progress,
            key=key,
        )
        res = await self.send(request, request_id, timeout=timeout, session=session)
        if self.resume and res.outcome is Outcome.TRANSPORT_ERROR and res.event_id is not None:
            res = await self._resume(res, request_id, session, deadline=deadline)
        if res.outcome is Outcome.SESSION_LOST:
            self._lost(session, res)
        return res

    async def request(
        self, method: str, params: dict[str, Any], request_id: int, *, timeout: float
    ) -> CallResult:
        """Any other request (``tools/list`` for ``mcp-chaos init``); a 2025 session is opened first."""
        if not self.modern and not self._handshaken:
            failed = await self._ensure_session(timeout)
            if failed is not None:
                return failed
        request = self.build_request(method, params, request_id)
        return await self.send(request, request_id, timeout=timeout, session=self.session)

    async def _resume(
        self, broken: CallResult, request_id: int, session: str | None, deadline: float
    ) -> CallResult:
        """Ask for the rest of a broken stream (2025 resumability); the broken result if that fails."""
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Accept: text/event-stream\r\n"
            + (f"MCP-Protocol-Version: {self.protocol}\r\n" if self.protocol >= "2025-06-18" else "")
            + (f"Mcp-Session-Id: {session}\r\n" if session is not None else "")
            + f"Last-Event-ID: {broken.event_id}\r\n{self._extra}\r\n"
        ).encode()
        left = max(0.001, deadline - asyncio.get_running_loop().time())
        again = await self.send(request, request_id, timeout=left, session=session)
        if again.outcome in (Outcome.OK, Outcome.TOOL_ERROR):
            again.resumed = True
            return again
        if again.outcome is Outcome.SESSION_LOST:
            self._lost(session, again)  # the server restarted: its events went with it
        broken.resumed = False
        broken.message = clip(
            f"resuming from event {broken.event_id} failed: {again.outcome.value} "
            f"{again.detail or ''} {again.message or ''}"
        )
        return broken

    async def discover(self, *, timeout: float) -> CallResult:
        """One ``server/discover`` request (2026-07-28 servers MUST answer it): a readiness probe.

        OK only for a JSON-RPC result; the timeout bounds the whole exchange, so a
        server whose answer never ends cannot hold the probe.
        """
        request = self.build_request("server/discover", {}, DISCOVER_ID)
        return await self.send(request, DISCOVER_ID, timeout=timeout)

    # -- 2025 sessions
    async def _ensure_session(self, timeout: float) -> CallResult | None:
        """Open a session unless one is open or opening; None when there is one, else why not."""
        if self._opening is None or self._opening.done():
            self._opening = asyncio.ensure_future(self.initialize(timeout=timeout))
        # Shielded: one caller's cancellation must not cancel the opening the others wait for.
        return await asyncio.shield(self._opening)

    async def initialize(self, *, timeout: float) -> CallResult | None:
        """The 2025 handshake: ``initialize``, then ``notifications/initialized``; None on success.

        On success :attr:`session` is the server's session id (None for a server
        without sessions) and :attr:`protocol` the version it chose.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        rid = next(self._handshake_ids)
        params = {
            "protocolVersion": self.protocol,
            "capabilities": {},
            "clientInfo": self._client_info,
        }
        body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params})
        request = self._head_prefix(handshake=True) + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        res = await self.send(request, rid, timeout=timeout)
        if res.outcome is not Outcome.OK or res.result is None:
            return res
        version = res.result.get("protocolVersion")
        if version not in SESSION_VERSIONS:
            return CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.BAD_RESULT,
                status=res.status,
                message=clip(f"initialize: the server chose protocol version {version!r}"),
            )
        self.protocol = str(version)
        self.server_info = res.result.get("serverInfo")
        self.session = res.session
        self._prefix = self._head_prefix()
        done = await self._notify("notifications/initialized", timeout=max(0.001, deadline - loop.time()))
        if done is not None:
            said = f": {done.message}" if done.message else ""
            done.message = clip(
                f"it answered initialize, but not notifications/initialized ({done.outcome.value} "
                f"{done.detail or ''}{said})"
            )
            return done
        self._handshaken = True
        if self._history is not None:
            self._history.emit(
                EventType.SESSION_OPENED,
                session=session_digest(self.session),
                version=self.protocol,
                client=self.name,
            )
        return None

    async def _notify(self, method: str, *, timeout: float) -> CallResult | None:
        """A notification (no id, no answer but 202); None when the server took it."""
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        request = self._prefix + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        res = await self.send(request, None, timeout=timeout)
        if res.outcome is Outcome.OK or res.status in _OK_STATUSES:
            return None
        return res

    def _lost(self, session: str | None, res: CallResult) -> None:
        """The server did not know ``session``: forget it (once), so the next call opens another."""
        if session is None or self.session != session:
            return  # another attempt already noticed; maybe a new session is open already
        self.session = None
        self._handshaken = False
        self._prefix = self._head_prefix()
        if self._history is not None:
            self._history.emit(
                EventType.SESSION_LOST, session=session_digest(session), status=res.status, client=self.name
            )

    async def end_session(self) -> None:
        """DELETE the session, as a 2025 client should when done (best effort, never waits long)."""
        if self.session is None:
            return
        request = (
            f"DELETE {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Mcp-Session-Id: {self.session}\r\n{self._extra}Content-Length: 0\r\n\r\n"
        ).encode()
        await self.send(request, None, timeout=1.0)
        self.session = None
        self._handshaken = False

    # -- one exchange
    async def send(
        self, request: bytes, request_id: int | None, *, timeout: float, session: str | None = None
    ) -> CallResult:
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
            said = None
            if conn.is_sse:
                said = (
                    f"an event stream that carried no response in time ({conn.notifications} notifications)"
                )
            return CallResult(Outcome.TIMEOUT, detail, status=conn.status, message=said)
        except ConnectionRefusedError:
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED)
        except OSError as exc:
            return CallResult(
                Outcome.TRANSPORT_ERROR, Detail.CONNECT_FAILED, message=clip(str(exc.strerror or exc))
            )
        except BaseException:
            if conn is not None:
                conn.abort()
                self._open.discard(conn)
            raise
        result = self._classify(conn, request_id, session)
        if conn.reusable:
            self._idle.append(conn)
        else:
            conn.abort()
            self._open.discard(conn)
        return result

    def _classify(self, conn: _Connection, request_id: int | None, session: str | None) -> CallResult:
        if conn.parse_error is not None:
            return CallResult(
                Outcome.PROTOCOL_ERROR, Detail.BAD_HTTP, status=conn.status, message=clip(conn.parse_error)
            )
        form = "sse" if conn.is_sse else "json"
        status = conn.status
        if conn.is_sse:
            if conn.final is not None and request_id is not None:
                res = interpret_message(conn.final, request_id, status=status, form=form)
                res.notifications = conn.notifications
                res.session = conn.session.decode("latin-1") if conn.session is not None else None
                return res
            return CallResult(
                Outcome.TRANSPORT_ERROR,
                Detail.SSE_ENDED if conn.complete else Detail.CLOSED_MID_RESPONSE,
                status=status,
                form=form,
                notifications=conn.notifications,
                event_id=conn.last_event_id,
            )
        if not conn.complete:
            detail = Detail.CLOSED_BEFORE_RESPONSE if conn.received == 0 else Detail.CLOSED_MID_RESPONSE
            return CallResult(Outcome.TRANSPORT_ERROR, detail, status=status)
        body = b"".join(conn.body)
        if status != 200:
            refused = self._refused(status, body, session)
            if refused is not None:
                return refused
        if request_id is None:  # a notification or a DELETE: only the status matters
            if status in _OK_STATUSES:
                return CallResult(Outcome.OK, status=status)
            return CallResult(
                Outcome.PROTOCOL_ERROR, Detail.HTTP_STATUS, status=status, message=_http_text(status, body)
            )
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            if status in _GATEWAY_STATUSES:
                # A balancer's own page, not the server's answer: whether a replica got the request
                # is unknown, as after a broken connection, and the client retries.
                return CallResult(
                    Outcome.TRANSPORT_ERROR,
                    Detail.GATEWAY_ERROR,
                    status=status,
                    message=_http_text(status, body),
                )
            return CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.NOT_JSON if status == 200 else Detail.HTTP_STATUS,
                status=status,
                message=_http_text(status, body),
            )
        res = interpret_message(msg, request_id, status=status, form=form)
        res.session = conn.session.decode("latin-1") if conn.session is not None else None
        if status != 200 and res.message is not None:
            res.message = f"HTTP {status}: {res.message}"  # the status says as much as the body
        if status != 200 and res.outcome is not Outcome.PROTOCOL_ERROR:
            return CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.HTTP_STATUS,
                status=status,
                form=form,
                message=_http_text(status, body),
            )
        return res

    @staticmethod
    def _refused(status: int | None, body: bytes, session: str | None) -> CallResult | None:
        """401/403 (credentials) and, for a request in a session, 404 or a 400 naming the session."""
        if status in (401, 403):
            detail = Detail.UNAUTHORIZED if status == 401 else Detail.FORBIDDEN
            return CallResult(Outcome.AUTH_ERROR, detail, status=status, message=_http_text(status, body))
        if session is not None and (status == 404 or (status == 400 and b"session" in body.lower())):
            detail = Detail.SESSION_NOT_FOUND if status == 404 else Detail.SESSION_REJECTED
            return CallResult(Outcome.SESSION_LOST, detail, status=status, message=_http_text(status, body))
        return None

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
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()

    async def __aenter__(self) -> McpHttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _http_text(status: int | None, body: bytes) -> str:
    return clip(f"HTTP {status}: {body[:4096].decode('utf-8', 'replace')}")
