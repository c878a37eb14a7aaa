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

HTTP/1.1 is parsed with h11 (the sans-I/O parser httpx's own stack uses); calls are forwarded with
httpx2 (the SDK's fork of httpx, already a dependency for OAuth), which never reads the proxy
variables meant for the target (``trust_env=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

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
MAX_BODY = 16 * 1024 * 1024
"""A call's body is held in memory to be recorded and forwarded: a larger one is refused (413)."""


class DownstreamProxy(LoopbackServer):
    """A reverse proxy at ``{downstream_url}``, and a forward proxy (``CONNECT`` included) for
    ``HTTPS_PROXY``; both record each call and forward it to the upstream."""

    def __init__(
        self,
        run_dir: Path,
        service: DownstreamService,
        port: int = 0,
        *,
        redact: Callable[[str], str] = str,
        router: Router | None = None,
    ) -> None:
        super().__init__(port)
        self.service = service
        self.redact = redact
        self.path = run_dir / rundir.DOWNSTREAM
        self.ca_path = run_dir / rundir.DOWNSTREAM_CA
        """The proxy's CA, then the system's roots: what the target trusts (``{downstream_ca}``)."""
        self.router = router
        self._ca = trustme.CA(organization_name="mcp-chaos downstream proxy")
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._client: httpx2.AsyncClient | None = None
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
        with contextlib.suppress(h11.ProtocolError, ssl.SSLError):
            await self._calls(reader, writer, generation, tunnel=None)

    async def _calls(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        generation: Connection | None,
        tunnel: str | None,
    ) -> None:
        """Serve the calls of one connection (or of one ``CONNECT`` tunnel to ``tunnel``, after TLS)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            request = await _next(conn, reader)
            if not isinstance(request, h11.Request):
                return
            body = bytearray()
            while True:
                event = await _next(conn, reader)
                if isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_BODY:
                        await _answer(conn, writer, 413, b"request body too large for the downstream proxy")
                        return
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:
                    return
            if request.method == b"CONNECT" and tunnel is None:
                host = request.target.decode("ascii", "replace").rsplit(":", 1)[0].strip("[]")
                try:
                    context = self._context(host)
                except ValueError:  # no certificate can name it (UnicodeError is one)
                    await _answer(conn, writer, 400, b"CONNECT to a host no certificate can name")
                    return
                await _send(conn, writer, h11.Response(status_code=200, headers=[]))
                await writer.start_tls(context)
                await self._calls(reader, writer, generation, tunnel=host)
                return
            if self.router is not None and self.router.cut(generation):
                return  # a call from a pod killed at a crash point: it never reached the upstream
            status, headers, content, held = await self._forward(request, bytes(body), tunnel, generation)
            if held:
                await reader.read()  # held: no answer; the pod dies and its connection with it
                return
            bodiless = request.method == b"HEAD" or status in (204, 304) or status < 200
            if not bodiless:
                headers.append((b"content-length", str(len(content)).encode()))
            await _send(conn, writer, h11.Response(status_code=status, headers=headers))
            if not bodiless:
                await _send(conn, writer, h11.Data(data=content))
            await _send(conn, writer, h11.EndOfMessage())
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()

    async def _forward(
        self, request: h11.Request, body: bytes, tunnel: str | None, connection: Connection | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """Forward one call and record it: the answer's status, headers and body, and whether to hold it."""
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("latin-1")
        path = target
        if "://" in target:  # absolute-form: a plain-HTTP call through HTTP_PROXY names its host
            absolute = httpx2.URL(target)
            path, tunnel = absolute.raw_path.decode("latin-1"), absolute.host
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_BY_HOP]
        key = next((v.decode("latin-1") for k, v in request.headers if k.lower() == b"idempotency-key"), None)
        markers = sorted({m.decode() for m in MARKER_SHAPE.findall(path.encode("latin-1") + b"\n" + body)})
        if key is None:
            key = _body_key(body)
        if self.service.upstream is None:
            status, answer_headers, content, error = self._stub(key)
        else:
            status, answer_headers, content, error = await self._call(method, path, headers, body)
        replayed = any(k.lower() == REPLAYED and v.lower() == b"true" for k, v in answer_headers)
        line: dict[str, object] = {
            "t": round(time.monotonic() - self._t0, 6),
            "method": method,
            "host": tunnel,
            "path": self.redact(path),
            "status": status,
            "markers": markers,
        }
        if key is not None:
            line["key"] = self.redact(key)
        if replayed:
            line["replay"] = True
        if error is not None:
            line["error"] = error
        if self._file is not None:
            self._file.write(orjson.dumps(line) + b"\n")
        held = False
        if markers and self.router is not None:
            point = Reached(
                Site.DOWNSTREAM,
                PointKind.DOWNSTREAM,
                connection=connection,
                detail={"key": key, "replayed": replayed},
                payload=path.encode("latin-1") + b"\n" + body,
            )
            held = await self.router.reached(point) is not Decision.PASS
        return status, answer_headers, content, held

    def _stub(self, key: str | None) -> tuple[int, list[tuple[bytes, bytes]], bytes, str | None]:
        """The answer of the stub provider (no ``upstream``): a new id, or for a key it has seen the
        first answer again, marked replayed, as a provider that deduplicates by key does."""
        headers = [(b"content-type", b"application/json")]
        if key is not None and key in self._answered:
            return 200, [*headers, (REPLAYED, b"true")], self._answered[key], None
        content = orjson.dumps({"id": f"ds_{next(self._ids)}", "ok": True})
        if key is not None:
            self._answered[key] = content
        return 200, headers, content, None

    async def _call(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, str | None]:
        """The upstream's answer, its framing headers dropped; a 502/504 naming why when there is none."""
        assert self._client is not None
        assert self.service.upstream is not None
        url = self.service.upstream.rstrip("/") + path
        try:
            async with self._client.stream(method, url, headers=headers, content=body) as answer:
                content = b"".join([chunk async for chunk in answer.aiter_raw()])
                kept = [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP_BY_HOP]
                return answer.status_code, kept, content, None
        except httpx2.TimeoutException:
            why = f"the upstream did not answer in {self.service.timeout_s:g} s"
            return 504, [(b"content-type", b"text/plain")], why.encode(), why
        except httpx2.HTTPError as exc:
            why = f"the upstream could not be reached: {type(exc).__name__}: {exc}"
            return 502, [(b"content-type", b"text/plain")], why.encode(), why


def _body_key(body: bytes) -> str | None:
    """The ``idempotency_key`` field of a JSON body, as the effect sink reads it."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = payload.get(KEY_FIELD) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    """h11's next event, reading from the connection as it needs; a closed connection ends it."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await reader.read(65536)
        conn.receive_data(data)
        if not data and conn.their_state is not h11.DONE:
            return h11.ConnectionClosed()


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await writer.drain()


async def _answer(conn: h11.Connection, writer: asyncio.StreamWriter, status: int, text: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]
    await _send(conn, writer, h11.Response(status_code=status, headers=[*headers, (b"connection", b"close")]))
    await _send(conn, writer, h11.Data(data=text))
    await _send(conn, writer, h11.EndOfMessage())


def ca_path_for(runtime: str, host_path: Path) -> str:
    """``{downstream_ca}`` as the target sees it: the run's file, or its mount inside a container."""
    return CA_IN_CONTAINER if runtime == "docker" else os.fspath(host_path.resolve())
