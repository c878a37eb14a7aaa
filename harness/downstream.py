"""The downstream proxy: records and holds the calls a target makes to an HTTP API it depends on.

Most servers with a side effect beyond their own store call an API for it (a payment provider,
a mail service, a ticket tracker). The effect sink (:mod:`harness.sink`) stands in for such an
API; this proxy goes in front of the real one, or the user's fake of it, so the server runs
unchanged (``services.downstream``):

* ``{downstream_url}`` (``http://127.0.0.1:PORT``) is a reverse proxy: a call to
  ``{downstream_url}/v1/charges`` goes to ``upstream + /v1/charges``.
* For a server whose ``https://`` host is fixed in its code, the target is given ``HTTPS_PROXY``
  (and ``HTTP_PROXY``) pointing here. The proxy accepts the ``CONNECT``, answers TLS for that host
  with a certificate of its own CA, made for this run (trustme), and forwards the calls inside to
  ``upstream``. The CA is written into the run directory (``{downstream_ca}``, with the system's
  roots after it, so other TLS calls still verify) and handed to the target as ``SSL_CERT_FILE``,
  ``REQUESTS_CA_BUNDLE`` and ``NODE_EXTRA_CA_CERTS``: no TLS relay for the user to write.

Each call is forwarded, and once the upstream has answered, one line is written to
``downstream.jsonl`` (method, host, path, the upstream's status, the run's markers found in the
path and body, the idempotency key, whether the upstream said it replayed an earlier answer with
``Idempotent-Replayed: true``, as Stripe does). Only then is the answer passed on, so the line
exists for every answer the target saw. The auditor counts effects from those lines
(``audit.effects.downstream``). Each call that carried a marker is the ``downstream`` point of the run's
decision router (:mod:`harness.crashpoints.router`); with crash points it may hold the answer of a call
that carried a marker (the ``downstream`` point: the upstream did the work, the server never hears).
A request the proxy refuses (not HTTP/1.1 it can parse, a target that is not a path, too large, too
slow) is answered and recorded as well, with ``error``; where the target was told something other
than the upstream's status (an answer too large or too slow), ``status`` stays the upstream's and
``answered`` says what the target got.

HTTP/1.1 is parsed with h11 (the sans-I/O parser httpx's own stack uses); calls are forwarded with
httpx2 (the SDK's fork of httpx, already a dependency for OAuth), which never reads the proxy
variables meant for the target (``trust_env=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import h11
import httpx2
import orjson
import trustme

from harness import rundir
from harness.crashpoints.decisions import Connection, Decision, Reached, Site
from harness.crashpoints.points import PointKind
from harness.crashpoints.router import Router
from harness.loopback import LoopbackServer
from harness.scenario import DownstreamService
from harness.sink import KEY_FIELD
from harness.workload import MARKER_SHAPE

CA_IN_CONTAINER = "/run/mcp-chaos/downstream-ca.pem"
"""Where a container finds ``{downstream_ca}`` (the file is mounted read-only)."""
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
"""Headers of one hop (RFC 9110 7.6.1), and the framing this proxy sets itself."""
REPLAYED = b"idempotent-replayed"
"""The header a provider (Stripe) sets on an answer it replayed for an idempotency key it had seen."""
MAX_HEAD = 64 * 1024
"""A request's line and headers larger than this are refused (431)."""
MAX_BODY = 16 * 1024 * 1024
"""A call's body is held in memory to be recorded and forwarded: a larger one is refused (413)."""
MAX_ANSWER = 16 * 1024 * 1024
"""An upstream's answer is held whole, so that its line is written before the target sees any of it (the
hold point needs that order): a larger one is cut off there and the target told 502."""
REQUEST_TIMEOUT_S = 30.0
"""The header timeout, and the body's: once a request's first byte has come, the rest must come within
this (else 408), and its answer be taken within it (else the connection is dropped); a tunnel's TLS
handshake too."""
IDLE_TIMEOUT_S = 60.0
"""A client connection with no request begun (before its first, between two) is closed after this: longer
than the keep-alive of httpx's and Node's pools (5 s), so that a client closes its idle connections first."""
LINGER_S = 2.0
"""After a refusal, how long the proxy reads (and drops) what the client still sends before it closes: a
close with bytes unread resets the connection, and a reset drops the answer the client had not yet read."""
_T = TypeVar("_T")


