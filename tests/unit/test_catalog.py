"""The catalog advice (the second article): keys where effects are, none where they are not, rules in
the description, sentences, few tools, no hidden session state; and snapshot diffs."""

from __future__ import annotations

from typing import Any

from harness.contract.checks import MAX_TOOLS, _snapshot_diff, catalog_findings
from harness.contract.tokens import count

KEYED = {
    "type": "object",
    "properties": {"memo": {"type": "string"}, "idempotency_key": {"type": "string"}},
    "required": ["memo", "idempotency_key"],
}
PLAIN = {"type": "object", "properties": {"memo": {"type": "string"}}}


def tool(name: str, description: str, schema: dict[str, Any], **annotations: bool) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": schema, "annotations": annotations}


GOOD = [
    tool(
        "create_invoice", "Creates an invoice. Reuse idempotency_key only to retry the same invoice.", KEYED
    ),
    tool("search_invoices", "Searches invoices by memo.", PLAIN, readOnlyHint=True),
]


def test_a_catalog_that_follows_the_advice_has_no_findings() -> None:
    assert catalog_findings(GOOD) == []


def test_each_piece_of_advice_can_be_broken() -> None:
    findings = catalog_findings(
        [
            tool("create_invoice", "Creates an invoice.", PLAIN),
            tool("pay_invoice", "Pays an invoice.", KEYED),
            tool("search_invoices", "Searches invoices.", KEYED, readOnlyHint=True),
            tool("delete_invoice", "deletes an invoice", PLAIN, destructiveHint=True),
            tool("start_session", "Starts a session.", PLAIN),
        ]
    )
    assert "create_invoice changes state but takes no idempotency key" in findings
    assert (
        "pay_invoice: nothing says to reuse idempotency_key only for retries of the same intent" in findings
    )
    assert "search_invoices only reads but takes a key (idempotency_key): schema noise" in findings
    assert "delete_invoice: its description is not written as sentences" in findings
    assert "start_session looks like a session-style tool that needs hidden state" in findings


def test_a_description_past_purpose_and_rules_is_flagged() -> None:
    rules = "Creates an invoice. Reuse idempotency_key only to retry the same invoice."
    page = rules + " It is very useful. It is fast. Please use it often."
    assert catalog_findings([tool("create_invoice", rules + " Amounts are in cents.", KEYED)]) == []
    assert catalog_findings([tool("create_invoice", page, KEYED)]) == [
        "create_invoice: 5 sentences; one of purpose and one of rules say it, the rest costs tokens and "
        "tool-selection accuracy"
    ]


def test_too_many_tools() -> None:
    many = [tool(f"get_{i}", "Gets one thing.", PLAIN, readOnlyHint=True) for i in range(MAX_TOOLS + 1)]
    assert catalog_findings(many) == [f"{MAX_TOOLS + 1} tools: past {MAX_TOOLS}, tool selection degrades"]


def test_snapshot_diffs_name_what_changed() -> None:
    changed = [dict(GOOD[0], description="Creates an invoice."), GOOD[1], tool("refund", "Refunds.", KEYED)]
    assert _snapshot_diff(GOOD, changed) == ["refund added", "create_invoice changed"]
    assert _snapshot_diff(GOOD, list(reversed(GOOD))) == ["the order changed"]
    assert _snapshot_diff(GOOD, GOOD) == []


def test_tokens_are_o200k_base_offline() -> None:
    assert count("hello world") == 2  # o200k_base: "hello", " world"
    assert count("") == 0
