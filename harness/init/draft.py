"""Drafting a scenario from what a server says of itself: pure functions, no I/O.

What the catalog says (which tools change state, the fields of their
arguments, the key, the free-text fields, a value each field accepts) is
:mod:`harness.catalog`'s; here it becomes a draft: an argument template from
the tool's ``inputSchema`` (its required fields, plus ``{marker}`` in the
free-text field the store most likely keeps as written and ``{key}`` in the
key), checked against the schema, and the effect source, from the stores the
server was seen to write.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.catalog import Leaf, example_value, idempotency_key, is_free_text, leaves, words

MARKER_NAMES = [
    "memo",
    "description",
    "note",
    "notes",
    "comment",
    "title",
    "text",
    "content",
    "message",
    "body",
    "summary",
    "subject",
    "label",
    "name",
    "reference",
    "observation",
    "observations",
]


@dataclass(slots=True)
class Draft:
    """A tool's drafted arguments, where the marker and the key went, and what is left to say."""

    arguments: dict[str, Any]
    marker: Leaf | None
    key: Leaf | None
    notes: list[str] = field(default_factory=list)


def choose_marker(candidates: Sequence[Leaf]) -> Leaf | None:
    """The free-text field the store most likely keeps as written: a memo, a description, a name."""
    usable = [leaf for leaf in candidates if is_free_text(leaf)]
    for wanted in MARKER_NAMES:
        for leaf in usable:
            if wanted in words(leaf.name) or leaf.name.lower() == wanted:
                return leaf
    required = [leaf for leaf in usable if leaf.required]
    return next(iter(required or usable), None)


def _put(tree: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = tree
    for here, nxt in itertools.pairwise(path):
        if isinstance(node, dict):
            node = node.setdefault(here, [] if isinstance(nxt, int) else {})
        else:  # a list: the first item
            if not node:
                node.append([] if isinstance(nxt, int) else {})
            node = node[0]
    last = path[-1]
    if isinstance(node, dict):
        node[last] = value
    elif not node:
        node.append(value)
    else:
        node[0] = value


def draft_arguments(schema: Mapping[str, Any]) -> Draft:
    """Arguments for a tool: its required fields, plus the fields that carry the marker and the key."""
    found = list(leaves(schema))
    marker = choose_marker(found)
    key = idempotency_key(found)
    arguments: dict[str, Any] = {}
    notes: list[str] = []
    for leaf in found:
        if leaf.required or leaf in (marker, key):
            if leaf == marker:
                value: Any = "{marker}"
            elif leaf == key:
                value = "{key}"
            else:
                value = example_value(leaf)
                if value is None:
                    notes.append(f"TODO: no valid value found for {leaf.shown()}; fill it in")
                    value = "TODO"
            _put(arguments, leaf.path, value)
    if marker is None:
        notes.append(
            "TODO: no free-text field takes the marker; put {marker} into a field the store keeps as written"
        )
    if key is None:
        notes.append(
            "finding: no argument looks like an idempotency key, so a retry cannot be told from a new call; "
            "client.key_in: meta sends the intent's key in _meta, for servers that read it there"
        )
    problem = check_arguments(schema, arguments)
    if problem:
        notes.append(f"TODO: the drafted arguments do not validate against the tool's inputSchema: {problem}")
    return Draft(arguments, marker, key, notes)


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why the arguments (placeholders filled with sample values) fail the schema, or None."""
    import jsonschema  # type: ignore[import-untyped]

    def sample(node: Any) -> Any:
        if isinstance(node, str):
            return (
                node.replace("{marker}", "m-0123456789abcdef")
                .replace("{key}", "k-0123")
                .replace("{index}", "0")
            )
        if isinstance(node, dict):
            return {k: sample(v) for k, v in node.items()}
        if isinstance(node, list):
            return [sample(v) for v in node]
        return node

    try:
        jsonschema.validate(sample(copy.deepcopy(dict(arguments))), dict(schema))
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "(top level)"
        return f"{where}: {exc.message}"[:200]
    except jsonschema.SchemaError:
        return None  # a schema the validator cannot read is no reason to refuse a draft
    return None


# -- the effect source


@dataclass(frozen=True, slots=True)
class Source:
    """The drafted ``audit.effects`` section and what the user must still do about it."""

    section: dict[str, Any]
    todo: str | None
    why: str


def choose_source(
    stores: Sequence[tuple[str, Mapping[str, Sequence[str]]]], jsonl_paths: Sequence[str], marker: Leaf | None
) -> Source:
    """SQL over a store the server was seen to write (with the query, where a column is named like the
    marker's field), else a JSON-lines file from its environment, else a SQL source to fill in."""
    field_name = marker.name.lower() if marker else None
    for url, tables in stores:
        for table, columns in tables.items():
            column = next((c for c in columns if field_name and c.lower() == field_name), None)
            if column is not None:
                query = f'SELECT "{column}" AS marker, COUNT(*) AS effects FROM "{table}" GROUP BY "{column}"'
                why = f"the server created table {table} with a column {column}, like the marker's field"
                return Source({"sql": {"url": url, "query": query}}, None, why)
    if stores:
        url, tables = stores[0]
        listing = "; ".join(f"{t}({', '.join(c)})" for t, c in tables.items()) or "no tables yet"
        query = (
            "TODO: SELECT <column holding the marker> AS marker, COUNT(*) AS effects FROM <table> GROUP BY 1"
        )
        return Source(
            {"sql": {"url": url, "query": query}},
            f"write the query; the store has: {listing}",
            "the server writes this store",
        )
    if jsonl_paths:
        section = {"jsonl": {"path": jsonl_paths[0], "marker_field": field_name or "TODO"}}
        todo = None if field_name else "name the field of each line that holds the marker"
        return Source(section, todo, f"the server's environment names {jsonl_paths[0]}")
    query = "TODO: SELECT <column holding the marker> AS marker, COUNT(*) AS effects FROM <table> GROUP BY 1"
    return Source(
        {"sql": {"url": "TODO: sqlite:///{data_dir}/<file> or {postgres_url}", "query": query}},
        "say where the server keeps its effects (or use sink, tool, command, jsonl: see scenarios/README.md)",
        "no store was visible in the server's environment",
    )
