"""The reference target's contract, checked over raw HTTP: replays are byte-identical."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.helpers.paths import INVOICES
from tests.helpers.processes import Target

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "create_invoice",
}


def call(
    target: Target,
    request_id: int,
    arguments: dict[str, Any],
    progress: bool = False,
    answer: dict[str, Any] | None = None,
) -> bytes:
    """POST one tools/call (``answer``: MRTR params) and return the raw bytes of the JSON-RPC ``result``."""
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
        "params": {"name": "create_invoice", "arguments": arguments, "_meta": meta, **(answer or {})},
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


@pytest.mark.integration
def test_an_ambiguous_customer_is_asked_about_at_most_twice(target: Callable[..., Target]) -> None:
    t = target(INVOICES_REQUEST_STATE="shared")
    asking = {**ARGS, "customer_id": "acme"}
    question = orjson.loads(call(t, 1, asking))
    assert question["resultType"] == "input_required"
    form = question["inputRequests"]["customer"]
    assert form["method"] == "elicitation/create"
    assert form["params"]["requestedSchema"]["properties"]["customer_id"]["enum"] == ["acme-gmbh", "acme-inc"]
    declined = {
        "inputResponses": {"customer": {"action": "decline"}},
        "requestState": question["requestState"],
    }
    again = orjson.loads(call(t, 2, asking, answer=declined))
    assert again["resultType"] == "input_required"
    end = orjson.loads(call(t, 3, asking, answer={**declined, "requestState": again["requestState"]}))
    assert end["isError"] is True
    assert json.loads(end["content"][0]["text"])["code"] == "customer_ambiguous"
    assert t.invoices() == 0
    accepted = {"action": "accept", "content": {"customer_id": "acme-inc"}}
    chosen = {"inputResponses": {"customer": accepted}, "requestState": question["requestState"]}
    assert orjson.loads(call(t, 4, asking, answer=chosen))["structuredContent"]["customer_id"] == "acme-inc"
    assert t.invoices() == 1


@pytest.mark.integration
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"INVOICES_REQUEST_STATE": "cluster"}, "INVOICES_REQUEST_STATE='cluster'; choose process or shared"),
        (
            {"INVOICES_REQUEST_STATE": "shared", "INVOICES_REQUEST_STATE_KEY": "short"},
            "INVOICES_REQUEST_STATE_KEY must be at least 32 characters of secret randomness",
        ),
        (
            {"INVOICES_REQUEST_STATE": "shared", "INVOICES_DB": "postgresql://127.0.0.1:1/x"},
            "INVOICES_REQUEST_STATE=shared with a database URL needs INVOICES_REQUEST_STATE_KEY",
        ),
    ],
)
def test_a_bad_request_state_setting_is_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    full = {**os.environ, "PORT": "1", "INVOICES_DB": str(tmp_path / "i.db"), **env}
    proc = subprocess.run(
        [sys.executable, str(INVOICES)], env=full, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr == f"invoices: {message}\n"
