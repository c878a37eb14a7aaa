"""The downstream proxy as strict as a reverse proxy in front of a real API: it sends a call to its
upstream and nowhere else, answers and records every request (a refusal too), bounds every wait and
every answer it holds, and starts TLS from a ClientHello sent with the CONNECT.

Everything here is real: the proxy on 127.0.0.1, upstreams written for each case (one that trickles,
one that answers 300 MB), clients on sockets. No sleep stands for synchronisation: a wait bounded by
WAIT_S is how a hang fails a test, and the proxy's own timeouts are made short where a case is about them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import string
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import h11
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.downstream import MAX_ANSWER, DownstreamProxy
from harness.effects.downstream import DownstreamSource
from harness.scenario import DownstreamEffects, DownstreamService

pytestmark = pytest.mark.integration

WAIT_S = 20.0
"""How long a client waits for what the proxy must do: far past every timeout the proxy is given here."""
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
_T = TypeVar("_T")


def records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "downstream.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@contextlib.asynccontextmanager
async def listening(handler: Handler) -> AsyncIterator[int]:
    """A server of the test's own on 127.0.0.1 (an upstream, or a port the proxy must never reach); each
    connection is closed once ``handler`` returns (asyncio leaves that to the handler)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()


@contextlib.asynccontextmanager
async def proxying(
    run_dir: Path, service: DownstreamService, **limits: Any
) -> AsyncIterator[DownstreamProxy]:
    proxy = DownstreamProxy(run_dir, service, **limits)
    proxy.write_ca()
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def exchange(port: int, data: bytes, *, half_close: bool = True) -> bytes:
    """Send ``data`` on a new connection and read until the proxy closes it (within WAIT_S)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and its Content-Length body, as the proxy forwards it."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        ),
        0,
    )
    return head + await reader.readexactly(length)


async def answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An upstream that answers every request 200."""
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nupstream")
            await writer.drain()


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


# -- a call goes to the upstream and nowhere else


