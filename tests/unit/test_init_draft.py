"""Drafting a scenario from a tool catalog: the arguments, where the marker and the key go, the source,
the name, and where init looks for a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.effects.base import SeenStore
from harness.errors import ScenarioError
from harness.init import Origin
from harness.init.connect import probe, store_candidates
from harness.init.draft import Checked, check_arguments, choose_source, downstream_of, draft_arguments
from harness.scenario import TargetSpec, load_scenario, parse_scenario

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
    assert any("no argument is an idempotency key" in n for n in draft.notes)
    assert check_arguments(schema, draft.arguments) == Checked(draft.arguments)


def test_constrained_values_come_from_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "quantity": {"type": "integer", "minimum": 5, "maximum": 9},
            "note": {"type": "string"},
            "requestId": {"type": "string", "description": "Send the same one to retry; it deduplicates."},
        },
        "required": ["sku", "quantity"],
    }
    draft = draft_arguments(schema)
    assert draft.arguments["quantity"] == 5
    assert draft.arguments["note"] == "{marker}"
    assert draft.arguments["requestId"] == "{key}"
    # the pattern's value is valid
    assert check_arguments(schema, draft.arguments) == Checked(draft.arguments)


@pytest.mark.parametrize(
    ("bounds", "drafted"),
    [
        ({"minLength": 1, "maxLength": 51200}, "name-{index}"),
        ({"minLength": 1}, "name-{index}"),
        ({"maxLength": 8}, ""),  # name-1234567 would not fit: the schema's minimal example
    ],
)
def test_a_name_with_length_bounds_it_fits_is_one_per_intent(bounds: dict[str, int], drafted: str) -> None:
    """@zeeg/dex's create_task(name, description) declares name with zod's .min(1): init drafted the name
    "0" for every intent, where an unbounded one gets name-{index}."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", **bounds}, "description": {"type": "string"}},
        "required": ["name", "description"],
    }
    assert draft_arguments(schema).arguments == {"name": drafted, "description": "{marker}"}


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
    source = choose_source([SeenStore("sql", *store) for store in stores], draft.marker)
    assert source.todo is None
    assert source.section == {
        "sql": {
            "url": "sqlite:///{data_dir}/x.db",
            "query": 'SELECT "memo" AS marker, COUNT(*) AS effects FROM "invoices" GROUP BY "memo"',
        }
    }


def test_a_store_without_such_a_column_leaves_the_query_to_the_user() -> None:
    source = choose_source(
        [SeenStore("sql", "{postgres_url}", {"orders": ["id", "body"]})], draft_arguments(INVOICE).marker
    )
    assert source.section["sql"]["query"].startswith("TODO")
    assert source.todo is not None
    assert "orders(id, body)" in source.todo


def test_a_jsonl_file_in_the_environment_is_the_source() -> None:
    draft = draft_arguments(INVOICE)
    source = choose_source([SeenStore("jsonl", "{data_dir}/ledger.jsonl")], draft.marker)
    assert source.section == {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}


def test_nothing_visible_is_a_todo_for_the_url_and_the_query() -> None:
    source = choose_source([], None)
    assert source.section["sql"]["url"].startswith("TODO")
    assert source.todo is not None
    assert "or use sink, tool, command, jsonl, files" in source.todo
    # A stdio server cannot be read by a read tool (called over HTTP): the TODO does not offer it.
    stdio = choose_source([], None, stdio=True)
    assert stdio.todo is not None
    assert "or use sink, command, jsonl, files" in stdio.todo


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


WRITE_FILE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
}


def test_a_directory_store_is_counted_by_the_markers_in_its_files() -> None:
    draft = draft_arguments(WRITE_FILE)
    assert draft.arguments == {"path": "path-{index}", "content": "{marker}"}  # never in the path
    source = choose_source([SeenStore("dir", "{data_dir}")], draft.marker)
    assert source.todo is None
    assert source.section == {
        "files": {"dir": "{data_dir}", "pattern": "**/*", "marker_in": "content", "format": "text"}
    }
    document = choose_source([SeenStore("json", "{data_dir}/db/notes.json")], draft.marker)
    assert document.section == {
        "files": {"dir": "{data_dir}/db", "pattern": "notes.json", "marker_in": "content", "format": "json"}
    }


