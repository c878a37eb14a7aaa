"""What init's trial call sends and how it reads what the call left (harness/init/trial.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.init.draft import draft_arguments
from harness.init.trial import found_in, named_values, store_outside, trial_arguments

WRITE_NOTE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "content": {"type": "string"}, "tags": {"type": "string"}},
    "required": ["name", "content"],
}


def test_every_free_text_argument_gets_a_marker_of_its_own_optional_ones_too() -> None:
    arguments, markers = trial_arguments(WRITE_NOTE, draft_arguments(WRITE_NOTE))
    assert sorted(arguments) == ["content", "name", "tags"]
    assert set(arguments.values()) == set(markers)
    assert {leaf.name for leaf in markers.values()} == {"name", "content", "tags"}


def test_an_identifier_keeps_its_drafted_value() -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    arguments, markers = trial_arguments(schema, draft_arguments(schema))
    assert arguments["path"] == "path-0"
    assert [leaf.name for leaf in markers.values()] == ["content"]
    assert named_values(arguments) == {"path-0"}


def test_the_field_the_store_keeps_a_marker_in_is_found_in_a_json_lines_record(tmp_path: Path) -> None:
    arguments, markers = trial_arguments(WRITE_NOTE, draft_arguments(WRITE_NOTE))
    record = {"name": arguments["name"], "body": arguments["content"]}
    (tmp_path / "notes.jsonl").write_text(json.dumps(record) + "\n")
    found = {(k.argument.name, k.field) for k in found_in(markers, tmp_path)}
    assert found == {("name", "name"), ("content", "body")}


def test_a_column_is_found_in_a_sqlite_table(tmp_path: Path) -> None:
    arguments, markers = trial_arguments(WRITE_NOTE, draft_arguments(WRITE_NOTE))
    with sqlite3.connect(tmp_path / "app.db") as db:
        db.execute("CREATE TABLE notes (title TEXT, details TEXT)")
        db.execute("INSERT INTO notes VALUES (?, ?)", ("x", arguments["content"]))
    db.close()
    [kept] = found_in(markers, tmp_path)
    assert (kept.argument.name, kept.field, kept.store.where) == (
        "content",
        "details",
        "sqlite:///{data_dir}/app.db",
    )


def test_a_file_named_by_the_call_makes_its_directory_the_store(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    arguments, markers = trial_arguments(schema, draft_arguments(schema))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "path-0").write_text(arguments["content"])
    [kept] = found_in(markers, tmp_path, named=named_values(arguments))
    assert (kept.store.kind, kept.store.where) == ("dir", "{data_dir}/docs")


def test_a_directory_named_by_the_call_makes_the_one_above_it_the_store(tmp_path: Path) -> None:
    """@allpepper/memory-bank-mcp writes ROOT/<projectName>/<fileName>: the drafted store was the trial
    call's own project, {data_dir}/projectName-0, where no other intent (projectName-{index}) writes."""
    schema = {
        "type": "object",
        "properties": {
            "projectName": {"type": "string"},
            "fileName": {"type": "string"},
            "content": {"type": "string"},
        },
        "required": ["projectName", "fileName", "content"],
    }
    arguments, markers = trial_arguments(schema, draft_arguments(schema))
    assert named_values(arguments) == {"projectName-0", "fileName-0"}
    (tmp_path / "banks" / "projectName-0").mkdir(parents=True)
    (tmp_path / "banks" / "projectName-0" / "fileName-0").write_text(arguments["content"])
    [kept] = found_in(markers, tmp_path, named=named_values(arguments))
    assert (kept.store.kind, kept.store.where) == ("dir", "{data_dir}/banks")
    home = found_in(markers, tmp_path / "elsewhere", home=tmp_path, named=named_values(arguments))
    assert [(k.store.where, k.home) for k in home] == [("{data_dir}/home/banks", "banks")]


@pytest.mark.parametrize(
    ("values", "outside"),
    [
        (["python", "/srv/app/server.py", "--db", "{data_dir}/app.db"], None),
        (["node", "index.js"], None),
        (["python", "server.py", "--db=/var/lib/app/app.db"], "--db=/var/lib/app/app.db"),
        (["postgresql://app@db.internal/app"], "postgresql://app@db.internal/app"),
        (["{postgres_url}"], None),
        (["/"], "/"),
    ],
)
def test_a_store_outside_the_data_directory_is_never_called_into(
    values: list[str], outside: str | None
) -> None:
    assert store_outside(values) == outside
