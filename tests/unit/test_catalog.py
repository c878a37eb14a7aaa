"""What a tool catalog says of itself, as init and contract both read it: which tools change state,
what they do (make a record, change or remove one, change a schema), what their annotations promise, the
fields of their arguments, the key (never a reference), identifiers, the free text, a valid value."""

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
    is_identifier,
    is_reference,
    leaves,
    top_level,
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
        "client_token",
        "clientRequestId",
        "dedupe_id",
        "nonce",
    ],
)
def test_key_names(name: str) -> None:
    assert idempotency_key([leaf("memo"), leaf(name)]) == leaf(name)


def test_no_key_where_none_is_named_or_the_field_is_not_text() -> None:
    assert idempotency_key([leaf("memo"), leaf("customer_id"), leaf("reference_id")]) is None
    assert idempotency_key([leaf("request_id", type="integer")]) is None


def test_a_request_id_is_a_key_only_where_its_description_says_so() -> None:
    """mark_task_done(requestId, taskId) refers to a request that exists; calling it the intent's key
    would send a fresh key where the server wants the id of a planned request."""
    assert idempotency_key([leaf("requestId"), leaf("taskId")]) is None
    described = leaf("requestId", type="string", description="Reuse it to retry the same request safely.")
    assert idempotency_key([leaf("memo"), described]) == described
    assert idempotency_key([leaf("operation_id", type="string", description="Deduplicates retries.")])


@pytest.mark.parametrize(
    ("field", "reference"),
    [
        (leaf("taskId"), True),
        (leaf("request_id"), True),
        (
            leaf(
                "entityName", type="string", description="The name of the entity to add the observations to"
            ),
            True,
        ),
        (leaf("from", type="string", description="The name of the entity where the relation starts"), True),
        (leaf("name", type="string", description="The name of the entity"), False),
        (leaf("title"), False),
        (leaf("content"), False),
    ],
)
def test_references_to_what_exists(field: Leaf, reference: bool) -> None:
    assert is_reference(field) is reference


@pytest.mark.parametrize(
    ("name", "identifier"),
    [
        ("table_name", True),
        ("path", True),
        ("column", True),
        ("entityType", True),
        ("customer_id", True),
        ("memo", False),
        ("content", False),
        ("observations", False),
        ("name", False),
    ],
)
def test_identifiers_never_carry_a_marker(name: str, identifier: bool) -> None:
    assert is_identifier(leaf(name)) is identifier


def tool(name: str, properties: dict[str, Any], *required: str, **annotations: bool) -> Tool:
    schema = {"type": "object", "properties": properties, "required": list(required)}
    return Tool.of({"name": name, "inputSchema": schema, "annotations": annotations})


TEXT = {"type": "string"}


def best(*tools: Tool) -> str:
    return max(tools, key=lambda t: t.suitability()).name


def test_what_a_tool_does() -> None:
    assert tool("create_row", {"table": TEXT, "data": {"type": "object"}}, "table").does == "makes"
    assert tool("create_table", {"table_name": TEXT}).does == "schema"
    assert tool("create_directory", {"path": TEXT}).does == "schema"
    assert tool("mark_task_done", {"taskId": TEXT}).does == "changes"
    assert tool("delete_entities", {"entityNames": TEXT}).does == "removes"
    assert tool("request_planning", {"originalRequest": TEXT}).does == "makes"
    assert tool("get_note", {"id": TEXT}, readOnlyHint=True).does == "reads"


def test_the_tool_that_makes_a_record_of_each_intent_is_preferred() -> None:
    """The choices init got wrong on servers published by others: a schema operation over a row, an
    update that takes a reference over the tool that makes records, a directory over a file."""
    row = tool("create_row", {"table": TEXT, "values": {"type": "object"}, "note": TEXT}, "table")
    assert best(tool("create_table", {"table_name": TEXT, "sql": TEXT}), row) == "create_row"
    plan = tool("request_planning", {"originalRequest": TEXT, "tasks": {"type": "array"}}, "originalRequest")
    done = tool("mark_task_done", {"requestId": TEXT, "taskId": TEXT, "completedDetails": TEXT}, "taskId")
    status = tool("update_status", {"id": TEXT, "status": TEXT}, "id")
    assert best(done, status, plan) == "request_planning"
    write = tool("write_file", {"path": TEXT, "content": TEXT}, "path", "content")
    assert best(tool("create_directory", {"path": TEXT}), tool("edit_file", {"path": TEXT}), write) == (
        "write_file"
    )
    keyed = tool("create_invoice", {"memo": TEXT, "idempotency_key": TEXT})
    assert best(tool("add_note", {"title": TEXT}), keyed) == "create_invoice"


def test_top_level_arguments_whatever_their_type() -> None:
    schema = {
        "type": "object",
        "$defs": {"E": {"type": "object", "properties": {"name": TEXT}}},
        "properties": {
            "entities": {"type": "array", "items": {"$ref": "#/$defs/E"}},
            "dry": {"$ref": "#/$defs/E"},
        },
        "required": ["entities"],
    }
    found = [(name, sub.get("type"), required) for name, sub, required in top_level(schema)]
    assert found == [("entities", "array", True), ("dry", "object", False)]


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
