"""The fault proxy: breaks MCP exchanges on purpose, at the point in the exchange a rule names.

It sits on 127.0.0.1 between the driver and the pod and forwards real HTTP/1.1
(keep-alive, JSON and SSE responses, chunked bodies) byte for byte; in front of a
server the harness does not start (``target.url``) it connects to that server's
host and names it in each request's ``Host`` header. Unlike a
TCP-level proxy (Toxiproxy) it reads each request, so it knows the exchange's
JSON-RPC method, tool, request id and idempotency key, and from the driver the
intent and attempt the request id belongs to. A seeded rule (see
``StreamFault``) then decides what happens to that one exchange: its kind's
``strike_exchange`` (``sever_request``, ``sever_response``, ``stall``, ``delay``,
each a module of :mod:`harness.faultkinds` that says what it does) acts on it
through :class:`_Struck`, which holds the sockets and parses the response.

A cut is always a dropped connection, never an HTTP error response: that is
what a client sees when a stream breaks. Every fault is recorded in the history,
with the request id it hit, before it acts (so it precedes the attempt's end).
The proxy handles one request at a time per connection (no pipelining, which the
driver never does).

With crash points (``faults.crash_points``) the proxy is a hold site of the
run's decision router (:mod:`harness.crashpoints.router`): it opens the call's
window, reports the ``request`` point when the call is at the server's door
(before it is forwarded: held there, it never arrives) and the ``response`` point
when the server's JSON-RPC answer to it is back, and withholds that answer when
the pod has been killed there, so the client sees the stream break and
none of the answer. For a JSON reply that is the whole response (nothing of it is
relayed before it is complete); for an event stream, the event that carries the
answer and everything after it, while the events before it (progress, a
priming event) are relayed as they come (``AnswerWatch``). A reply that is no
answer to the call (an HTTP error, a stream that ended without one) is told as
what it is and never held.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import httptools
import orjson

from harness import events
from harness.client.messages import SseParser
from harness.crashpoints.decisions import Decision, Reached, Site
from harness.crashpoints.points import PointKind
from harness.crashpoints.router import Router
from harness.faultkinds.registry import kind_of
from harness.history import HistoryWriter
from harness.loopback import LoopbackServer
from harness.scenario import StreamFault

AttemptLookup = Callable[[Any], tuple[int, int] | None]
"""Request id -> (intent, attempt) for requests the driver has in flight."""

_READ = 65536


@dataclass(slots=True)
class Exchange:
    """What the proxy knows of one request."""

    method: str | None
    tool: str | None
    request_id: Any
    key: str | None
    intent: int | None
    attempt: int | None


def _draw(seed: int, rule: int, intent: int | None, attempt: int | None) -> float:
    """A uniform [0, 1) draw fixed by (seed, rule, intent, attempt): the same attempts are hit every run."""
    digest = hashlib.blake2b(f"{seed}:{rule}:{intent}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(slots=True)
class _ClientCut:
    """The client's side of one exchange, which a plan may break while the server goes on with the call:
    under 2026-07-28 the client has then lost the answer and re-issues the call at once (``races``)."""

    writer: asyncio.StreamWriter
    done: bool = False

    def now(self) -> None:
        self.done = True
        self.writer.transport.abort()


def choose_fault(rules: Sequence[StreamFault], seed: int, ex: Exchange) -> int | None:
    """The index of the first rule that matches the exchange and whose seeded draw hits; pure."""
    for index, rule in enumerate(rules):
        if rule.method != ex.method or (rule.tool is not None and rule.tool != ex.tool):
            continue
        if rule.intent is not None and rule.intent != ex.intent:
            continue
        if rule.attempt is not None and rule.attempt != ex.attempt:
            continue
        if rule.chance >= 1.0 or _draw(seed, index, ex.intent, ex.attempt) < rule.chance:
            return index
    return None


class _Request:
    """One HTTP request read off the client's connection (httptools callbacks)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.raw = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.body = bytearray()
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True

    def feed(self, data: bytes) -> None:
        self.raw += data
        self.parser.feed_data(data)


_HOST_LINE = re.compile(rb"(?im)^host:[^\r\n]*")


def with_host(raw: bytes | bytearray, host: str) -> bytes:
    """A request's bytes with its ``Host`` header naming ``host`` (the head only; the body is untouched).

    The client addressed the proxy; a server behind a virtual host, or one that checks the header
    against DNS rebinding (the MCP SDKs do), must see its own name."""
    raw = bytes(raw)
    end = raw.find(b"\r\n\r\n")
    head, rest = (raw, b"") if end < 0 else (raw[:end], raw[end:])
    line = b"Host: " + host.encode("latin-1")
    head, found = _HOST_LINE.subn(lambda _: line, head, count=1)
    return head + rest if found else head.replace(b"\r\n", b"\r\n" + line + b"\r\n", 1) + rest


