"""What the contract checks conclude, judged on answers and catalogs written by hand, with no server.

The catalog advice (the second article): keys where effects are, none where they are not, rules in the
description, sentences, few tools, no hidden session state; stable listings and snapshot diffs. The
error contract (code, retryable, recovery) as a model reads it (the SDK's prefix included), clear
refusals, failures dressed as successes, acknowledgements compared with what was stored, and when two
answers are the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.client.messages import CallResult
from harness.contract.judging import (
    MAX_TOOLS,
    catalog_findings,
    contract_problem,
    error_body,
    failure_text,
    is_error,
    listing_problems,
    lost_writes,
    provoked_problem,
    record_ids,
    refusal_problem,
    retryable,
    said,
    same_result,
    sdk_wrapped,
    shown,
    snapshot_diff,
)
from harness.contract.tokens import count
from harness.history import Outcome

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
    assert snapshot_diff(GOOD, changed) == ["refund added", "create_invoice changed"]
    assert snapshot_diff(GOOD, list(reversed(GOOD))) == ["the order changed"]
    assert snapshot_diff(GOOD, GOOD) == []


def test_tokens_are_o200k_base_offline() -> None:
    assert count("hello world") == 2  # o200k_base: "hello", " world"
    assert count("") == 0


def test_listing_problems_stability_cache_fields_and_budget_come_before_the_advice() -> None:
    listed = {"tools": GOOD, "ttlMs": 60000, "cacheScope": "server"}
    assert listing_problems(listed, listed, listed, modern=True, tokens=100, budget=100) == []
    assert (
        listing_problems({"tools": GOOD}, {"tools": GOOD}, {"tools": GOOD}, modern=False, tokens=1, budget=1)
        == []
    )
    fewer = {"tools": GOOD[:1]}
    assert listing_problems({"tools": GOOD}, fewer, fewer, modern=True, tokens=101, budget=100) == [
        "tools/list differs between two calls",
        "tools/list differs after a restart",
        "no ttlMs/cacheScope on tools/list (2026-07-28 results carry them)",
        "the catalog costs 101 tokens, over the budget of 100",
    ]
    keyless = {"tools": [tool("create_invoice", "Creates an invoice.", PLAIN)]}
    assert listing_problems(keyless, keyless, keyless, modern=False, tokens=1, budget=1) == [
        "create_invoice changes state but takes no idempotency key"
    ]


def test_a_tool_without_a_key_is_the_first_finding() -> None:
    """What a retry costs comes before everything else the catalog breaks, the listing's stability too."""
    tools = [
        tool("start_session", "Starts a session.", PLAIN),
        tool("pay_invoice", "pays", KEYED),
        tool("create_invoice", "Creates an invoice.", PLAIN),
    ]
    findings = catalog_findings(tools)
    assert findings[:2] == [
        "start_session changes state but takes no idempotency key",
        "create_invoice changes state but takes no idempotency key",
    ]
    listed = {"tools": tools}
    problems = listing_problems(listed, {"tools": []}, listed, modern=False, tokens=1, budget=1)
    assert problems[:3] == [*findings[:2], "tools/list differs between two calls"]


# -- answers

KEPT = {"code": "idempotency_key_reused", "retryable": False, "recovery": "Use a new key for a new invoice."}


def answer(outcome: Outcome, body: Any = None, **more: Any) -> CallResult:
    """An answer whose first text block is ``body`` (JSON unless it is a string)."""
    text = body if isinstance(body, str) else json.dumps(body)
    result = None if body is None else {"content": [{"type": "text", "text": text}]}
    return CallResult(outcome, result=result, **more)


def test_an_error_that_keeps_the_contract_has_no_problem() -> None:
    assert contract_problem(answer(Outcome.TOOL_ERROR, KEPT)) is None
    busy = {"code": "idempotency_key_in_use", "retryable": True, "recovery": "Retry.", "retry_after_ms": 50}
    assert contract_problem(answer(Outcome.TOOL_ERROR, busy)) is None
    assert contract_problem(CallResult(Outcome.PROTOCOL_ERROR, error_code=-32602)) is None
    assert contract_problem(CallResult(Outcome.PROTOCOL_ERROR, error_code=-32001)) is None


