"""Drafting a scenario from a tool catalog: the arguments, where the marker and the key go, the source."""

from __future__ import annotations

from harness.init.connect import probe
from harness.init.draft import check_arguments, choose_source, draft_arguments
from harness.scenario import TargetSpec

INVOICE = {
    "type": "object",
    "properties": {
        "customer_id": {"type": "string"},
        "amount_cents": {"type": "integer", "exclusiveMinimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "memo": {"type": "string", "maxLength": 200},
        "idempotency_key": {"type": "string"},
        "notify": {"type": "boolean"},
    },
    "required": ["customer_id", "amount_cents", "currency"],
}


def test_a_flat_tool_gets_its_required_fields_the_marker_and_the_key() -> None:
    draft = draft_arguments(INVOICE)
    assert draft.arguments == {
        "customer_id": "customer_id-{index}",
        "amount_cents": 1,
        "currency": "EUR",
        "memo": "{marker}",
        "idempotency_key": "{key}",
    }
    assert draft.marker is not None
    assert draft.marker.shown() == "memo"
    assert draft.key is not None
    assert draft.key.shown() == "idempotency_key"
    assert draft.notes == []


def test_nested_arrays_and_refs_are_entered_so_the_marker_can_reach_them() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Entity": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["name", "tags"],
            }
        },
        "properties": {"entities": {"type": "array", "items": {"$ref": "#/$defs/Entity"}}},
        "required": ["entities"],
    }
    draft = draft_arguments(schema)
    assert draft.arguments == {"entities": [{"name": "{marker}", "tags": ["tags-{index}"]}]}
    assert any("no argument looks like an idempotency key" in n for n in draft.notes)
    assert check_arguments(schema, draft.arguments) is None


def test_constrained_values_come_from_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "quantity": {"type": "integer", "minimum": 5, "maximum": 9},
            "note": {"type": "string"},
            "requestId": {"type": "string"},
        },
        "required": ["sku", "quantity"],
    }
    draft = draft_arguments(schema)
    assert draft.arguments["quantity"] == 5
    assert draft.arguments["note"] == "{marker}"
    assert draft.arguments["requestId"] == "{key}"
    assert check_arguments(schema, draft.arguments) is None  # the pattern's value is valid


def test_no_field_can_carry_the_marker() -> None:
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    draft = draft_arguments(schema)
    assert draft.marker is None
    assert any(n.startswith("TODO: no free-text field takes the marker") for n in draft.notes)


def test_the_source_is_the_table_with_a_column_named_like_the_marker_field() -> None:
    draft = draft_arguments(INVOICE)
    stores = [
        ("sqlite:///{data_dir}/x.db", {"audit_log": ["id", "at"], "invoices": ["id", "memo", "amount"]})
    ]
    source = choose_source(stores, [], draft.marker)
    assert source.todo is None
    assert source.section == {
        "sql": {
            "url": "sqlite:///{data_dir}/x.db",
            "query": 'SELECT "memo" AS marker, COUNT(*) AS effects FROM "invoices" GROUP BY "memo"',
        }
    }


def test_a_store_without_such_a_column_leaves_the_query_to_the_user() -> None:
    source = choose_source(
        [("{postgres_url}", {"orders": ["id", "body"]})], [], draft_arguments(INVOICE).marker
    )
    assert source.section["sql"]["query"].startswith("TODO")
    assert source.todo is not None
    assert "orders(id, body)" in source.todo


def test_a_jsonl_file_in_the_environment_is_the_source() -> None:
    draft = draft_arguments(INVOICE)
    source = choose_source([], ["{data_dir}/ledger.jsonl"], draft.marker)
    assert source.section == {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}


def test_nothing_visible_is_a_todo_for_the_url_and_the_query() -> None:
    source = choose_source([], [], None)
    assert source.section["sql"]["url"].startswith("TODO")
    assert source.todo is not None


def test_a_schema_that_says_nothing_drafts_no_arguments() -> None:
    draft = draft_arguments({})
    assert draft.arguments == {}
    assert draft.marker is None
    assert any(n.startswith("TODO: no free-text field takes the marker") for n in draft.notes)


def test_init_wires_the_smallest_scenario_around_a_target() -> None:
    plain = probe(TargetSpec(command=["server"]), 12.0)
    assert plain.target.ready_timeout_s == 12.0
    assert plain.services.postgres is None
    assert plain.audit.effects.sink is None
    target = TargetSpec(command=["server", "--db", "{postgres_url}"], env={"HOOK": "{sink_url}/calls"})
    both = probe(target, 30.0)
    assert both.services.postgres is not None
    assert both.audit.effects.sink is not None
    assert both.target.command == ["server", "--db", "{postgres_url}"]