class _Response:
    """Follows a response as it passes: where it ends, and where each SSE event ends.

    A response that is not valid HTTP is still relayed byte for byte, to its end
    of connection: the client must see what the server sent and call it a
    protocol error, not a dropped connection it would retry.
    """

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.complete = False
        self.malformed = False
        self.events = 0
        self._sse: SseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type" and value.lower().startswith(b"text/event-stream"):
            self._sse = SseParser()

    def on_body(self, body: bytes) -> None:
        if self._sse is not None:
            self.events += len(self._sse.feed(body))

    def on_message_complete(self) -> None:
        self.complete = True

    def feed(self, data: bytes) -> bool:
        """Follow ``data``; whether the response is complete now."""
        if self.malformed:
            return False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.malformed = True
        return self.complete


class AnswerWatch:
    """Follows a tool call's HTTP response to find its JSON-RPC answer, and what of it may be relayed.

    Fed the raw bytes as they arrive; ``safe`` is how many of them can reach the
    client without any of the answer: for an event stream, everything up to the end
    of the last event before the one that carries the answer (fed line by line, so
    the boundary is exact whatever the chunking); for any other body, nothing until
    the response is complete. ``found`` turns true once the answer is whole here:
    the event with the call's id and a ``result`` or ``error``, or the complete
    response. ``refused`` then says what the response was if it is no answer to the
    tool (``HTTP 404``, ``no JSON-RPC answer``, ``the stream ended without an answer``).
    """

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id
        self.parser = httptools.HttpResponseParser(self)
        self.raw = bytearray()
        self.safe = 0
        self.found = False
        self.complete = False
        self.malformed = False
        self.status: int | None = None
        self.stream = False
        self._body = bytearray()
        self._line = bytearray()
        self._data: list[bytes] = []
        self._open = False
        """Lines of an event have arrived and its end has not."""
        self._answer: Any = None

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type" and value.lower().startswith(b"text/event-stream"):
            self.stream = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not self.stream:
            self._body += body
            return
        self._line += body
        while (nl := self._line.find(b"\n")) >= 0:
            line = bytes(self._line[:nl]).removesuffix(b"\r")
            del self._line[: nl + 1]
            if line:
                self._open = True
                if line.startswith(b"data:"):
                    self._data.append(line[5:].removeprefix(b" "))
                continue
            if self._data and not self.found and self._is_answer(b"\n".join(self._data)):
                self.found = True
            self._data, self._open = [], False

    def on_message_complete(self) -> None:
        self.complete = True
        if not self.stream and not self.found:
            self.found = True
            self._is_answer(bytes(self._body))

    def _is_answer(self, data: bytes) -> bool:
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if (
            isinstance(message, dict)
            and message.get("id") == self.request_id
            and ("result" in message or "error" in message)
        ):
            self._answer = message
            return True
        return False

    @property
    def refused(self) -> str | None:
        """What the response was if it is no answer to the call, once ``found``; None for an answer."""
        if self.malformed:
            return "a reply that is not HTTP"
        if self.status is not None and not 200 <= self.status < 300:
            return f"HTTP {self.status}"
        if self._answer is None:
            return "the stream ended without an answer" if self.stream else "no JSON-RPC answer to the call"
        return None

    def eof(self) -> None:
        """The server closed its side: a body without a length (ended by the close) is whole now."""
        if self.complete or self.malformed or self.status is None or self.stream:
            return
        self.complete = True
        if not self.found:
            self.found = True
            self._is_answer(bytes(self._body))

    def feed(self, data: bytes) -> None:
        """Follow ``data``, line by line, so that an event's end is found exactly however it was read."""
        if self.malformed:
            self.raw += data
            return
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl + 1
            piece = data[start:end]
            start = end
            self.raw += piece
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserError:
                self.malformed = self.found = True
                self.raw += data[start:]
                return
            if self.stream and not self.found and not self._open and not self._line:
                self.safe = len(self.raw)


def events_cut(response: _Response, data: bytes, after_events: int) -> int | None:
    """Feed ``data`` into ``response`` up to the end of SSE event N; that offset, or None if N is not in it.

    Fed line by line: an event ends with a newline, so its end is found exactly
    even when several events arrive in one read.
    """
    if response.events >= after_events:
        return 0
    start = 0
    while start < len(data):
        nl = data.find(b"\n", start)
        end = len(data) if nl < 0 else nl + 1
        response.feed(data[start:end])
        start = end
        if response.events >= after_events:
            return start
    return None


