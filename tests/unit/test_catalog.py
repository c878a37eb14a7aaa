"""What a tool catalog says of itself, as init and contract both read it: which tools change state,
what their annotations promise, the fields of their arguments, the key, the free text, a valid value."""

from __future__ import annotations

import re
from typing import Any

import pytest

from harness.catalog import (
    Annotations,
    Leaf,
    Tool,
    classify,
    example_value,
    idempotency_key,
    is_free_text,
    leaves,
)


@pytest.mark.parametrize(
    ("tool", "changes", "why"),
    [
        ({"name": "lookup", "annotations": {"readOnlyHint": True}}, False, "readOnlyHint: true"),
        ({"name": "purge", "annotations": {"destructiveHint": True}}, True, "destructiveHint: true"),
        ({"name": "sync", "annotations": {"readOnlyHint": False}}, True, "readOnlyHint: false"),
        # Annotations outrank the name: a read-only "create_report" only reads.
        ({"name": "create_report", "annotations": {"readOnlyHint": True}}, False, "readOnlyHint: true"),
        # A hint that is not a boolean says nothing; the verb decides.
        ({"name": "get_invoice", "annotations": {"readOnlyHint": "no"}}, False, "its name starts with 'get'"),
        ({"name": "createInvoice"}, True, "its name starts with 'create'"),
        ({"name": "list_orders"}, False, "its name starts with 'list'"),
        (
            {"name": "invoices", "description": "Creates an invoice."},
            True,
            "its description starts with 'creates'",
        ),
        (
            {"name": "invoices", "description": "Searches invoices."},
            False,
            "its description starts with 'searches'",
        ),
        ({"name": "invoices", "description": "Queries the ledger."}, False, "starts with 'queries'"),
        ({"name": "frobnicate"}, True, "nothing says it only reads"),
    ],
)
def test_classify(tool: dict[str, Any], changes: bool, why: str) -> None:
    found = classify(tool)
    assert found.changes_state is changes
    assert why in found.why


def test_annotations_say_what_they_declare_and_nothing_more() -> None:
    ann = Annotations.of({"name": "t", "annotations": {"idempotentHint": True, "readOnlyHint": False}})
    assert (ann.read_only, ann.destructive, ann.idempotent, ann.open_world) == (False, None, True, None)
    assert ann.declared == {"idempotentHint": True, "readOnlyHint": False}
    for tool in ({"name": "t"}, {"name": "t", "annotations": None}, {"name": "t", "annotations": ["x"]}):
        none = Annotations.of(tool)
        assert none.declared == {}
        assert (none.read_only, none.destructive, none.idempotent, none.open_world) == (None,) * 4


def test_leaves_of_a_schema_without_types() -> None:
    assert [leaf.shown() for leaf in leaves({"properties": {"a": {}, "b": {"items": {}}}})] == ["a", "b.0"]


def test_leaves_follow_refs_and_combinators_and_carry_required_from_the_top() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Money": {"type": "object", "properties": {"cents": {"type": "integer"}}, "required": ["cents"]}
        },
        "properties": {
            "amount": {"$ref": "#/$defs/Money"},
            "refund": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Money"}]},
            "memo": {"type": ["string", "null"]},
        },
        "required": ["amount"],
    }
    found = {leaf.shown(): leaf for leaf in leaves(schema)}
    assert list(found) == ["amount.cents", "refund.cents", "memo"]
    assert found["amount.cents"].required
    assert not found["refund.cents"].required  # required inside an optional field: not required
    assert found["refund.cents"].name == "cents"
    assert found["memo"].schema["type"] == ["string", "null"]


def test_leaves_of_a_schema_that_refers_to_itself_end() -> None:
    schema = {"$defs": {"Node": {"properties": {"child": {"$ref": "#/$defs/Node"}}}}, "$ref": "#/$defs/Node"}
    assert list(leaves(schema)) == []


def leaf(name: str, **schema: Any) -> Leaf:
    return Leaf((name,), schema or {"type": "string"}, True)


@pytest.mark.parametrize(
    "name",
    [
        "idempotency_key",
        "idempotencyKey",
        "Idempotency-Key",
        "requestId",
        "client_token",
        "dedupe_id",
        "nonce",
    ],
)
def test_key_names(name: str) -> None:
    assert idempotency_key([leaf("memo"), leaf(name)]) == leaf(name)


def test_no_key_where_none_is_named_or_the_field_is_not_text() -> None:
    assert idempotency_key([leaf("memo"), leaf("customer_id"), leaf("reference_id")]) is None
    assert idempotency_key([leaf("request_id", type="integer")]) is None


@pytest.mark.parametrize(
    ("schema", "free"),
    [
        ({"type": "string"}, True),
        ({"type": "string", "maxLength": 24}, True),
        ({"type": "string", "maxLength": 10}, False),  # a marker would not fit
        ({"type": "string", "enum": ["a", "b"]}, False),
        ({"type": "string", "pattern": "^[A-Z]+$"}, False),
        ({"type": "string", "format": "email"}, False),
        ({"type": "integer"}, False),
    ],
)
def test_free_text(schema: dict[str, Any], free: bool) -> None:
    assert is_free_text(leaf("memo", **schema)) is free


def test_a_tool_read_once() -> None:
    tool = Tool.of(
        {
            "name": "create_invoice",
            "description": "  Creates an invoice.  ",
            "annotations": {"idempotentHint": True},
            "inputSchema": {
                "type": "object",
                "properties": {
                    "currency": {"type": "string", "enum": ["EUR"]},
                    "memo": {"type": "string"},
                    "idempotency_key": {"type": "string"},
                },
                "required": ["currency"],
            },
        }
    )
    assert tool.name == "create_invoice"
    assert tool.description == "Creates an invoice."
    assert tool.state.changes_state
    assert tool.annotations.idempotent is True
    assert [a.shown() for a in tool.arguments] == ["currency", "memo", "idempotency_key"]
    assert tool.key is not None
    assert tool.key.name == "idempotency_key"
    assert [a.name for a in tool.free_text] == ["memo", "idempotency_key"]
    for schema in (None, {}, {"type": "object"}):
        bare = Tool.of({"name": "ping", "inputSchema": schema})
        assert (bare.arguments, bare.key, bare.free_text, bare.state.changes_state) == ((), None, (), False)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"const": "v1"}, "v1"),
        ({"type": "string", "enum": ["EUR", "USD"]}, "EUR"),
        ({"type": "string", "default": "draft"}, "draft"),
        ({"type": "string"}, "customer-{index}"),
        ({"type": "integer"}, 1),
        ({"type": "number", "exclusiveMinimum": 0}, 1),
        ({"type": "integer", "minimum": 5, "maximum": 9}, 5),
        ({"type": "boolean"}, False),
    ],
)
def test_example_values(schema: dict[str, Any], value: Any) -> None:
    assert example_value(leaf("customer", **schema)) == value


def test_a_constrained_string_gets_a_value_that_fits() -> None:
    value = example_value(leaf("sku", type="string", pattern="^[A-Z]{3}-[0-9]{2}$"))
    assert isinstance(value, str)
    assert re.match("^[A-Z]{3}-[0-9]{2}$", value)
    assert example_value(leaf("n", type="integer", minimum=3, maximum=2)) is None  # nothing is valid
