"""The reference target's contract, checked over raw HTTP: replays are byte-identical."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Target

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "create_invoice",
}


def call(target: Target, request_id: int, arguments: dict[str, Any], progress: bool = False) -> bytes:
    """POST one tools/call and return the raw bytes of the JSON-RPC ``result`` member."""
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    if progress:
        meta["progressToken"] = request_id
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "create_invoice", "arguments": arguments, "_meta": meta},
    }
    resp = httpx.post(target.url, content=orjson.dumps(body), headers=HEADERS, timeout=10)
    assert resp.status_code == 200
    raw = resp.content
    if resp.headers["content-type"].startswith("text/event-stream"):
        finals = [line[6:] for line in raw.splitlines() if line.startswith(b"data: ") and b'"result"' in line]
        assert len(finals) == 1
        raw = finals[0]
    prefix = b'{"jsonrpc":"2.0","id":%d,"result":' % request_id
    assert raw.startswith(prefix), raw[:80]
    return raw[len(prefix) : -1]


ARGS = {"customer_id": "c1", "amount_cents": 1250, "memo": "m-1", "idempotency_key": "key-1"}


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["keyed", "atomic"])
@pytest.mark.parametrize("transport", ["json", "sse"])
def test_replay_is_byte_identical(target: Callable[..., Target], mode: str, transport: str) -> None:
    t = target(INVOICES_MODE=mode, INVOICES_TRANSPORT=transport, INVOICES_POST_COMMIT_MS="5")
    original = call(t, 1, ARGS, progress=True)
    replay = call(t, 2, ARGS, progress=True)
    assert replay == original
    assert orjson.loads(original)["structuredContent"]["invoice_id"] == "inv_00000001"
    assert t.invoices() == 1


@pytest.mark.integration
def test_naive_creates_a_second_invoice(target: Callable[..., Target]) -> None:
    t = target(INVOICES_MODE="naive")
    first, second = call(t, 1, ARGS), call(t, 2, ARGS)
    assert first != second
    assert t.invoices() == 2


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["keyed", "atomic"])
def test_key_reuse_with_another_payload_is_refused(target: Callable[..., Target], mode: str) -> None:
    t = target(INVOICES_MODE=mode)
    call(t, 1, ARGS)
    refused = orjson.loads(call(t, 2, {**ARGS, "amount_cents": 999}))
    assert refused["isError"] is True
    contract = orjson.loads(refused["content"][0]["text"])
    assert contract["code"] == "idempotency_key_reused"
    assert contract["retryable"] is False
    assert t.invoices() == 1
