"""A small, fast MCP Streamable HTTP client with typed outcomes, for both protocol generations.

This is the driver's hot path: thousands of calls per second must cost the
harness less CPU than they cost the server under test, or the harness measures
its own limits. Readiness probes go through the same client, so what "ready"
means and what the driver sends cannot drift apart. It is cut as httpx is cut:
``pool`` moves bytes (keep-alive connections on llhttp), ``framing`` builds
every request's bytes, ``classify`` turns what came back into a typed outcome
(pure), and this module holds what is left of MCP over HTTP: sessions, their
openings and losses, resuming a broken stream.

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
every request (``Authorization``), the intent's idempotency key in ``_meta``
or a header when the scenario puts it there, and the attempt's ``traceparent``
(``client.trace``). 401 and 403 are ``auth_error``.

It never retries: one call is one attempt, and every failure comes back as a
:class:`CallResult` with an :class:`Outcome`, never as an exception. Retrying
(with a new JSON-RPC id) is the driver's decision. A timeout closes the
connection, which under 2026-07-28 is also how a client cancels a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from harness.client.classify import KEPT_HEADERS, OK_STATUSES, answers, classify
from harness.client.framing import Framing
from harness.client.host import Host
from harness.client.messages import MODERN, PROTOCOLS, SESSION_VERSIONS, CallResult, ToolCall, refused_version
from harness.client.oauth import Challenge, OAuthTokens
from harness.client.pool import Pool
from harness.events import SessionLost, SessionOpened
from harness.history import HistoryWriter, Outcome, clip

__all__ = ["DISCOVER_ID", "MODERN", "PROTOCOLS", "SESSION_VERSIONS", "McpHttpClient", "session_digest"]

MAX_RECONNECTIONS = 20
"""How many times one attempt comes back for its stream, each time it closed having moved on (a server
polling the client, SEP-1699), before it gives up on it (the deadline bounds it too)."""
REPLY_TIMEOUT_S = 10.0
"""How long the POST carrying the client's answer to a server's request may take."""
LISTEN_TIMEOUT_S = 3600.0
"""How long the session's own event stream is held open (the client closes it when it is done)."""
LISTEN_WAIT_S = 5.0
"""How long the handshake waits for the session's own stream to open."""
AUTH_ROUNDS = 2
"""How many times one request is sent again after the OAuth flow answered its refusal: a server that
refuses every token it is given (a step-up that never satisfies it) ends as ``auth_error``."""
LIST_PAGES = 20
"""How many ``tools/list`` pages a client reads looking for one tool's marks (a catalog larger than
that is a finding of its own: ``contract``'s catalog check)."""
DISCOVER_ID = 0
"""The request id of readiness probes; the driver's ids start at 1, handshakes count down from -1."""