def cut_offset(raw: bytes, after_bytes: int, after_events: int | None) -> int:
    """How many bytes of a whole raw response to relay before cutting: N bytes, or to the end of event N."""
    if after_events is None:
        return min(after_bytes, len(raw))
    offset = events_cut(_Response(), raw, after_events)
    return len(raw) if offset is None else offset


@dataclass(eq=False)
class FaultProxy(LoopbackServer):
    """An HTTP proxy on 127.0.0.1 that applies the scenario's stream faults to MCP exchanges."""

    upstream_port: int
    rules: Sequence[StreamFault]
    _: KW_ONLY
    seed: int
    history: HistoryWriter
    lookup: AttemptLookup
    default_hold_s: float
    key_meta: str | None = None
    key_header: str | None = None
    router: Router | None = None
    upstream_host: str = "127.0.0.1"
    """Where the server listens: a pod the harness runs is on this machine; a ``target.url`` anywhere."""
    host: str | None = None
    """The ``Host`` header the server expects (``target.url``'s), or None: as the client sent it."""
    injected: int = field(default=0, init=False)
    """Stream faults injected so far (the live status shows it)."""

    def __post_init__(self) -> None:
        super().__init__()
        self.rules = list(self.rules)

    # -- one client connection
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                if upstream is None or upstream[1].is_closing():
                    try:
                        upstream = await asyncio.open_connection(self.upstream_host, self.upstream_port)
                    except OSError:
                        return  # the pod is down: the client sees its connection dropped, as behind a LB
                keep = await self._exchange(request, reader, writer, upstream)
                if not keep:
                    return
        except httptools.HttpParserError:
            return
        finally:
            # The client's side is aborted by LoopbackServer; the server's side goes with it.
            if upstream is not None:
                upstream[1].transport.abort()

    def _outgoing(self, request: _Request) -> bytes | bytearray:
        """The request's bytes as the server gets them."""
        return request.raw if self.host is None else with_host(request.raw, self.host)

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        request = _Request()
        while not request.complete:
            data = await reader.read(_READ)
            if not data:
                return None
            request.feed(data)
        return request

    def _identify(self, request: _Request) -> Exchange:
        method = request.headers.get(b"mcp-method", b"").decode("latin-1") or None
        tool = request.headers.get(b"mcp-name", b"").decode("latin-1") or None
        request_id: Any = None
        key = None
        try:
            body = orjson.loads(bytes(request.body))
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict):
            request_id = body.get("id")
            method = method or body.get("method")
            params = body.get("params")
            if isinstance(params, dict):
                tool = tool or params.get("name")
                arguments = params.get("arguments")
                meta = params.get("_meta")
                if isinstance(arguments, dict) and isinstance(arguments.get("idempotency_key"), str):
                    key = arguments["idempotency_key"]
                elif (
                    self.key_meta is not None
                    and isinstance(meta, dict)
                    and isinstance(meta.get(self.key_meta), str)
                ):
                    key = meta[self.key_meta]
        if key is None and self.key_header is not None:
            raw_key = request.headers.get(self.key_header.lower().encode("latin-1"))
            key = raw_key.decode("latin-1") if raw_key is not None else None
        known = self.lookup(request_id) if isinstance(request_id, int | str) else None
        intent, attempt = known if known is not None else (None, None)
        return Exchange(method, tool, request_id, key, intent, attempt)

    def _record(self, rule: StreamFault, ex: Exchange, **detail: Any) -> None:
        self.injected += 1
        self.history.emit(
            events.StreamFault(
                fault=rule.fault,
                rule=next(i for i, r in enumerate(self.rules) if r is rule),
                id=ex.request_id,
                intent=ex.intent,
                attempt=ex.attempt,
                tool=ex.tool,
                key=ex.key,
                **detail,
            )
        )

    async def _exchange(
        self,
        request: _Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> bool:
        """Carry one exchange; returns whether both connections stay usable for the next one."""
        ex = self._identify(request)
        router = self.router
        if router is None or ex.intent is None or ex.attempt is None:
            return await self._carry(request, reader, writer, upstream, ex)
        cut = _ClientCut(writer)
        # What the server does for it from now on is its attempt's; a plan may break the client's stream.
        router.opened(ex.intent, ex.attempt, sever=cut.now)
        try:
            return await self._carry(request, reader, writer, upstream, ex, cut)
        finally:
            router.closed(ex.intent, ex.attempt)

    async def _carry(
        self,
        request: _Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        ex: Exchange,
        cut: _ClientCut | None = None,
    ) -> bool:
        chosen = choose_fault(self.rules, self.seed, ex)
        up_reader, up_writer = upstream
        router = self.router
        if chosen is None and router is not None and ex.intent is not None and ex.attempt is not None:
            return await self._hooked(request, writer, upstream, router, ex, cut or _ClientCut(writer))
        if chosen is None:
            up_writer.write(self._outgoing(request))
            return await self._relay(up_reader, writer)
        rule = self.rules[chosen]
        strike = kind_of(rule.fault).strike_exchange
        assert strike is not None  # a rule's kind has one (tests/unit/test_fault_kinds.py)
        struck = _Struck(self, rule, ex, request, reader, writer, upstream)
        try:
            return await strike(rule, struck)
        finally:
            struck.close()

    async def _hooked(
        self,
        request: _Request,
        writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        router: Router,
        ex: Exchange,
        cut: _ClientCut,
    ) -> bool:
        """A tool call under crash points: the router hears of its request before it is forwarded, and of
        its answer before any of the answer is relayed (``AnswerWatch``). Once its plan has broken the
        client's stream (``cut``), the server's answer is still read to its end, and goes nowhere."""
        intent, attempt = ex.intent, ex.attempt
        assert intent is not None
        assert attempt is not None
        up_reader, up_writer = upstream
        if not router.serving():
            return False
        door = Reached(Site.PROXY, PointKind.REQUEST, attempt=(intent, attempt))
        if await router.reached(door) is not Decision.PASS:
            return False  # killed at the server's door: the request never reaches it
        up_writer.write(self._outgoing(request))
        watch = AnswerWatch(ex.request_id)
        relayed = 0
        asked = False
        while True:
            data = await up_reader.read(_READ)
            if data:
                watch.feed(data)
            else:
                watch.eof()
            if (watch.found or watch.complete) and not asked:
                asked = True
                back = Reached(
                    Site.PROXY, PointKind.RESPONSE, attempt=(intent, attempt), answer=watch.refused
                )
                if await router.reached(back) is not Decision.PASS:
                    return False  # held: the pod was killed; none of the answer goes out
            safe = len(watch.raw) if asked or not data else watch.safe
            if safe > relayed and not cut.done:
                writer.write(watch.raw[relayed:safe])
                relayed = safe
                await writer.drain()
            if not data:
                return False  # the server's side closed before the response ended
            if watch.complete:
                return not cut.done

    async def _relay(
        self,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        delay_s: float = 0.0,
    ) -> bool:
        """Relay one response as it arrives; False when it did not complete (pod died, client left)."""
        response = _Response()
        first = True
        while not response.complete:
            data = await up_reader.read(_READ)
            if not data:
                return False
            if first and delay_s:
                await asyncio.sleep(delay_s)
            first = False
            response.feed(data)
            writer.write(data)
            await writer.drain()
        return True

    async def _read_whole(self, up_reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        """Read a whole response from the server; (raw bytes, whether it completed)."""
        response = _Response()
        raw = bytearray()
        while not response.complete:
            data = await up_reader.read(_READ)
            if not data:
                return bytes(raw), False
            raw += data
            response.feed(data)
        return bytes(raw), True


@dataclass(slots=True)
class _Struck:
    """One exchange a rule hits, as its kind's strike acts on it (:class:`harness.faultkinds.base.Exchange`):
    the steps are the kind's, the sockets and the parsing the proxy's."""

    proxy: FaultProxy
    rule: StreamFault
    ex: Exchange
    request: _Request
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    response: _Response = field(default_factory=_Response)
    """The response as it passes, for a cut at its Nth event."""
    client_gone: asyncio.Future[bytes] | None = None
    """Reads the client's connection once a strike waits on it: b"" when the client gives up and closes."""

    @property
    def default_hold_s(self) -> float:
        return self.proxy.default_hold_s

    def record(self, **detail: Any) -> None:
        self.proxy._record(self.rule, self.ex, **detail)

    def forward(self) -> None:
        self.upstream[1].write(self.proxy._outgoing(self.request))

    async def relay(self, *, delay_s: float = 0.0) -> bool:
        return await self.proxy._relay(self.upstream[0], self.writer, delay_s=delay_s)

    async def read(self) -> bytes:
        return await self.upstream[0].read(_READ)

    async def read_whole(self) -> tuple[bytes, bool]:
        return await self.proxy._read_whole(self.upstream[0])

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def client_left(self, within_s: float) -> bool:
        if self.client_gone is None:
            self.client_gone = asyncio.ensure_future(self.reader.read(1))
        await asyncio.wait({self.client_gone}, timeout=within_s)
        return self.client_gone.done()

    def cut_offset(self, raw: bytes, after_bytes: int, after_events: int | None) -> int:
        return cut_offset(raw, after_bytes, after_events)

    def events_cut(self, data: bytes, after_events: int) -> int | None:
        return events_cut(self.response, data, after_events)

    def close(self) -> None:
        """Stop reading the client's connection (the next exchange's request is read from it)."""
        if self.client_gone is not None and not self.client_gone.done():
            self.client_gone.cancel()