def test_a_database_beside_a_directory_is_the_source() -> None:
    """A SQLite file in the directory holds the markers too; its table is what counts them."""
    stores = [
        SeenStore("sql", "sqlite:///{data_dir}/app.db", {"notes": ["id", "content"]}),
        SeenStore("dir", "{data_dir}"),
    ]
    assert "sql" in choose_source(stores, draft_arguments(WRITE_FILE).marker).section
    unmatched = [SeenStore("sql", "sqlite:///{data_dir}/app.db", {}), SeenStore("dir", "{data_dir}")]
    assert choose_source(unmatched, None).section["sql"]["query"].startswith("TODO")


def test_a_row_tool_gets_its_table_left_to_the_user_and_its_object_drafted() -> None:
    """create_record(table, data): the table is one only the user knows; data, a required object with no
    properties, is drafted empty so the draft validates; a nested required object too."""
    schema = {
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "data": {"type": "object"},
            "meta": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
            },
            "note": {"type": "string"},
        },
        "required": ["table", "data", "meta"],
    }
    draft = draft_arguments(schema)
    assert draft.arguments == {"table": "TODO: an existing table", "data": {}, "meta": {}, "note": "{marker}"}
    assert any(n.startswith("TODO: table names something in the store") for n in draft.notes)
    assert not any("do not validate" in n for n in draft.notes)


def test_the_marker_never_goes_into_an_identifier() -> None:
    schema = {
        "type": "object",
        "properties": {
            "table_name": {"type": "string"},
            "entityType": {"type": "string"},
            "title": {"type": "string"},
        },
        "required": ["table_name", "entityType"],
    }
    assert draft_arguments(schema).arguments["title"] == "{marker}"
    only_ids = {"type": "object", "properties": {"taskId": {"type": "string"}}, "required": ["taskId"]}
    assert draft_arguments(only_ids).marker is None


@pytest.mark.parametrize(
    ("command", "env", "found"),
    [
        (["server", "--db-path", "{data_dir}/app.db"], {}, ["{data_dir}/app.db"]),
        (["server", "--db={data_dir}/app.sqlite"], {}, ["{data_dir}/app.sqlite"]),
        (["node", "index.js", "{data_dir}"], {}, ["{data_dir}"]),
        (
            ["server"],
            {"MEMORY_FILE_PATH": "{data_dir}/memory.jsonl", "PORT": "{port}"},
            ["{data_dir}/memory.jsonl"],
        ),
        (["server", "/elsewhere/app.db"], {}, []),  # outside {data_dir}: init cannot see it
        (  # a store made before the server starts, in a shell line: each path once
            ["sh", "-c", "git init -q {data_dir}/repo && exec server --repository {data_dir}/repo"],
            {},
            ["{data_dir}/repo"],
        ),
        (["sh", "-c", "cd '{data_dir}/' && exec server"], {}, ["{data_dir}"]),
    ],
)
def test_stores_named_in_the_command_line_or_the_environment(
    command: list[str], env: dict[str, str], found: list[str]
) -> None:
    assert store_candidates(TargetSpec(command=command, env=env)) == found


def test_the_name_is_the_servers_own() -> None:
    origin = Origin(command="node /opt/servers/dist/index.js {data_dir}")
    assert origin.default_name("secure-filesystem-server") == "secure-filesystem-server-chaos"
    assert origin.default_name() == "dist-chaos"  # only what the path says, when the server says nothing
    assert Origin(command="python server.py --db-path {data_dir}/app.db").default_name("notes server") == (
        "notes-server-chaos"
    )


