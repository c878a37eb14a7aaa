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
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from harness.client.classify import KEPT_HEADERS, OK_STATUSES, answers, classify
from harness.client.framing import Framing
from harness.client.messages import MODERN, PROTOCOLS, SESSION_VERSIONS, CallResult, ToolCall, refused_version
from harness.client.pool import Pool
from harness.history import EventType, HistoryWriter, Outcome, clip

__all__ = ["DISCOVER_ID", "MODERN", "PROTOCOLS", "SESSION_VERSIONS", "McpHttpClient", "session_digest"]

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
        None: only in a 2025-11-25 session (:attr:`resume`)."""
        self._history = history
        self._framing = Framing(
            self.host, self.port, self.path, headers=headers, key_header=key_header, key_meta=key_meta
        )
        self._pool = Pool(self.host, self.port, keep_headers=KEPT_HEADERS)
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
        """Whether a broken stream is resumed: as asked, else in a 2025-11-25 session (the version the
        server chose), never at 2026-07-28, which removed resumability."""
        if self.protocol == MODERN:
            return False
        return self._resume_asked if self._resume_asked is not None else self.protocol == "2025-11-25"

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
        return await self.send(request, request_id, timeout=timeout, session=self.session)

    async def _resume(
        self,
        broken: CallResult,
        request_id: int,
        session: str | None,
        *,
        deadline: float,
        traceparent: str | None,
    ) -> CallResult:
        """Ask for the rest of a broken stream (2025 resumability), after the wait the stream's ``retry``
        field asked for (within the attempt's deadline); the broken result if that fails."""
        assert broken.event_id is not None
        request = self._framing.resume(
            broken.event_id, version=self.protocol, session=session, traceparent=traceparent
        )
        loop = asyncio.get_running_loop()
        if broken.retry_ms:
            await asyncio.sleep(min(broken.retry_ms / 1000, max(0.0, deadline - loop.time() - 0.001)))
        left = max(0.001, deadline - loop.time())
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
                EventType.SESSION_LOST, session=session_digest(session), status=res.status, client=self.name
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
        """Send prepared request bytes and classify what comes back (``session``: the one they carry)."""
        raw = await self._pool.exchange(request, timeout=timeout, answers=answers)
        return classify(raw, request_id, in_session=session is not None)

    async def aclose(self) -> None:
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._pool.close()

    async def __aenter__(self) -> McpHttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