@pytest.mark.parametrize(
    ("res", "problem"),
    [
        (
            answer(Outcome.TOOL_ERROR, "Something broke"),
            "no machine-readable body (structuredContent or JSON text)",
        ),
        (answer(Outcome.TOOL_ERROR, [KEPT]), "no machine-readable body (structuredContent or JSON text)"),
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "code": "KeyReused"}),
            "code 'KeyReused' is not a stable snake_case string",
        ),
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "retryable": "no"}),
            "idempotency_key_reused: no boolean 'retryable'",
        ),
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "recovery": " "}),
            "idempotency_key_reused: no 'recovery' saying what to do",
        ),
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "retryable": True}),
            "idempotency_key_reused: retryable without 'retry_after_ms'",
        ),
        (
            CallResult(Outcome.PROTOCOL_ERROR, error_code=-31000),
            "JSON-RPC error code -31000 is outside the standard codes and -32099..-32000",
        ),
    ],
)
def test_each_piece_of_the_error_contract_can_be_missing(res: CallResult, problem: str) -> None:
    assert contract_problem(res) == problem


def test_the_error_body_is_structured_content_first_then_json_text() -> None:
    structured = CallResult(
        Outcome.TOOL_ERROR, result={"content": [{"type": "text", "text": "{}"}], "structuredContent": KEPT}
    )
    assert error_body(structured) == KEPT
    assert error_body(answer(Outcome.TOOL_ERROR, KEPT)) == KEPT
    assert error_body(answer(Outcome.TOOL_ERROR, "not json")) is None
    assert error_body(CallResult(Outcome.TOOL_ERROR)) is None


def test_an_answer_said_in_a_few_words() -> None:
    reused = answer(Outcome.TOOL_ERROR, {**KEPT, "message": "this key was used for another invoice"})
    assert said(reused) == "tool_error idempotency_key_reused: this key was used for another invoice"
    assert said(answer(Outcome.TOOL_ERROR, KEPT)) == "tool_error idempotency_key_reused"
    assert (
        said(CallResult(Outcome.TRANSPORT_ERROR, message="connection reset"))
        == "transport_error: connection reset"
    )
    assert said(CallResult(Outcome.TIMEOUT)) == "timeout"
    assert len(said(CallResult(Outcome.TOOL_ERROR, message="x" * 500))) < 120


def test_the_same_result_is_the_same_content_and_structured_content() -> None:
    first = CallResult(
        Outcome.OK, result={"content": [{"type": "text", "text": "inv_1"}], "structuredContent": {"id": 1}}
    )
    again = CallResult(
        Outcome.OK, result={"content": [{"type": "text", "text": "inv_1"}], "structuredContent": {"id": 1}}
    )
    other = CallResult(
        Outcome.OK, result={"content": [{"type": "text", "text": "inv_1"}], "structuredContent": {"id": 2}}
    )
    assert same_result(first, again)
    assert not same_result(first, other)
    assert shown(first) == {
        "outcome": "ok",
        "content": [{"type": "text", "text": "inv_1"}],
        "structuredContent": {"id": 1},
    }
    assert shown(CallResult(Outcome.TIMEOUT, message="no answer")) == {
        "outcome": "timeout",
        "message": "no answer",
    }


def test_errors_are_noted_for_the_error_contract_only_when_it_applies() -> None:
    assert is_error(answer(Outcome.TOOL_ERROR, KEPT))
    assert is_error(CallResult(Outcome.PROTOCOL_ERROR, error_code=-32602))
    assert not is_error(CallResult(Outcome.PROTOCOL_ERROR, message="HTTP 500"))
    assert not is_error(CallResult(Outcome.TRANSPORT_ERROR))
    assert not is_error(answer(Outcome.OK, {"id": 1}))


@pytest.mark.parametrize(
    ("text", "fails"),
    [
        ("Sorry, the invoice could not be created.", True),
        ("Database error: no such table: notes", True),
        ("Exception while writing", True),
        ("Write failed", True),
        ("Invoice inv_1 created.", False),
        ("Successfully wrote to notes/a.txt", False),
        ('{"errors": [], "id": 1}', False),
    ],
)
def test_a_success_that_reads_as_a_failure(text: str, fails: bool) -> None:
    assert (failure_text(answer(Outcome.OK, text)) is not None) is fails
    assert failure_text(answer(Outcome.TOOL_ERROR, text)) is None  # an error says it is one


SDK_TEXT = "Error executing tool add_note: " + json.dumps(KEPT)
"""How the Python SDK reports ToolError(json.dumps(body)): the body after a prefix, no structuredContent."""


def test_the_sdk_prefix_before_a_json_body_keeps_the_contract() -> None:
    wrapped = answer(Outcome.TOOL_ERROR, SDK_TEXT)
    assert error_body(wrapped) == KEPT
    assert contract_problem(wrapped) is None
    assert said(wrapped) == "tool_error idempotency_key_reused"
    assert sdk_wrapped(wrapped)
    assert not sdk_wrapped(answer(Outcome.TOOL_ERROR, KEPT))  # plain JSON text: nothing to note
    prose = answer(Outcome.TOOL_ERROR, "Error executing tool add_note: 1 validation error")
    assert error_body(prose) is None
    assert not sdk_wrapped(prose)
    assert contract_problem(prose) == "no machine-readable body (structuredContent or JSON text)"


