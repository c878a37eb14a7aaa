"""The driver's client against the real SDK server (both response forms, errors, broken streams), and its
transport alone against scripted loopback servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client.http import McpHttpClient
from harness.client.messages import ToolCall
from harness.client.pool import Pool
from harness.client.raw import End, RawResponse
from harness.history import Detail, Outcome, read_history
from harness.loopback import free_port
from tests.helpers.processes import Target
from tests.helpers.scenarios import invoice_scenario, run_scenario


def args(n: int) -> dict[str, Any]:
    return {"customer_id": "c", "amount_cents": 100 + n, "memo": f"m{n}", "idempotency_key": f"k{n}"}


async def calls(url: str, n: int, *, progress: bool = False) -> list[Any]:
    async with McpHttpClient(url) as client:
        results = [
            await client.call_tool(
                ToolCall("create_invoice", args(i), i + 1, request_progress=progress), timeout=10
            )
            for i in range(n)
        ]
        # Keep-alive: one connection carried every sequential call.
        assert client._pool.connections == 1
        return results


@pytest.mark.integration
def test_json_form(target: Callable[..., Target]) -> None:
    t = target(INVOICES_MODE="atomic")
    results = asyncio.run(calls(t.url, 5))
    assert [(r.outcome, r.form, r.status) for r in results] == [(Outcome.OK, "json", 200)] * 5
    assert t.invoices() == 5


@pytest.mark.integration
def test_sse_form_with_progress(target: Callable[..., Target]) -> None:
    t = target(INVOICES_MODE="atomic", INVOICES_TRANSPORT="sse")
    results = asyncio.run(calls(t.url, 3, progress=True))
    assert [(r.outcome, r.form, r.notifications) for r in results] == [(Outcome.OK, "sse", 3)] * 3


@pytest.mark.integration
def test_many_concurrent_calls(target: Callable[..., Target]) -> None:
    t = target(INVOICES_MODE="atomic", INVOICES_PRE_COMMIT_MS="5")

    async def main() -> list[Any]:
        async with McpHttpClient(t.url) as client:
            return await asyncio.gather(
                *(client.call_tool(ToolCall("create_invoice", args(i), i + 1), timeout=10) for i in range(64))
            )

    results = asyncio.run(main())
    assert all(r.outcome is Outcome.OK for r in results)
    assert t.invoices() == 64


@pytest.mark.integration
def test_header_mismatch_is_a_protocol_error(target: Callable[..., Target]) -> None:
    t = target()

    async def main() -> Any:
        async with McpHttpClient(t.url) as client:
            # Mcp-Name says one tool, the body calls another: the server must refuse with -32020.
            raw = client.build_request(
                "tools/call", {"name": "create_invoice", "arguments": args(1)}, 7, name="other_tool"
            )
            return await client.send(raw, 7, timeout=10)

    res = asyncio.run(main())
    assert (res.outcome, res.status, res.error_code) == (Outcome.PROTOCOL_ERROR, 400, -32020)
    assert t.invoices() == 0


@pytest.mark.integration
def test_connect_refused() -> None:
    async def main() -> Any:
        async with McpHttpClient(f"http://127.0.0.1:{free_port()}/mcp") as client:
            return await client.call_tool(ToolCall("x", {}, 1), timeout=5)

    res = asyncio.run(main())
    assert (res.outcome, res.detail) == (Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("transport", "detail"), [("json", Detail.CLOSED_BEFORE_RESPONSE), ("sse", Detail.CLOSED_MID_RESPONSE)]
)
def test_server_death_mid_request(target: Callable[..., Target], transport: str, detail: str) -> None:
    # In SSE mode the stream has started (a progress event, flushed during the 50 ms of work
    # before the commit) when the process dies; in JSON mode nothing of the response exists yet.
    t = target(
        INVOICES_MODE="naive",
        INVOICES_TRANSPORT=transport,
        INVOICES_PRE_COMMIT_MS="50",
        INVOICES_FAILPOINT="after_business_commit@1",
    )

    async def main() -> Any:
        async with McpHttpClient(t.url) as client:
            return await client.call_tool(
                ToolCall("create_invoice", args(1), 1, request_progress=True), timeout=10
            )

    res = asyncio.run(main())
    assert (res.outcome, res.detail) == (Outcome.TRANSPORT_ERROR, detail)
    assert t.proc.wait(5) == -9
    assert t.invoices() == 1  # it committed: exactly the window the article is about


@pytest.mark.integration
def test_timeout_closes_the_attempt(target: Callable[..., Target]) -> None:
    t = target(INVOICES_MODE="atomic", INVOICES_PRE_COMMIT_MS="2000")

    async def main() -> Any:
        async with McpHttpClient(t.url) as client:
            return await client.call_tool(ToolCall("create_invoice", args(1), 1), timeout=0.3)

    res = asyncio.run(main())
    assert (res.outcome, res.detail) == (Outcome.TIMEOUT, Detail.TIMEOUT_NO_RESPONSE)


# -- the transport alone: request bytes in, a raw response out, against a scripted loopback server

REQUEST = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"


async def scripted(
    answer: Callable[[int], list[bytes]], hold: asyncio.Event
) -> tuple[asyncio.Server, list[int]]:
    """A real TCP server on loopback answering the n-th request on a connection with ``answer(n)``'s
    chunks; then it holds the connection until ``hold`` is set. Counts the connections it accepted."""
    accepted: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        n = 0
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n{}")
                for chunk in answer(n):
                    writer.write(chunk)
                    await writer.drain()
                n += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            await hold.wait()
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), accepted


def port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


@pytest.mark.integration
def test_the_pool_reuses_a_connection_and_keeps_the_asked_headers() -> None:
    def answer(n: int) -> list[bytes]:
        body = b'{"n": %d}' % n
        return [
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: s-1\r\nX-Other: 1\r\n",
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
        ]

    async def main() -> tuple[list[RawResponse], int, list[int]]:
        hold = asyncio.Event()
        server, accepted = await scripted(answer, hold)
        pool = Pool("127.0.0.1", port_of(server), keep_headers=[b"Mcp-Session-Id"])
        raws = [await pool.exchange(REQUEST, timeout=10) for _ in range(2)]
        open_ = pool.connections
        pool.close()
        hold.set()
        server.close()
        return raws, open_, accepted

    raws, open_, accepted = asyncio.run(main())
    assert [(r.end, r.status, r.body, r.events) for r in raws] == [
        (End.COMPLETE, 200, b'{"n": 0}', None),
        (End.COMPLETE, 200, b'{"n": 1}', None),
    ]
    assert raws[0].headers == {b"mcp-session-id": b"s-1"}  # only what was asked for
    assert (open_, len(accepted)) == (1, 1)


@pytest.mark.integration
def test_each_exchange_on_a_kept_connection_keeps_its_own_deadline() -> None:
    """A connection keeps one timer across its exchanges (Connection.arm): a shorter deadline than the
    last exchange's still ends its exchange on time, and a longer one is not cut at the last's."""
    body = b'{"ok": 1}'
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    delays: list[float] = []  # the n-th request on a connection is answered after delays[n] seconds

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for delay in delays:
                await reader.readuntil(b"\r\n\r\n{}")
                await asyncio.sleep(delay)
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> list[End]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ends = []
        # The first exchange opens the connection (a timeout scope); the next ones are on it.
        for timeouts, answered_after in (((10.0, 10.0, 0.2), 0.6), ((10.0, 0.2, 5.0), 0.5)):
            delays[:] = [0.0, 0.0, answered_after]
            pool = Pool("127.0.0.1", port_of(server))
            ends.extend([(await pool.exchange(REQUEST, timeout=t)).end for t in timeouts])
            pool.close()
        server.close()
        return ends

    # Cut at 0.2 s, not at the last exchange's 10 s (its answer came at 0.6 s); answered at 0.5 s, after
    # the last exchange's 0.2 s deadline had passed.
    assert asyncio.run(main()) == [End.COMPLETE, End.COMPLETE, End.TIMEOUT] + [End.COMPLETE] * 3


@pytest.mark.integration
def test_a_stream_left_open_after_its_answer_is_stopped_and_dropped() -> None:
    def answer(n: int) -> list[bytes]:
        return [
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"%x\r\n%s\r\n" % (len(b"id: e1\ndata: note\n\n"), b"id: e1\ndata: note\n\n"),
            b"%x\r\n%s\r\n" % (len(b"id: e2\ndata: answer\n\n"), b"id: e2\ndata: answer\n\n"),
        ]  # and the stream is never ended

    async def main() -> tuple[RawResponse, int]:
        hold = asyncio.Event()
        server, _ = await scripted(answer, hold)
        pool = Pool("127.0.0.1", port_of(server))
        raw = await pool.exchange(REQUEST, timeout=30, answers=lambda event: event == b"answer")
        open_ = pool.connections
        hold.set()
        server.close()
        return raw, open_

    raw, open_ = asyncio.run(main())
    assert (raw.end, raw.events, raw.last_event_id) == (End.STOPPED, [b"note", b"answer"], b"e2")
    assert open_ == 0  # a connection whose response never ended cannot carry another


@pytest.mark.integration
@pytest.mark.parametrize(
    ("chunks", "end"),
    [
        ([b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"jsonrpc"'], End.CLOSED),
        ([], End.CLOSED),
        ([b"SMTP ready\r\n\r\n"], End.BAD_HTTP),
    ],
)
def test_how_an_exchange_ended_is_data(chunks: list[bytes], end: End) -> None:
    async def main() -> RawResponse:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n{}")
            for chunk in chunks:
                writer.write(chunk)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        pool = Pool("127.0.0.1", port_of(server))
        raw = await pool.exchange(REQUEST, timeout=30)
        pool.close()
        server.close()
        return raw

    raw = asyncio.run(main())
    assert raw.end is end
    assert raw.received == sum(len(c) for c in chunks)
    if end is End.BAD_HTTP:
        assert (raw.error or "").startswith("bad HTTP from server")


def test_an_intent_gives_up_after_its_time_whatever_attempts_remain(tmp_path: Path) -> None:
    """A server that hangs every call: with 1000 attempts of 0.3 s allowed, the intent gives up once
    1.5 s of attempts have passed (crash point explorations allow 280 attempts of a scenario's timeout)."""
    data = invoice_scenario(mode="naive", intents=1, env={"INVOICES_PRE_COMMIT_MS": "3000"})
    data["client"] = {
        "attempt_timeout_s": 0.3,
        "max_attempts": 1000,
        "give_up_after_s": 1.5,
        "backoff": {"initial_s": 0.01, "max_s": 0.01, "jitter": "none"},
    }
    data["gate"] = {"fail_on": []}
    result = run_scenario(data, tmp_path)
    (row,) = result.intents.to_dict("records")
    assert row["client_status"] == "gave_up"
    assert 3 <= row["attempts"] <= 8  # 1.5 s of 0.3 s attempts, not 1000
    ended = [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == "intent_ended"]
    assert ended[0]["reason"] == "gave up after 1.5s of attempts (client.give_up_after_s)"


@pytest.mark.integration
def test_the_marks_of_a_tool_listed_on_a_later_page_are_learnt() -> None:
    """``learn_marks`` follows ``nextCursor`` until the tool is listed, then its calls mirror the marked
    argument; a tool listed nowhere is not found, after the last page."""
    marked = {"type": "object", "properties": {"memo": {"type": "string", "x-mcp-header": "Memo"}}}
    pages: dict[str | None, dict[str, Any]] = {
        None: {"tools": [{"name": "other", "inputSchema": {"type": "object"}}], "nextCursor": "p2"},
        "p2": {"tools": [{"name": "noop", "inputSchema": marked}]},
    }
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                msg = json.loads(await reader.readexactly(length))
                seen.append(head)
                if msg["method"] == "tools/list":
                    result: dict[str, Any] = pages[msg["params"].get("cursor")]
                else:
                    result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> tuple[bool, bool, Any]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{port_of(server)}/mcp"
        async with McpHttpClient(url) as lister, McpHttpClient(url) as caller:
            missing = await lister.learn_marks("absent", timeout=5)
            found = await lister.learn_marks("noop", timeout=5)
            caller.adopt_marks(lister)
            res = await caller.call_tool(ToolCall("noop", {"memo": "m-1"}, 1), timeout=5)
        server.close()
        return missing, found, res

    missing, found, res = asyncio.run(main())
    assert (missing, found, res.outcome) == (False, True, Outcome.OK)
    assert b"Mcp-Param-Memo: m-1\r\n" in seen[-1]  # the call, by the client that adopted the marks