def session_digest(session: str | None) -> str | None:
    """A session id as the history keeps it: a digest (session ids are credentials of a sort)."""
    return None if session is None else hashlib.sha256(session.encode()).hexdigest()[:12]


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
        resume: bool | None = None,
        history: HistoryWriter | None = None,
        name: str = "client",
        auth: OAuthTokens | None = None,
        host: Host | None = None,
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
        self._resume_asked = resume
        """2025: try to resume a broken event stream (GET with Last-Event-ID) before giving up on it;
        None: in every 2025 session (:attr:`resumes`)."""
        self._history = history
        self._framing = Framing(
            self.host,
            self.port,
            self.path,
            headers=headers,
            key_header=key_header,
            key_meta=key_meta,
            capabilities=None if host is None else host.capabilities,
            auth=auth,
        )
        self._host = host
        """2025: what answers a request the server sends inside a response's stream or the session's own
        (``roots/list``, ``elicitation/create``); None: the client declares nothing, and such a request
        goes unanswered (a readiness probe)."""
        self._readers: dict[str | None, Callable[[bytes], bool]] = {}
        """Each session's stream reader, made once: a call's path makes none."""
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}
        """2026-07-28: each listed tool's ``x-mcp-header`` marks (argument path to header token)."""
        self._replies: set[asyncio.Future[Any]] = set()
        """The POSTs answering server requests, and the session's own stream: cancelled on close."""
        self._pool = Pool(self.host, self.port, keep_headers=KEPT_HEADERS)
        self._auth = auth
        """OAuth (``target.auth``): answers a 401 or a 403 ``insufficient_scope`` and refreshes a token
        near its expiry; the header it finds goes on every request (:attr:`Framing.authorization`)."""
        self._opening: asyncio.Future[CallResult | None] | None = None
        self._handshake_ids = itertools.count(-1, -1)

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
        """The exact bytes of one POST, in this client's protocol and session."""
        return self._framing.request(
            method,
            params,
            request_id,
            version=self.protocol,
            session=self.session,
            name=name,
            progress=request_progress,
            key=key,
        )

    @property
    def resumes(self) -> bool:
        """Whether a broken stream is resumed: as asked, else in every 2025 session (resuming with
        ``Last-Event-ID`` is in each 2025 version, and the SDK clients do it whatever version the server
        chose), never at 2026-07-28, which removed resumability."""
        if self.protocol == MODERN:
            return False
        return self._resume_asked is not False

    async def call_tool(self, call: ToolCall, *, timeout: float) -> CallResult:
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
        request = self._framing.request(
            "tools/call",
            call.params(),
            call.request_id,
            version=self.protocol,
            session=session,
            name=call.name,
            progress=call.request_progress,
            key=call.key,
            traceparent=call.traceparent,
            extra=call.headers if call.headers is not None else self._mirrors(call),
        )
        res = await self.send(request, call.request_id, timeout=timeout, session=session)
        if self.resumes and res.outcome is Outcome.TRANSPORT_ERROR and res.event_id is not None:
            res = await self._resume(
                res, call.request_id, session, deadline=deadline, traceparent=call.traceparent
            )
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
        res = await self.send(request, request_id, timeout=timeout, session=self.session)
        if method == "tools/list" and self.modern and res.result is not None:
            self._absorb_tools(res.result)
        return res

    async def learn_marks(self, tool: str, *, timeout: float, pages: int = LIST_PAGES) -> bool:
        """2026-07-28 (SEP-2243): list the tools until ``tool`` is listed (at most ``pages`` pages),
        keeping each listed tool's ``x-mcp-header`` marks, which its calls mirror in ``Mcp-Param-*``
        headers (a server refuses a call that does not). Whether ``tool`` was listed."""
        cursor: object = None
        for _ in range(pages):
            params = {} if cursor is None else {"cursor": cursor}
            res = await self.request("tools/list", params, DISCOVER_ID, timeout=timeout)
            page = res.result or {}
            listed = page.get("tools")
            if not isinstance(listed, list):
                return False
            if any(isinstance(t, dict) and t.get("name") == tool for t in listed):
                return True
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str):
                return False
        return False

    def adopt_marks(self, lister: McpHttpClient) -> None:
        """Mirror the ``x-mcp-header`` marks another client of the same endpoint learnt
        (:meth:`learn_marks`): a run lists the tools once, not once per client."""
        self._param_headers = lister._param_headers

    def _absorb_tools(self, listed: dict[str, Any]) -> None:
        """2026-07-28 (SEP-2243): keep which arguments of each listed tool its schema marks
        ``x-mcp-header``, and drop from the listing a tool whose marks are invalid, as a client must.
        The SDK's codec reads the schema, so both ends agree on what a mark is."""
        from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

        tools = listed.get("tools")
        if not isinstance(tools, list):
            return
        kept = []
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            schema = tool.get("inputSchema")
            if find_invalid_x_mcp_header(schema) is not None:
                self._param_headers.pop(str(tool.get("name")), None)
                continue
            marks = x_mcp_header_map(schema)
            if marks:
                self._param_headers[str(tool.get("name"))] = marks
            kept.append(tool)
        listed["tools"] = kept

    def _mirrors(self, call: ToolCall) -> dict[str, str] | None:
        """The ``Mcp-Param-*`` headers of a call to a tool listed with ``x-mcp-header`` marks."""
        marks = self._param_headers.get(call.name) if self._param_headers else None
        if marks is None:
            return None
        from mcp.shared.inbound import mcp_param_headers

        return mcp_param_headers(marks, call.arguments)

    async def _resume(
        self,
        broken: CallResult,
        request_id: int,
        session: str | None,
        *,
        deadline: float,
        traceparent: str | None,
    ) -> CallResult:
        """Ask for the rest of a broken or closed stream (2025 resumability), after the wait its
        ``retry`` field asked for (within the attempt's deadline), and again each time the new stream
        closes too having moved on (a server that polls, SEP-1699), up to :data:`MAX_RECONNECTIONS`;
        the broken result if that fails. The result says how many reconnections it took."""
        assert broken.event_id is not None
        loop = asyncio.get_running_loop()
        event_id, retry_ms = broken.event_id, broken.retry_ms
        for reconnection in range(1, MAX_RECONNECTIONS + 1):
            request = self._framing.resume(
                event_id, version=self.protocol, session=session, traceparent=traceparent
            )
            if retry_ms:
                await asyncio.sleep(min(retry_ms / 1000, max(0.0, deadline - loop.time() - 0.001)))
            left = max(0.001, deadline - loop.time())
            again = await self.send(request, request_id, timeout=left, session=session)
            if again.outcome in (Outcome.OK, Outcome.TOOL_ERROR):
                again.resumed, again.reconnections = True, reconnection
                return again
            moved_on = again.event_id is not None and again.event_id != event_id
            if again.outcome is Outcome.TRANSPORT_ERROR and moved_on and loop.time() < deadline:
                event_id, retry_ms = str(again.event_id), again.retry_ms or retry_ms
                continue
            break
        if again.outcome is Outcome.SESSION_LOST:
            self._lost(session, again)  # the server restarted: its events went with it
        broken.resumed, broken.reconnections = False, reconnection
        broken.message = clip(
            f"resuming from event {event_id} failed: {again.outcome.value} "
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
        request = self._framing.initialize(rid, self.protocol)
        res = await self.send(request, rid, timeout=timeout)
        if res.outcome is not Outcome.OK or res.result is None:
            return res
        version = res.result.get("protocolVersion")
        refused = refused_version(version, status=res.status)
        if refused is not None:
            return refused
        self.protocol = str(version)
        self.server_info = res.result.get("serverInfo")
        self.session = res.session
        done = await self._notify("notifications/initialized", timeout=max(0.001, deadline - loop.time()))
        if done is not None:
            said = f": {done.message}" if done.message else ""
            done.message = clip(
                f"it answered initialize, but not notifications/initialized ({done.outcome.value} "
                f"{done.detail or ''}{said})"
            )
            return done
        self._handshaken = True
        if self._host is not None:
            await self._listen(self.session)
        if self._history is not None:
            self._history.emit(
                SessionOpened(session=session_digest(self.session), version=self.protocol, client=self.name)
            )
        return None

    async def _notify(self, method: str, *, timeout: float) -> CallResult | None:
        """A notification (no id, no answer but 202); None when the server took it."""
        request = self._framing.notification(method, version=self.protocol, session=self.session)
        res = await self.send(request, None, timeout=timeout)
        if res.outcome is Outcome.OK or res.status in OK_STATUSES:
            return None
        return res

    def _lost(self, session: str | None, res: CallResult) -> None:
        """The server did not know ``session``: forget it (once), so the next call opens another."""
        if session is None or self.session != session:
            return  # another attempt already noticed; maybe a new session is open already
        self.session = None
        self._handshaken = False
        if self._history is not None:
            self._history.emit(
                SessionLost(session=session_digest(session), status=res.status, client=self.name)
            )

    async def end_session(self) -> None:
        """DELETE the session, as a 2025 client should when done (best effort, never waits long)."""
        if self.session is None:
            return
        request = self._framing.delete(version=self.protocol, session=self.session)
        await self.send(request, None, timeout=1.0)
        self.session = None
        self._handshaken = False

    # -- one exchange
    async def send(
        self, request: bytes, request_id: int | None, *, timeout: float, session: str | None = None
    ) -> CallResult:
        """Send prepared request bytes and classify what comes back (``session``: the one they carry).

        With OAuth, a token near its expiry is refreshed first, and a refusal the flow can answer (a
        401, a 403 ``insufficient_scope``) is answered and the request sent again with the new token,
        up to :data:`AUTH_ROUNDS` times: the server refused it before running it, so this is no retry
        of the call. A refusal the flow cannot answer is the attempt's ``auth_error``.
        """
        auth = self._auth
        if auth is not None and auth.stale():
            await auth.authorize(None, sent_with=auth.header, version=self._version())
            request = self._framing.reauthorized(request)
        sent_with = None if auth is None else auth.header
        reads = answers if self._host is None else self._reader(session)
        raw = await self._pool.exchange(request, timeout=timeout, answers=reads)
        res = classify(raw, request_id, in_session=session is not None)
        rounds = 0
        while res.outcome is Outcome.AUTH_ERROR and auth is not None and rounds < AUTH_ROUNDS:
            rounds += 1
            assert res.status is not None
            challenge = Challenge(res.status, res.challenge)
            if not await auth.authorize(challenge, sent_with=sent_with, version=self._version()):
                if auth.failure is not None:
                    res.message = clip(f"{res.message or ''} (OAuth: {auth.failure})".strip())
                break
            request = self._framing.reauthorized(request)
            sent_with = auth.header
            raw = await self._pool.exchange(request, timeout=timeout, answers=reads)
            res = classify(raw, request_id, in_session=session is not None)
        return res

    def _version(self) -> str | None:
        """The ``MCP-Protocol-Version`` an OAuth flow is told (whether to send ``resource``)."""
        return None if self.modern else self.protocol

    def _reader(self, session: str | None) -> Callable[[bytes], bool]:
        """The stream reader of a client that answers server requests: each event that is a request
        is answered in a POST of its own while the stream goes on; the rest as :func:`answers`. One per
        session, made at its first exchange."""
        made = self._readers.get(session)
        if made is not None:
            return made
        if len(self._readers) > 1:  # sessions ended: their readers go (a run may open thousands)
            self._readers.clear()

        def reads(event: bytes) -> bool:
            if answers(event):
                return True
            try:
                msg = orjson.loads(event)
            except orjson.JSONDecodeError:
                return False
            if isinstance(msg, dict) and isinstance(msg.get("method"), str) and "id" in msg:
                task = asyncio.ensure_future(self._reply(msg, session))
                self._replies.add(task)
                task.add_done_callback(self._replies.discard)
            return False

        self._readers[session] = reads
        return reads

    async def _listen(self, session: str | None) -> None:
        """Open the session's own event stream (a GET without ``Last-Event-ID``), where a server sends
        the requests that belong to no call, as the SDK clients do; it lasts as long as the client
        (a server without one answers 405, and nothing is lost). Returns once its head arrived: a
        request the server sends before the stream is open has nowhere to go."""
        request = self._framing.head("GET", version=self.protocol, session=session)
        headed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reads = self._reader(session)
        listening = asyncio.ensure_future(
            self._pool.exchange(request, timeout=LISTEN_TIMEOUT_S, answers=reads, headed=headed)
        )
        self._replies.add(listening)
        listening.add_done_callback(self._replies.discard)
        waits: list[asyncio.Future[Any]] = [headed, listening]
        await asyncio.wait(waits, timeout=LISTEN_WAIT_S, return_when=asyncio.FIRST_COMPLETED)

    async def _reply(self, msg: dict[str, Any], session: str | None) -> None:
        assert self._host is not None
        params = msg.get("params")
        member = self._host.member(msg["method"], params if isinstance(params, dict) else {})
        request = self._framing.reply(msg["id"], member, version=self.protocol, session=session)
        await self.send(request, None, timeout=REPLY_TIMEOUT_S, session=session)

    async def aclose(self) -> None:
        for task in list(self._replies):
            task.cancel()
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._pool.close()

    async def __aenter__(self) -> McpHttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
