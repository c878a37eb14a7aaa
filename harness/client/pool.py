"""Keep-alive HTTP/1.1 connections to one host: request bytes in, a :class:`RawResponse` out.

The transport half of the HTTP client, cut where httpx cuts (``_transports/base.py``):
this module knows bytes and HTTP, the protocol layer above it knows MCP. It is
the driver's hot path, so it is built on asyncio protocols and llhttp's C parser
(``httptools``, what uvicorn uses) rather than a general-purpose client.

An exchange never raises for what the network or the server did: how it ended
(complete, closed early, timed out, refused, not HTTP) is data in the
:class:`RawResponse` (``client/raw.py``), which the protocol layer classifies. Only two things come
down from that layer: the names of the response headers to keep, and a predicate
saying which event of an event stream carries the answer (after it, the stream
is read only for a grace: that decision must be taken while reading). An event
stream (``text/event-stream``) is a body format, so the transport splits it into
events; it never reads them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import cast

import httptools

from harness.client.messages import SseParser
from harness.client.raw import End, RawResponse

STREAM_END_GRACE_S = 0.05
"""How long an event stream may stay open after the event that carries the answer."""


_COMPLETE = End.COMPLETE
"""Looked up once: an enum member costs a descriptor call per lookup on Python 3.11."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection carrying one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, keep: tuple[bytes, ...]) -> None:
        self.loop = loop
        self._keep = keep
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.raw = RawResponse()
        self._waiter: asyncio.Future[None] | None = None
        self._answers: Callable[[bytes], bool] | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._sse: SseParser | None = None
        self._chunks: list[bytes] = []
        self._ctype = b""
        self._keep_alive = True
        self.headed: asyncio.Future[None] | None = None
        """Set by a caller that waits for the response's head (an event stream held open)."""
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        """What times the exchange in flight out (:meth:`arm`): kept across exchanges, not made anew."""

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports are not asyncio.Transport subclasses.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.raw.received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # Bytes that are not HTTP spoil the exchange, even one whose response looked complete.
            self.abort()
            self.settle(End.BAD_HTTP, f"bad HTTP from server: {exc}")
            self._wake()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._end(End.CLOSED)

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._ctype = value.lower()
        elif name in self._keep:
            self.raw.headers[name] = value

    def on_headers_complete(self) -> None:
        self.raw.status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        if self._ctype.startswith(b"text/event-stream"):
            self.raw.events = []
            self._sse = SseParser()
        if self.headed is not None:
            if not self.headed.done():
                self.headed.set_result(None)
            self.headed = None

    def on_body(self, body: bytes) -> None:
        if self._sse is None:
            self._chunks.append(body)
            return
        events = self.raw.events
        assert events is not None
        for data in self._sse.feed(body):
            events.append(data)
            # A compliant server ends the stream right after its answer; one that does not must
            # not hold the attempt (nor widen the window a kill counts in): after a moment the
            # answer is taken and the connection dropped.
            if self._grace is None and self._answers is not None and self._answers(data):
                self._grace = self.loop.call_later(STREAM_END_GRACE_S, self._end, End.STOPPED)

    def on_message_complete(self) -> None:
        self._end(_COMPLETE)

    # -- exchange
    def send(self, request: bytes, answers: Callable[[bytes], bool] | None) -> asyncio.Future[None]:
        """Write one request; the future is done when the exchange has ended (see :attr:`raw`)."""
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        self.raw = RawResponse()
        self._answers = answers
        self._sse = None
        self._chunks = []
        self._ctype = b""
        self._keep_alive = True
        self._waiter = waiter = self.loop.create_future()
        if self.lost:
            waiter.set_result(None)
        else:
            assert self.transport is not None
            self.transport.write(request)
        return waiter

    def settle(self, end: End, error: str | None = None) -> RawResponse:
        """Fill in how the exchange ended and what its body was; the exchange's :class:`RawResponse`."""
        raw = self.raw
        raw.end = end
        raw.error = error
        if self._sse is not None:
            raw.last_event_id = self._sse.last_id
            raw.retry_ms = self._sse.retry_ms
        elif self._chunks:
            raw.body = b"".join(self._chunks)
        return raw

    def _end(self, end: End) -> None:
        """The exchange in flight ended (the first way it did counts): settle it, wake the caller."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self.settle(end)
            waiter.set_result(None)

    def arm(self, timeout: float) -> None:
        """Time the exchange in flight out after ``timeout`` seconds (it ends as a timeout).

        A loop timer costs more to make and cancel than a call on a kept-alive connection costs the
        rest of the pool, so a connection keeps one: each exchange moves the deadline, and the timer,
        when it fires, ends the exchange if its deadline has passed, or waits for it, or (between
        exchanges) stops. Only a deadline earlier than the timer's makes a new one."""
        loop = self.loop
        deadline = loop.time() + timeout
        self._deadline = deadline
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._due)

    def _due(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # between exchanges: the next one arms it again
        if self.loop.time() >= self._deadline:
            self.expire()
        else:
            self._timer = self.loop.call_at(self._deadline, self._due)

    def expire(self) -> None:
        """The exchange's time is up: it ends as a timeout (the first way it ended counts)."""
        self._end(End.TIMEOUT)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def reusable(self) -> bool:
        return not self.lost and self.raw.end is _COMPLETE and self._keep_alive

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self.lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Pool:
    """Keep-alive connections to one host and port; any number of exchanges at once, one per connection."""

    def __init__(self, host: str, port: int, *, keep_headers: Iterable[bytes] = ()) -> None:
        self.host = host
        self.port = port
        # A tuple: a header name from the parser is a new bytes object, whose hash a set would compute.
        self._keep = tuple(name.lower() for name in keep_headers)
        self._idle: deque[Connection] = deque()
        self._open: set[Connection] = set()

    @property
    def connections(self) -> int:
        """Connections open now, idle or busy."""
        return len(self._open)

    async def exchange(
        self,
        request: bytes,
        *,
        timeout: float,
        answers: Callable[[bytes], bool] | None = None,
        headed: asyncio.Future[None] | None = None,
    ) -> RawResponse:
        """Send prepared request bytes on an idle or new connection and read what comes back.

        The timeout bounds the whole exchange, connecting included; on a timeout the
        connection is closed. ``answers`` says whether an event of a stream carries
        the answer, after which the stream is read only for :data:`STREAM_END_GRACE_S`.
        ``headed``: done once the response's head has arrived (a stream that stays open is
        then known to be open).
        """
        conn = self._idle_connection()
        if conn is not None:
            return await self._exchange_on(conn, request, timeout=timeout, answers=answers, headed=headed)
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connect()
                conn.headed = headed
                await conn.send(request, answers)
        except TimeoutError:
            if conn is None:
                return RawResponse(End.CONNECT_TIMEOUT)
            self._drop(conn)
            return conn.settle(End.TIMEOUT)
        except ConnectionRefusedError:
            return RawResponse(End.REFUSED)
        except OSError as exc:
            return RawResponse(End.CONNECT_FAILED, error=str(exc.strerror or exc))
        except BaseException:
            if conn is not None:
                self._drop(conn)
            raise
        if conn.reusable:
            self._idle.append(conn)
        else:
            self._drop(conn)
        return conn.raw

    async def _exchange_on(
        self,
        conn: Connection,
        request: bytes,
        *,
        timeout: float,
        answers: Callable[[bytes], bool] | None,
        headed: asyncio.Future[None] | None,
    ) -> RawResponse:
        """An exchange on a kept-alive connection: nothing to connect, so the timeout is the
        connection's own timer (:meth:`Connection.arm`), not an ``asyncio.timeout`` scope (a third of
        the pool's CPU per call)."""
        conn.headed = headed
        waiter = conn.send(request, answers)
        conn.arm(timeout)
        try:
            await waiter
        except BaseException:
            self._drop(conn)
            raise
        if conn.reusable:
            self._idle.append(conn)
        else:
            self._drop(conn)  # a timeout's connection included: closing it is how a client cancels
        return conn.raw

    def _idle_connection(self) -> Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost:
                return conn
            self._open.discard(conn)
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        keep = self._keep
        _, proto = await loop.create_connection(lambda: Connection(loop, keep), self.host, self.port)
        self._open.add(proto)
        return proto

    def _drop(self, conn: Connection) -> None:
        conn.abort()
        self._open.discard(conn)

    def close(self) -> None:
        """Drop every connection, busy or idle (their exchanges end as closed)."""
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()