def test_retryable_is_read_from_the_body_a_model_reads() -> None:
    busy = {**KEPT, "retryable": True, "retry_after_ms": 50}
    assert retryable(answer(Outcome.TOOL_ERROR, "Error executing tool t: " + json.dumps(busy)))
    assert not retryable(answer(Outcome.TOOL_ERROR, SDK_TEXT))
    assert retryable(CallResult(Outcome.TOOL_ERROR, retryable=True))


def ok(structured: Any) -> CallResult:
    return CallResult(Outcome.OK, result={"content": [], "structuredContent": structured})


def test_record_ids_are_the_id_fields_of_an_acknowledgement() -> None:
    assert record_ids(ok({"invoice_id": "inv_1", "amount": 5})) == (("invoice_id", "inv_1"),)
    assert record_ids(ok({"note": {"noteId": 7, "title": "x"}})) == (("note.noteId", "7"),)
    assert record_ids(answer(Outcome.OK, {"id": 3})) == (("id", "3"),)  # JSON text, no structuredContent
    assert record_ids(ok({"entities": [{"name": "a"}]})) is None
    assert record_ids(ok({"valid": True, "id": True})) is None  # a boolean names nothing


def test_acknowledgements_of_more_records_than_were_stored_are_lost_writes() -> None:
    assert lost_writes([ok({"id": 1}), ok({"id": 2})], 1) == (
        "lost writes: 2 acknowledged as 2 different records (id=1; id=2), 1 stored: "
        "1 acknowledged write(s) lost"
    )
    assert lost_writes([ok({"id": 1}), ok({"id": 2})], 2) is None
    assert lost_writes([ok({"id": 1}), ok({"id": 1})], 1) is None  # one record, acknowledged twice
    assert lost_writes([ok({"name": "a"}), ok({"name": "b"})], 0) is None  # no ids: not judged here
    assert lost_writes([ok({"id": 1}), CallResult(Outcome.TIMEOUT)], 0) is not None


@pytest.mark.parametrize(
    ("res", "problem"),
    [
        (answer(Outcome.TOOL_ERROR, "Input validation error: 'title' is a required property"), None),
        (CallResult(Outcome.PROTOCOL_ERROR, error_code=-32602, message="Invalid params"), None),
        (answer(Outcome.OK, {"id": 1}), None),  # a default taken: not judged here
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "retryable": True}),
            "title left out got a refusal that says retryable: the same arguments cannot succeed",
        ),
        (
            CallResult(Outcome.PROTOCOL_ERROR, error_code=-32603, message="Internal error"),
            "title left out got Internal error: a model reads 'this tool is broken', not what to send",
        ),
        (
            CallResult(Outcome.TRANSPORT_ERROR, message="connection reset"),
            "title left out got transport_error: connection reset: the server broke on arguments its "
            "schema refuses",
        ),
    ],
)
def test_arguments_the_schema_refuses_get_a_clear_refusal(res: CallResult, problem: str | None) -> None:
    assert provoked_problem(res, "title left out") == problem


@pytest.mark.parametrize(
    ("res", "problem"),
    [
        (answer(Outcome.TOOL_ERROR, {**KEPT, "code": "handle_invalid"}), None),
        (CallResult(Outcome.PROTOCOL_ERROR, error_code=-32602, message="Invalid params"), None),
        (answer(Outcome.OK, "page 2"), 'a forged handle got a success: [{"type": "text", "text": "page 2"}]'),
        (
            CallResult(Outcome.PROTOCOL_ERROR, error_code=-32603, message="Internal error"),
            "a forged handle got Internal error: a model reads 'this tool is broken', not what to do",
        ),
        (CallResult(Outcome.TIMEOUT), "a forged handle got timeout"),
        (
            answer(Outcome.TOOL_ERROR, "bad cursor"),
            "a forged handle: no machine-readable body (structuredContent or JSON text)",
        ),
        (
            answer(Outcome.TOOL_ERROR, {**KEPT, "retryable": True, "retry_after_ms": 10}, retryable=True),
            "a forged handle says retryable: retrying the same handle cannot succeed",
        ),
    ],
)
def test_a_clear_refusal(res: CallResult, problem: str | None) -> None:
    assert refusal_problem(res, "a forged handle") == problem