@pytest.mark.parametrize(
    "target",
    [
        "@127.0.0.1:{other}/steal",  # upstream + target: http://127.0.0.1:P@127.0.0.1:OTHER/steal
        ":{other}/x",
        "*",
        "http://[::1/x",
        "http:///x",
        "127.0.0.1:{other}",
        "/a#b",
    ],
)
def test_a_target_that_is_not_a_path_is_refused_recorded_and_sent_nowhere(
    tmp_path: Path, target: str
) -> None:
    """Origin-form targets must start with /: anything else gets a 400 that is recorded, and neither the
    upstream nor any other port hears of it (an unparsable URL included, which once escaped unanswered)."""
    reached: list[int] = []

    async def other(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(1)
        await answer_ok(reader, writer)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(0)
        await answer_ok(reader, writer)

    async def run() -> tuple[bytes, bytes]:
        async with listening(other) as other_port, listening(upstream) as upstream_port:
            service = DownstreamService(upstream=f"http://127.0.0.1:{upstream_port}")
            async with proxying(tmp_path, service) as proxy:
                sent = target.format(other=other_port)
                refused = await exchange(proxy.port, f"GET {sent} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert reached == []
                path = await exchange(proxy.port, b"GET /v1/charges HTTP/1.1\r\nHost: x\r\n\r\n")
                return refused, path

    refused, path = asyncio.run(run())
    assert status_of(refused) == 400
    assert status_of(path) == 200  # a path reaches the upstream, and only it
    assert path.endswith(b"upstream")
    assert reached == [0]
    refusal, call = records(tmp_path)
    assert (refusal["method"], refusal["status"], call["path"], call["status"]) == (
        "GET",
        400,
        "/v1/charges",
        200,
    )
    assert refusal["error"]


# -- every wait bounded


async def trickle(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send ``data`` a byte every 0.5 s: a read timeout (between bytes) never fires on it."""
    for byte in data:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.5)


@pytest.mark.parametrize("trickled", ["head", "body"])
def test_an_upstream_that_trickles_its_answer_is_cut_at_timeout_s_in_all(
    tmp_path: Path, trickled: str
) -> None:
    """``timeout_s`` bounds the whole exchange with the upstream, not each read: a 504 with a record. Once the
    upstream has said its status, the record keeps it (it did the work) and says what the target got."""

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await read_request(reader)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
            if trickled == "head":
                await trickle(writer, head)
            writer.write(head)
            await trickle(writer, b"x" * 100)

    async def run() -> bytes:
        async with listening(upstream) as port:
            service = DownstreamService(upstream=f"http://127.0.0.1:{port}", timeout_s=2.0)
            async with proxying(tmp_path, service) as proxy:
                call = b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nab-m0000001"
                return await exchange(proxy.port, call)

    answer = asyncio.run(run())
    assert status_of(answer) == 504
    [line] = records(tmp_path)
    if trickled == "head":
        assert (line["status"], "answered" in line) == (504, False)
        assert line["error"] == "the upstream did not answer in 2 s"
    else:
        assert (line["status"], line["answered"]) == (200, 504)
        assert line["error"] == "the upstream did not finish its answer in 2 s"


def test_requests_that_never_finish_are_answered_408_and_closed(tmp_path: Path) -> None:
    """300 half-sent heads and a body that stops short each end at the request timeout, answered 408 and
    recorded; a TLS tunnel whose handshake never comes is closed at it."""

    async def tunnel_left_silent(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n")
            return await asyncio.wait_for(reader.read(), WAIT_S)
        finally:
            writer.close()

    async def run() -> tuple[list[bytes], bytes, bytes]:
        async with proxying(tmp_path, DownstreamService(), request_timeout_s=0.5) as proxy:
            head = b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Le"
            body = b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}"
            *half, short, tunnel = await asyncio.gather(
                *[exchange(proxy.port, head, half_close=False) for _ in range(300)],
                exchange(proxy.port, body, half_close=False),
                tunnel_left_silent(proxy.port),
            )
            return half, short, tunnel

    half, short, tunnel = asyncio.run(run())
    assert {status_of(answer) for answer in half} == {408}
    assert status_of(short) == 408
    assert tunnel == b"HTTP/1.1 200 \r\n\r\n"  # then closed, no TLS having come
    lines = records(tmp_path)
    assert sorted((r["method"], r["status"]) for r in lines) == [("", 408)] * 300 + [("POST", 408)]


def test_an_idle_connection_is_closed(tmp_path: Path) -> None:
    """A connection that sends nothing, and one kept alive after an answered call, are closed at the idle
    timeout, with nothing recorded but the call."""

    async def run() -> tuple[bytes, bytes]:
        async with proxying(tmp_path, DownstreamService(), idle_timeout_s=1.0) as proxy:
            call = b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
            idle, kept = await asyncio.gather(
                exchange(proxy.port, b"", half_close=False),
                exchange(proxy.port, call, half_close=False),
            )
            return idle, kept

    idle, kept = asyncio.run(run())
    assert idle == b""
    assert status_of(kept) == 200
    assert kept.endswith(b'{"id":"ds_1","ok":true}')  # one answer, then the close
    assert [(r["method"], r["status"]) for r in records(tmp_path)] == [("POST", 200)]


# -- every answer held bounded


def test_an_answer_larger_than_the_proxy_holds_is_cut_off_and_answered_502(tmp_path: Path) -> None:
    """A 300 MB chunked answer is read up to MAX_ANSWER and no further (the upstream's connection is closed
    under it), the target told 502, and the record keeps the upstream's 200: the charge was made."""
    sent = [0]
    finished: asyncio.Future[bool] | None = None

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert finished is not None
        await read_request(reader)
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(300 * 16):  # 300 MB in 64 KiB chunks
                writer.write(chunk)
                await writer.drain()
                sent[0] += len(chunk)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            finished.set_result(False)
        else:
            finished.set_result(True)

    async def run() -> tuple[bytes, bool]:
        nonlocal finished
        finished = asyncio.get_running_loop().create_future()
        async with listening(upstream) as port:
            async with proxying(tmp_path, DownstreamService(upstream=f"http://127.0.0.1:{port}")) as proxy:
                call = b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nab-m0000001"
                answer = await exchange(proxy.port, call)
            return answer, await asyncio.wait_for(finished, WAIT_S)

    answer, whole = asyncio.run(run())
    assert status_of(answer) == 502
    assert not whole
    assert sent[0] < 100 * 2**20  # what the proxy read, and the sockets' buffers: not the 300 MB
    [line] = records(tmp_path)
    assert (line["status"], line["answered"]) == (200, 502)
    assert line["error"] == f"the upstream's answer is larger than the proxy holds ({MAX_ANSWER} bytes)"
    assert DownstreamSource(DownstreamEffects()).count(tmp_path) == {"ab-m0000001": 1}


# -- CONNECT with the ClientHello in the same write


def test_a_connect_whose_client_hello_comes_in_the_same_write_is_served(tmp_path: Path) -> None:
    """Clients that write the CONNECT and their ClientHello at once (h11 reads both with the head): TLS
    starts from those bytes, the call inside is answered and recorded for the tunnel's host."""

    async def call(port: int, ca: Path) -> bytes:
        context = ssl.create_default_context(cafile=str(ca))
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname="api.payments.example")
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            connect = b"CONNECT api.payments.example:443 HTTP/1.1\r\nHost: api.payments.example:443\r\n\r\n"
            writer.write(connect + outgoing.read())  # one write: one segment on loopback
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            assert status_of(head) == 200
            post = b"POST /v1/charges HTTP/1.1\r\nHost: api.payments.example\r\nConnection: close\r\n"
            body = b'{"memo": "ab-m0000001"}'
            await pump(tls, incoming, outgoing, reader, writer, tls.do_handshake)
            tls.write(post + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            answer = bytearray()
            while chunk := await pump(tls, incoming, outgoing, reader, writer, lambda: tls.read(65536)):
                answer += chunk
            return bytes(answer)
        finally:
            writer.close()

    async def run() -> bytes:
        async with proxying(tmp_path, DownstreamService()) as proxy:
            return await call(proxy.port, proxy.ca_path)

    answer = asyncio.run(run())
    assert status_of(answer) == 200
    assert answer.endswith(b'{"id":"ds_1","ok":true}')
    [line] = records(tmp_path)
    assert (line["host"], line["path"], line["status"], line["markers"]) == (
        "api.payments.example",
        "/v1/charges",
        200,
        ["ab-m0000001"],
    )


async def pump(
    tls: ssl.SSLObject,
    incoming: ssl.MemoryBIO,
    outgoing: ssl.MemoryBIO,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    step: Callable[[], Any],
) -> Any:
    """The client's side of TLS over memory buffers: one step, reading while it wants to (b"" at the end)."""
    while True:
        try:
            done = step()
        except ssl.SSLWantReadError:
            writer.write(outgoing.read())
            data = await asyncio.wait_for(reader.read(65536), WAIT_S)
            if not data:
                return b""
            incoming.write(data)
        except ssl.SSLZeroReturnError:
            return b""
        else:
            writer.write(outgoing.read())
            return done


# -- the request path under generated requests


class Watched(DownstreamProxy):
    """The proxy, keeping what escapes a connection's handler other than that connection's own end."""

    def __init__(self, run_dir: Path, service: DownstreamService, escaped: list[object]) -> None:
        super().__init__(run_dir, service)
        self.escaped = escaped

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await super().handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            raise  # the end of that connection, as LoopbackServer expects
        except Exception as exc:
            self.escaped.append(exc)
            raise


class Echo:
    """The upstream of the generated calls: 200 and a short body to every request it can parse."""

    def __init__(self) -> None:
        self.handlers: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self.handlers.add(me)
        conn = h11.Connection(h11.SERVER)
        try:
            with contextlib.suppress(ConnectionError, h11.ProtocolError):
                await self._requests(conn, reader, writer)
        finally:
            self.handlers.discard(me)
            writer.close()

    async def _requests(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        method = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                method = event.method
            elif isinstance(event, h11.EndOfMessage):
                out = conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"4")]))
                body = b"" if method == b"HEAD" else b"echo"
                writer.write(out + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
                await writer.drain()
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return

    async def close(self) -> None:
        for task in list(self.handlers):
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)


