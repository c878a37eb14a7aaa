"""The driver's client against the real SDK server: both response forms, errors, broken streams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from harness.client.http import McpHttpClient
from harness.history import Detail, Outcome
from harness.loopback import free_port
from tests.conftest import Target


def args(n: int) -> dict[str, Any]:
    return {"customer_id": "c", "amount_cents": 100 + n, "memo": f"m{n}", "idempotency_key": f"k{n}"}


async def calls(url: str, n: int, *, progress: bool = False) -> list[Any]:
    async with McpHttpClient(url) as client:
        results = [
            await client.call_tool(
                "create_invoice", args(i), request_id=i + 1, timeout=10, request_progress=progress
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
                *(
                    client.call_tool("create_invoice", args(i), request_id=i + 1, timeout=10)
                    for i in range(64)
                )
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
            return await client.call_tool("x", {}, request_id=1, timeout=5)

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
                "create_invoice", args(1), request_id=1, timeout=10, request_progress=True
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
            return await client.call_tool("create_invoice", args(1), request_id=1, timeout=0.3)

    res = asyncio.run(main())
    assert (res.outcome, res.detail) == (Outcome.TIMEOUT, Detail.TIMEOUT_NO_RESPONSE)