class _Refusal(Exception):
    """A request the proxy answers itself (``status``, saying ``why``) and records, then closes on."""

    def __init__(self, status: int, why: str, request: h11.Request | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.why = why
        self.request = request


@dataclass
class _Answer:
    """What the target is answered. ``said``: the upstream's status where the target is told otherwise
    (an answer too large, too slow, broken off, or one HTTP/1.1 cannot carry): the upstream did the
    work, so the record keeps what it said, and the audit counts it."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes
    replayed: bool = False
    error: str | None = None
    said: int | None = None


class _Plain:
    """A client connection's bytes, as TCP brings them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.raw = self
        self._reader = reader
        self._writer = writer

    async def read(self) -> bytes:
        return await self._reader.read(65536)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close_write(self) -> None:
        if self._writer.can_write_eof():
            with contextlib.suppress(OSError):
                self._writer.write_eof()


class _Tls:
    """The bytes inside a ``CONNECT`` tunnel: TLS over memory buffers, fed from the connection here.

    ``StreamWriter.start_tls`` reads only what arrives after it is called: a client that sends its
    ClientHello in the same write as its ``CONNECT`` (h11 has read it with the head) would wait for
    an answer forever. Here TLS starts from those bytes.
    """

    def __init__(self, raw: _Plain, context: ssl.SSLContext, early: bytes) -> None:
        self.raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._incoming.write(early)

    async def handshake(self) -> None:
        try:
            await self._pump(self._tls.do_handshake)
        except ssl.SSLError:
            await self._flush()  # the alert that says why, for the client to read
            raise

    async def read(self) -> bytes:
        try:
            return await self._pump(lambda: self._tls.read(65536))
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""  # a close_notify, or the connection closed without one

    async def write(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def close_write(self) -> None:
        with contextlib.suppress(ssl.SSLError):  # SSLWantReadError: the client's close_notify is not here
            self._tls.unwrap()
        await self._flush()
        await self.raw.close_write()

    async def _pump(self, step: Callable[[], _T]) -> _T:
        """One TLS step, reading from the connection while it wants to and sending what it wrote."""
        while True:
            try:
                done = step()
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self.raw.read()
                if not data:
                    raise ssl.SSLEOFError("the client closed the connection inside TLS") from None
                self._incoming.write(data)
            else:
                await self._flush()
                return done

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await self.raw.write(data)


_Stream = _Plain | _Tls


class DownstreamProxy(LoopbackServer):
    """A reverse proxy at ``{downstream_url}``, and a forward proxy (``CONNECT`` included) for
    ``HTTPS_PROXY``; both record each call and forward it to the upstream.

    As strict as a reverse proxy in front of a real API: a call goes to ``upstream`` and nowhere
    else; every request is answered (a refusal too) and recorded, each wait is bounded (the
    upstream's whole exchange by ``timeout_s``, a client's request by ``request_timeout_s``, an idle
    connection by ``idle_timeout_s``), and so is every answer held (``max_answer``).
    """

    def __init__(
        self,
        run_dir: Path,
        service: DownstreamService,
        port: int = 0,
        *,
        redact: Callable[[str], str] = str,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_answer: int = MAX_ANSWER,
        router: Router | None = None,
    ) -> None:
        super().__init__(port)
        self.service = service
        self.redact = redact
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_answer = max_answer
        self.path = run_dir / rundir.DOWNSTREAM
        self.ca_path = run_dir / rundir.DOWNSTREAM_CA
        """The proxy's CA, then the system's roots: what the target trusts (``{downstream_ca}``)."""
        self.router = router
        self._ca = trustme.CA(organization_name="mcp-chaos downstream proxy")
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._client: httpx2.AsyncClient | None = None
        self._upstream = None if service.upstream is None else httpx2.URL(service.upstream)
        self._file: BinaryIO | None = None
        self._ids = itertools.count(1)
        self._answered: dict[str, bytes] = {}
        self._t0 = time.monotonic()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_ca(self) -> Path:
        """Write ``{downstream_ca}``: this run's CA and, after it, the roots the system trusts."""
        roots = ssl.get_default_verify_paths().cafile
        system = b""
        if roots is not None:
            with contextlib.suppress(OSError):
                system = Path(roots).read_bytes()
        self.ca_path.write_bytes(self._ca.cert_pem.bytes() + b"\n" + system)
        return self.ca_path

    def target_env(self, ca_file: str) -> dict[str, str]:
        """What the target is handed so its client finds the proxy and trusts its CA (``proxy_env``);
        loopback stays direct, so ``{downstream_url}``, ``{sink_url}`` and the harness's PostgreSQL
        are reached as before."""
        if not self.service.proxy_env:
            return {}
        proxy, direct = self.url, "127.0.0.1,localhost,::1"
        return {
            "HTTPS_PROXY": proxy,
            "https_proxy": proxy,
            "HTTP_PROXY": proxy,
            "http_proxy": proxy,
            "NO_PROXY": direct,
            "no_proxy": direct,
            "SSL_CERT_FILE": ca_file,
            "REQUESTS_CA_BUNDLE": ca_file,
            "NODE_EXTRA_CA_CERTS": ca_file,
        }

    async def start(self, port: int | None = None) -> int:
        verify: ssl.SSLContext | bool = True
        if self.service.ca is not None:
            verify = ssl.create_default_context(cafile=self.service.ca)
        self._client = httpx2.AsyncClient(
            verify=verify, trust_env=False, timeout=self.service.timeout_s, follow_redirects=False
        )
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        return await super().start(port)

    async def close(self) -> None:
        await super().close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _context(self, host: str) -> ssl.SSLContext:
        """A server context with a certificate for ``host`` from this run's CA (made once per host)."""
        context = self._contexts.get(host)
        if context is None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ca.issue_cert(host).configure_cert(context)
            context.set_alpn_protocols(["http/1.1"])
            self._contexts[host] = context
        return context

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        generation = None if self.router is None else self.router.connection()
        # What ends one connection, and only it: TLS the client does not speak, an answer it does not
        # take in time (every request was answered or refused before).
        with contextlib.suppress(ssl.SSLError, TimeoutError):
            await self._calls(_Plain(reader, writer), generation, tunnel=None)

    async def _calls(self, stream: _Stream, generation: Connection | None, tunnel: str | None) -> None:
        """Serve the calls of one connection (or of one ``CONNECT`` tunnel to ``tunnel``, after TLS)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while await self._begun(conn, stream):
            try:
                if not await self._call_one(conn, stream, generation, tunnel):
                    return
            except _Refusal as refusal:
                await self._refuse(conn, stream, tunnel, refusal)
                return
            if conn.our_state is h11.MUST_CLOSE:  # HTTP/1.0, or Connection: close
                await _linger(stream)
                return
            conn.start_next_cycle()

    async def _call_one(
        self, conn: h11.Connection, stream: _Stream, generation: Connection | None, tunnel: str | None
    ) -> bool:
        """Serve the request begun; whether it was answered (False: the connection ends here)."""
        request, body = await self._receive(conn, stream)
        if self.router is not None and self.router.cut(generation):
            return False  # a call from a pod killed at a crash point: it never reached the upstream
        if request.method == b"CONNECT" and tunnel is None:
            await self._tunnel(conn, stream, generation, request)
            return False
        path, host = _target(request, tunnel)
        url = self._upstream_url(request, path)
        answer, held = await self._forward(request, path, host, url, body, generation)
        if held:
            while await stream.raw.read():
                pass  # held: no answer; the pod dies and its connection with it
            return False
        async with asyncio.timeout(self.request_timeout_s):
            await _reply(conn, stream, request, answer)
        return True

    async def _begun(self, conn: h11.Connection, stream: _Stream) -> bool:
        """Whether a next request has begun: its first bytes are here, or come within the idle timeout
        (False: the client closed, or left the connection idle for too long)."""
        data, closed = conn.trailing_data
        if data or closed:
            return bool(data)
        try:
            async with asyncio.timeout(self.idle_timeout_s):
                data = await stream.read()
        except TimeoutError:
            return False
        conn.receive_data(data)
        return bool(data)

    async def _receive(self, conn: h11.Connection, stream: _Stream) -> tuple[h11.Request, bytes]:
        """The request begun and its body, all within the request timeout; refused when it is not HTTP/1.1,
        is too large, or is not all there in time."""
        request = None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                event = await _next(conn, stream)
                if not isinstance(event, h11.Request):
                    raise _Refusal(400, "not an HTTP/1.1 request")
                request = event
                return request, await _body(conn, stream, request)
        except TimeoutError:
            why = f"the request did not arrive within {self.request_timeout_s:g} s of its first byte"
            raise _Refusal(408, why, request) from None
        except h11.RemoteProtocolError as exc:
            raise _Refusal(exc.error_status_hint, _malformed(exc), request) from None

    def _connect(self, request: h11.Request) -> tuple[str, ssl.SSLContext]:
        """The host a ``CONNECT`` names and a context with a certificate for it; refused (400) when its
        target is not ``host:port``, or no certificate can name the host."""
        host, colon, port = request.target.decode("ascii", "replace").rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not (colon and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise _Refusal(400, "a CONNECT must name host:port", request)
        try:
            return host, self._context(host)
        except ValueError:  # no certificate can name it (UnicodeError is one)
            raise _Refusal(400, "CONNECT to a host no certificate can name", request) from None

    async def _tunnel(
        self, conn: h11.Connection, stream: _Stream, generation: Connection | None, request: h11.Request
    ) -> None:
        """Open the tunnel a ``CONNECT`` asks for and serve the calls inside it, over TLS for its host.
        TLS starts from what the client sent after its head (a ClientHello in the same write: h11
        holds it already)."""
        host, context = self._connect(request)
        await _send(conn, stream, h11.Response(status_code=200, headers=[]))
        tls = _Tls(stream.raw, context, conn.trailing_data[0])
        try:
            async with asyncio.timeout(self.request_timeout_s):
                await tls.handshake()
        except (ssl.SSLError, TimeoutError):  # not TLS, a CA it does not trust, or nothing in time
            await _linger(stream)
            return
        await self._calls(tls, generation, tunnel=host)

    def _upstream_url(self, request: h11.Request, path: str) -> httpx2.URL | None:
        """Where a call goes: ``upstream`` with the call's path after its own. Only the path is the
        call's, never the host (None: no upstream, the stub answers)."""
        if self._upstream is None:
            return None
        base = self._upstream.raw_path.partition(b"?")[0].rstrip(b"/")
        try:
            return self._upstream.copy_with(raw_path=base + path.encode("latin-1"))
        except httpx2.InvalidURL:
            raise _Refusal(400, "the request's path is not one a URL can carry", request) from None

    async def _refuse(
        self, conn: h11.Connection, stream: _Stream, tunnel: str | None, refusal: _Refusal
    ) -> None:
        """Record a request the proxy answers itself, answer it, and close once the client has read it."""
        request = refusal.request
        method = "" if request is None else request.method.decode("ascii", "replace")
        target = "" if request is None else request.target.decode("latin-1")
        self._record(
            {
                "method": method,
                "host": tunnel,
                "path": self.redact(target),
                "status": refusal.status,
                "markers": _markers(target, b""),
                "error": refusal.why,
            }
        )
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            async with asyncio.timeout(self.request_timeout_s):
                await _answer(conn, stream, refusal.status, refusal.why, bodiless=method == "HEAD")
        await _linger(stream)

    async def _forward(
        self,
        request: h11.Request,
        path: str,
        host: str | None,
        url: httpx2.URL | None,
        body: bytes,
        connection: Connection | None,
    ) -> tuple[_Answer, bool]:
        """Forward one call and record it: its answer, and whether to hold it."""
        method = request.method.decode("ascii", "replace")
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_BY_HOP]
        key = next((v.decode("latin-1") for k, v in request.headers if k.lower() == b"idempotency-key"), None)
        markers = _markers(path, body)
        if key is None:
            key = _body_key(body)
        if url is None:
            answer = self._stub(key)
        else:
            answer = await self._call(method, url, headers, body)
        line: dict[str, object] = {
            "method": method,
            "host": host,
            "path": self.redact(path),
            "status": answer.status if answer.said is None else answer.said,
            "markers": markers,
        }
        if key is not None:
            line["key"] = self.redact(key)
        if answer.replayed:
            line["replay"] = True
        if answer.said is not None:
            line["answered"] = answer.status
        if answer.error is not None:
            line["error"] = self.redact(answer.error)  # it may quote what the upstream said
        self._record(line)
        held = False
        if markers and self.router is not None:
            point = Reached(
                Site.DOWNSTREAM,
                PointKind.DOWNSTREAM,
                connection=connection,
                detail={"key": key, "replayed": answer.replayed},
                payload=path.encode("latin-1", "replace") + b"\n" + body,
            )
            held = await self.router.reached(point) is not Decision.PASS
        return answer, held

    def _record(self, line: dict[str, object]) -> None:
        """One line of ``downstream.jsonl``, written before the target sees the answer it records."""
        if self._file is not None:
            stamped = {"t": round(time.monotonic() - self._t0, 6), **line}
            self._file.write(orjson.dumps(stamped) + b"\n")

    def _stub(self, key: str | None) -> _Answer:
        """The answer of the stub provider (no ``upstream``): a new id, or for a key it has seen the
        first answer again, marked replayed, as a provider that deduplicates by key does."""
        headers = [(b"content-type", b"application/json")]
        if key is not None and key in self._answered:
            return _Answer(200, [*headers, (REPLAYED, b"true")], self._answered[key], replayed=True)
        content = orjson.dumps({"id": f"ds_{next(self._ids)}", "ok": True})
        if key is not None:
            self._answered[key] = content
        return _Answer(200, headers, content)

    async def _call(
        self, method: str, url: httpx2.URL, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> _Answer:
        """The upstream's answer, its framing headers dropped, read whole within ``timeout_s`` in all (an
        upstream that trickles its answer a byte at a time included); a 502/504 naming why when there
        is none to pass on."""
        assert self._client is not None
        timeout, said, replayed = self.service.timeout_s, None, False
        try:
            async with asyncio.timeout(timeout):
                async with self._client.stream(method, url, headers=headers, content=body) as answer:
                    said = answer.status_code
                    kept = [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP_BY_HOP]
                    replayed = any(k.lower() == REPLAYED and v.lower() == b"true" for k, v in kept)
                    content = await _bounded(answer, self.max_answer)
        except (TimeoutError, httpx2.TimeoutException):
            what = "answer" if said is None else "finish its answer"
            return _failed(504, f"the upstream did not {what} in {timeout:g} s", said, replayed)
        except httpx2.HTTPError as exc:
            what = "could not be reached" if said is None else "broke off its answer"
            return _failed(502, f"the upstream {what}: {type(exc).__name__}: {exc}", said, replayed)
        if content is None:
            why = f"the upstream's answer is larger than the proxy holds ({self.max_answer} bytes)"
            return _failed(502, why, said, replayed)
        unpassable = _unpassable(said, kept)
        if unpassable is not None:
            return _failed(502, unpassable, said, replayed)
        return _Answer(said, kept, content, replayed=replayed)


def _target(request: h11.Request, tunnel: str | None) -> tuple[str, str | None]:
    """The path a call goes to and the host it named. An origin-form target is the path: it must start
    with ``/``, or ``upstream + target`` could name another host (``@127.0.0.1:P/``); an absolute-form
    one (a plain-HTTP call through ``HTTP_PROXY``) names its host. Anything else is refused (400)."""
    target = request.target.decode("latin-1")
    if target.startswith("/") and "#" not in target:
        return target, tunnel
    if target[:8].lower().startswith(("http://", "https://")):
        try:
            absolute = httpx2.URL(target)
        except httpx2.InvalidURL:
            raise _Refusal(400, "the request's URL is not valid", request) from None
        if absolute.host:
            return absolute.raw_path.decode("latin-1"), absolute.host
    why = "the request's target must be a path starting with / (or an http:// URL, through HTTP_PROXY)"
    raise _Refusal(400, why, request)


async def _body(conn: h11.Connection, stream: _Stream, request: h11.Request) -> bytes:
    """A request's body; refused (413) over ``MAX_BODY``, at once where its Content-Length says so."""
    too_large = f"the request's body is larger than the downstream proxy takes ({MAX_BODY} bytes)"
    declared = next((int(v) for k, v in request.headers if k.lower() == b"content-length"), 0)
    if declared > MAX_BODY:
        raise _Refusal(413, too_large, request)
    body = bytearray()
    while True:
        event = await _next(conn, stream)
        if isinstance(event, h11.EndOfMessage):
            return bytes(body)
        if not isinstance(event, h11.Data):
            raise _Refusal(400, "the request ended before its body", request)
        body += event.data
        if len(body) > MAX_BODY:
            raise _Refusal(413, too_large, request)


async def _bounded(answer: httpx2.Response, limit: int) -> bytes | None:
    """An answer's body as sent (its encoding kept), or None once it is larger than ``limit``: it is
    never read further, nor held whole."""
    content = bytearray()
    async for chunk in answer.aiter_raw():
        content += chunk
        if len(content) > limit:
            return None
    return bytes(content)


def _failed(status: int, why: str, said: int | None, replayed: bool) -> _Answer:
    """The proxy's own answer when the upstream's cannot be passed on, saying why."""
    headers = [(b"content-type", b"text/plain")]
    return _Answer(status, headers, why.encode(), replayed=replayed, error=why, said=said)


def _unpassable(status: int, headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why HTTP/1.1 cannot carry an upstream's answer on (a 1xx as its answer, a header h11 refuses)."""
    try:
        h11.Response(status_code=status, headers=headers)
    except h11.LocalProtocolError as exc:
        return f"the upstream's answer cannot be passed on: {_reason(exc)}"
    return None


def _malformed(exc: h11.RemoteProtocolError) -> str:
    if exc.error_status_hint == 431:
        return f"the request's head is larger than the downstream proxy takes ({MAX_HEAD} bytes)"
    return f"a malformed request: {_reason(exc)}"


def _reason(exc: h11.ProtocolError) -> str:
    """h11's message without the bytes it quotes: a header line it refused may carry a credential."""
    return re.split(r":? (?:bytearray\()?b['\"]", str(exc), maxsplit=1)[0]


def _markers(path: str, body: bytes) -> list[str]:
    return sorted({m.decode() for m in MARKER_SHAPE.findall(path.encode("latin-1") + b"\n" + body)})


def _body_key(body: bytes) -> str | None:
    """The ``idempotency_key`` field of a JSON body, as the effect sink reads it."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = payload.get(KEY_FIELD) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


async def _next(conn: h11.Connection, stream: _Stream) -> object:
    """h11's next event, reading from the connection as it needs (its end is h11's to judge)."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.read())


async def _send(conn: h11.Connection, stream: _Stream, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        await stream.write(data)


async def _reply(conn: h11.Connection, stream: _Stream, request: h11.Request, answer: _Answer) -> None:
    """Pass an answer on, framed by its length (no body for a HEAD, a 204 or a 304)."""
    bodiless = request.method == b"HEAD" or answer.status in (204, 304)
    headers = list(answer.headers)
    if not bodiless:
        headers.append((b"content-length", str(len(answer.content)).encode()))
    await _send(conn, stream, h11.Response(status_code=answer.status, headers=headers))
    if not bodiless:
        await _send(conn, stream, h11.Data(data=answer.content))
    await _send(conn, stream, h11.EndOfMessage())


async def _answer(conn: h11.Connection, stream: _Stream, status: int, why: str, *, bodiless: bool) -> None:
    """The proxy's own answer to a request it refuses, and the connection's last (framed as ``_reply``
    frames one: no body to a HEAD, and then no Content-Length either)."""
    text = why.encode()
    headers = [(b"content-type", b"text/plain"), (b"connection", b"close")]
    if not bodiless:
        headers.append((b"content-length", str(len(text)).encode()))
    await _send(conn, stream, h11.Response(status_code=status, headers=headers))
    if not bodiless:
        await _send(conn, stream, h11.Data(data=text))
    await _send(conn, stream, h11.EndOfMessage())


async def _linger(stream: _Stream) -> None:
    """Close for writing, then read and drop what the client still sends (for up to ``LINGER_S``), so that
    it reads the last answer: closing with its bytes unread would reset the connection, and drop it."""
    await stream.close_write()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER_S):
            while await stream.raw.read():
                pass


def ca_path_for(runtime: str, host_path: Path) -> str:
    """``{downstream_ca}`` as the target sees it: the run's file, or its mount inside a container."""
    return CA_IN_CONTAINER if runtime == "docker" else os.fspath(host_path.resolve())