@dataclass
class Served:
    """A proxy (with its upstream) serving on an event loop in a thread of its own, for many examples;
    ``escaped``: what left a handler, or reached the loop's exception handler."""

    port: int
    run_dir: Path
    escaped: list[object]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    run_dir = tmp_path_factory.mktemp("downstream")
    loop = asyncio.new_event_loop()
    escaped: list[object] = []
    loop.set_exception_handler(lambda _loop, context: escaped.append(context))
    thread = threading.Thread(target=loop.run_forever, name="proxy", daemon=True)
    thread.start()

    def on_loop(coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(WAIT_S)

    echo = Echo()
    upstream = on_loop(asyncio.start_server(echo.serve, "127.0.0.1", 0))
    service = DownstreamService(upstream=f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}")
    proxy = Watched(run_dir, service, escaped)
    try:
        yield Served(on_loop(proxy.start()), run_dir, escaped)
    finally:
        on_loop(proxy.close())
        upstream.close()
        on_loop(echo.close())
        on_loop(upstream.wait_closed())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


def send_raw(port: int, data: bytes) -> bytes:
    """Send ``data``, close for writing, and read all the proxy answers until it closes (WAIT_S at most)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def statuses(data: bytes, method: bytes) -> list[int]:
    """The statuses of the answers in ``data``, in order, up to a CONNECT's tunnel (TLS after it). An
    answer with no body has no Content-Length (HEAD, 204, 304), as the proxy frames them."""
    found: list[int] = []
    while data:
        head, blank, data = data.partition(b"\r\n\r\n")
        assert blank, head[:200]
        found.append(status_of(head))
        if not found[1:] and method == b"CONNECT" and found[0] == 200:
            break
        fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])
        data = data[int(fields.get(b"content-length", b"0")) :]
    return found


TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
VCHAR = "".join(map(chr, range(0x21, 0x7F)))
token = st.text(TCHAR, min_size=1, max_size=12)


def mostly(good: st.SearchStrategy[_T], wild: st.SearchStrategy[_T]) -> st.SearchStrategy[_T]:
    """``good`` nine times in ten, else ``wild``: most requests are well formed in most parts, so that
    many reach the upstream and the rest are refused for one fault at a time."""
    return st.integers(0, 9).flatmap(lambda n: good if n else wild)


methods = mostly(
    st.sampled_from([b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS", b"CONNECT"]),
    token.map(str.encode) | st.binary(max_size=8),
)
targets = mostly(
    st.text(VCHAR.replace("#", ""), max_size=40).map(lambda path: b"/" + path.encode()),
    st.one_of(
        st.sampled_from(
            [
                "*",
                ":1/x",
                "@127.0.0.1:1/steal",
                "//127.0.0.1:1/x",
                "http://[::1/x",
                "http:///x",
                "http://ledger.example/v1/entries?memo=ab-m0000001",
                "api.example:443",
                "[::1]:443",
                "bad..host:443",
                "api.example:0",
                "/a#b",
            ]
        ),
        st.builds(
            lambda scheme, host, path: f"{scheme}://{host}/{path}",
            st.sampled_from(["http", "https", "HTTP", "ftp"]),
            st.text(VCHAR, max_size=20),
            st.text(VCHAR, max_size=20),
        ),
        st.builds(lambda host, port: f"{host}:{port}", st.text(VCHAR, max_size=20), st.integers(-1, 70_000)),
        st.text(VCHAR, min_size=1, max_size=40),
    ).map(str.encode)
    | st.binary(max_size=40),
)
versions = mostly(
    st.just(b"HTTP/1.1"), st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 x", b""])
)
named = st.sampled_from(
    [b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"Upgrade", b"Idempotency-Key"]
)
headers = mostly(
    st.tuples(token.map(str.encode), st.text(VCHAR + " ", max_size=30).map(lambda v: v.strip().encode())),
    st.tuples(
        named | st.binary(max_size=10),
        st.text(VCHAR + " \t", max_size=30).map(str.encode) | st.binary(max_size=20),
    ),
)
bodies = st.binary(max_size=300) | st.builds(
    lambda index: orjson.dumps({"memo": f"ab-m{index:07d}", "idempotency_key": "k"}),
    st.integers(0, 9_999_999),
)
FRAMINGS = ("none", "length", "short", "long", "chunked", "broken chunks")


def request(
    method: bytes,
    target: bytes,
    version: bytes,
    host: bool,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    framing: str,
) -> bytes:
    """One request's bytes, its framing true or not: a body shorter or longer than said runs into the
    end of the connection or into what the proxy reads as a next request."""
    lines = [b"%s %s %s" % (method, target, version), *([b"Host: api.example"] if host else [])]
    lines += [b"%s: %s" % header for header in headers]
    if framing in ("length", "short", "long"):
        said = {"length": len(body), "short": len(body) + 5, "long": max(len(body) - 3, 0)}[framing]
        lines.append(b"Content-Length: %d" % said)
    elif framing == "chunked":
        lines.append(b"Transfer-Encoding: chunked")
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    elif framing == "broken chunks":
        lines.append(b"Transfer-Encoding: chunked")
        body = b"zz\r\n" + body
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@given(
    method=methods,
    target=targets,
    version=versions,
    host=mostly(st.just(True), st.just(False)),
    headers=st.lists(headers, max_size=4),
    body=bodies,
    framing=st.sampled_from(FRAMINGS),
)
def test_every_request_is_answered_and_every_answer_recorded(
    served: Served,
    method: bytes,
    target: bytes,
    version: bytes,
    host: bool,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    framing: str,
) -> None:
    """Whatever a client sends, nothing escapes the proxy's handler, the request is answered (a next one
    read from its leftover bytes too), and each answer but a CONNECT's tunnel has its line, with the
    status the target got, written before it."""
    before = len(records(served.run_dir))
    answered = statuses(
        send_raw(served.port, request(method, target, version, host, headers, body, framing)), method
    )
    assert served.escaped == []
    assert answered  # the first request at least
    lines = records(served.run_dir)[before:]
    tunnel = method == b"CONNECT" and answered[0] == 200
    assert [line.get("answered", line["status"]) for line in lines] == answered[tunnel:]