def test_a_todo_left_in_a_comment_is_refused_at_its_line(tmp_path: Path) -> None:
    """Everything init leaves to do is marked TODO, values and comments alike; a draft that still says
    so anywhere does not load, so a half-edited scenario never runs."""
    body = (
        "name: s\n"
        "target: {command: [server]}\n"
        "workload: {intents: 1, tool: t, arguments: {memo: '{marker}'}}\n"
        "# TODO: write the query\n"
        "audit: {effects: {jsonl: {path: '{data_dir}/x.jsonl'}}}  # fine\n"
    )
    path = tmp_path / "s.yaml"
    path.write_text(body)
    with pytest.raises(
        ScenarioError, match=r"s\.yaml:4: a comment still says TODO \(left by mcp-chaos init\)"
    ):
        load_scenario(path)
    path.write_text(body.replace("# TODO: write the query\n", "") + "# done: TODOs handled  \n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:5: a comment still says TODO"):
        load_scenario(path)
    path.write_text(body.replace("# TODO: write the query\n", ""))
    assert load_scenario(path).name == "s"
    data = yaml.safe_load(path.read_text())
    data["workload"]["arguments"]["data"] = {"TODO: the column that keeps text": "{marker}"}
    with pytest.raises(ScenarioError, match=r"workload\.arguments\.data\.TODO: the column"):
        parse_scenario(data)


@pytest.mark.parametrize(
    ("env", "expected", "upstream"),
    [
        (
            {"MODE": "x", "API_BASE": "https://api.example.com/v1", "OTHER": "https://b.example"},
            {"MODE": "x", "API_BASE": "{downstream_url}/v1", "OTHER": "https://b.example"},
            "https://api.example.com",
        ),
        ({"HOOK": "http://127.0.0.1:9000"}, {"HOOK": "{downstream_url}"}, "http://127.0.0.1:9000"),
        ({"DB": "postgresql://u@h/db", "S": "{sink_url}", "T": "see https://x.example"}, None, None),
    ],
)
def test_an_api_base_url_in_the_environment_is_pointed_at_the_downstream_proxy(
    env: dict[str, str], expected: dict[str, str] | None, upstream: str | None
) -> None:
    assert downstream_of(env) == (env if expected is None else expected, upstream)


def test_the_calls_to_an_api_count_the_effects_only_where_no_store_of_the_server_was_seen() -> None:
    api = SeenStore("api", "https://api.example.com")
    assert choose_source([api], None).section == {"downstream": {}}
    jsonl = SeenStore("jsonl", "{data_dir}/x.jsonl")
    assert "jsonl" in choose_source([api, jsonl], None).section


def test_a_probe_of_a_server_pointed_at_the_proxy_starts_it_with_no_upstream() -> None:
    spec = TargetSpec.model_validate({"command": ["srv"], "env": {"API": "{downstream_url}/v1"}})
    services = probe(spec, 10).services
    assert services.downstream is not None
    assert services.downstream.upstream is None  # init's own calls never reach the API


def test_a_name_that_begins_with_todo_is_not_a_todo_left_by_init() -> None:
    """A todo app's server has ``TODO_FILE`` and todos titled "TODO list": only ``TODO`` itself, or
    ``TODO: what to do``, is what init left (a scenario with either once could not be described)."""
    data: dict[str, Any] = {
        "name": "todos",
        "target": {"command": ["server"], "env": {"TODO_FILE": "{data_dir}/todos.json"}},
        "workload": {"intents": 1, "tool": "add_todo", "arguments": {"text": "TODO list {marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/todos.jsonl", "marker_field": "text"}}},
    }
    assert parse_scenario(data).target.env["TODO_FILE"] == "{data_dir}/todos.json"
    data["workload"]["arguments"]["text"] = "TODO"
    with pytest.raises(ScenarioError, match=r"workload\.arguments\.text still says TODO"):
        parse_scenario(data)
