"""The reference target's demo catalog (INVOICES_CATALOG=demo), called over raw HTTP: six tools whose
styles change only words, store-backed handles, a send quota that says when to come back, voids that
replay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.helpers.paths import INVOICES
from tests.helpers.processes import Target

pytestmark = pytest.mark.integration

DEMO = {"INVOICES_CATALOG": "demo"}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def rpc(target: Target, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """One JSON-RPC request of the 2026-07-28 protocol; the whole answer."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        **({"Mcp-Name": name} if name else {}),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    resp = httpx.post(target.url, content=orjson.dumps(body), headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = orjson.loads(resp.content)
    return answer


def call(target: Target, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tools/call result: structuredContent for a success, the error contract's body for a tool error."""
    result = rpc(target, "tools/call", {"name": tool, "arguments": arguments}, tool)["result"]
    if result.get("isError"):
        return {"error": orjson.loads(result["content"][0]["text"])}
    assert result["content"][0]["text"] == orjson.dumps(result["structuredContent"]).decode()
    return dict(result["structuredContent"])


def invoice(target: Target, n: int, customer: str = "c-1") -> str:
    created = call(
        target,
        "create_invoice",
        customer_id=customer,
        amount_cents=100 * n,
        memo=f"m-{n}",
        idempotency_key=f"k-{n}",
    )
    return str(created["invoice_id"])


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def test_six_tools_in_name_order_and_the_styles_change_only_words(target: Callable[..., Target]) -> None:
    catalogs = {
        style: rpc(target(**DEMO, INVOICES_DESCRIPTIONS=style), "tools/list", {})["result"]["tools"]
        for style in ("bloated", "engineered", "terse")
    }
    names = [t["name"] for t in catalogs["engineered"]]
    assert names == [
        "create_invoice",
        "get_invoice",
        "search_invoices",
        "search_next",
        "send_invoice",
        "void_invoice",
    ]
    shapes = {style: without_descriptions(tools) for style, tools in catalogs.items()}
    assert shapes["bloated"] == shapes["engineered"] == shapes["terse"]
    described = {t["name"]: t["description"] for t in catalogs["engineered"]}
    assert described["search_invoices"].endswith("a next_page expires in ~15 minutes.")
    assert "at most 100 sends per minute" in described["send_invoice"]


def test_search_pages_through_handles_that_outlive_the_process(target: Callable[..., Target]) -> None:
    first = target(**DEMO)
    ids = [invoice(first, n) for n in (1, 2, 3)]
    invoice(first, 4, customer="c-2")
    page = call(first, "search_invoices", customer_id="c-1", limit=2)
    assert [i["invoice_id"] for i in page["results"]] == ids[:2]
    assert page["next_page"].startswith("h1_")
    first.stop()
    again = target(**DEMO, INVOICES_DB=str(first.db))  # a restart, or another replica on the same store
    rest = call(again, "search_next", next_page=page["next_page"])
    assert [i["invoice_id"] for i in rest["results"]] == ids[2:]
    assert rest["next_page"] is None
    assert call(again, "search_next", next_page="h1_" + "A" * 22)["error"]["code"] == "handle_invalid"


def test_a_send_over_quota_says_when_to_come_back(target: Callable[..., Target]) -> None:
    t = target(**DEMO, INVOICES_SEND_QUOTA="2", INVOICES_QUOTA_WINDOW_MS="1500")
    inv = invoice(t, 1)
    sent = call(t, "send_invoice", invoice_id=inv, idempotency_key="s-1")
    call(t, "send_invoice", invoice_id=inv, idempotency_key="s-2")  # a reminder: a second intent
    refused = call(t, "send_invoice", invoice_id=inv, idempotency_key="s-3")["error"]
    assert (refused["code"], refused["retryable"]) == ("quota_exceeded", True)
    assert 0 < refused["retry_after_ms"] <= 1500
    assert call(t, "send_invoice", invoice_id=inv, idempotency_key="s-1") == sent  # a replay costs no quota
    time.sleep(refused["retry_after_ms"] / 1000 + 0.05)
    assert call(t, "send_invoice", invoice_id=inv, idempotency_key="s-3")["status"] == "sent"
    assert call(t, "get_invoice", invoice_id=inv)["status"] == "sent"


def test_a_void_replays_and_ends_the_invoice(target: Callable[..., Target]) -> None:
    t = target(**DEMO)
    inv = invoice(t, 1)
    voided = call(t, "void_invoice", invoice_id=inv, reason="wrong amount", idempotency_key="v-1")
    assert voided["status"] == "void"
    assert call(t, "void_invoice", invoice_id=inv, reason="wrong amount", idempotency_key="v-1") == voided
    reused = call(t, "void_invoice", invoice_id=inv, reason="other", idempotency_key="v-1")["error"]
    assert reused["code"] == "idempotency_key_reused"
    assert (
        call(t, "void_invoice", invoice_id=inv, reason="again", idempotency_key="v-2")["error"]["code"]
        == "invoice_void"
    )
    assert call(t, "send_invoice", invoice_id=inv, idempotency_key="s-1")["error"]["code"] == "invoice_void"
    assert call(t, "get_invoice", invoice_id=inv)["status"] == "void"
    assert call(t, "get_invoice", invoice_id="inv_00000099")["error"]["code"] == "invoice_not_found"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"INVOICES_FLAW": "raw_cursor"}, "invoices: INVOICES_FLAW=raw_cursor needs INVOICES_CATALOG=demo"),
        (
            {**DEMO, "INVOICES_DESCRIPTIONS": "fancy"},
            "INVOICES_DESCRIPTIONS='fancy'; choose one of bloated, ",
        ),
        ({**DEMO, "INVOICES_HANDLE_TTL_MS": "0"}, "INVOICES_HANDLE_TTL_MS='0' must be a whole number >= 1"),
        ({"INVOICES_CATALOG": "big"}, "INVOICES_CATALOG='big'; choose default or demo"),
    ],
)
def test_bad_demo_settings_are_one_line_and_exit_2(env: dict[str, str], said: str) -> None:
    full = {**os.environ, "PORT": "1", "INVOICES_DB": "/nonexistent/x.db", **env}
    proc = subprocess.run(
        [sys.executable, str(INVOICES)], env=full, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert said in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
