"""Drafting a scenario from what a server says of itself: pure functions, no I/O.

What the catalog says (which tools change state, the fields of their
arguments, the key, the free-text fields, a value each field accepts) is
:mod:`harness.catalog`'s; here it becomes a draft: an argument template from
the tool's ``inputSchema`` (its required fields, required objects included,
plus ``{marker}`` in the free-text field the store most likely keeps as written,
never an identifier such as a table, a path or an id, and ``{key}`` in the
key), checked against the schema, and the effect source, from the stores the
server was seen to write: SQL over a table, a JSON-lines file, or the files of a
directory (or a JSON document), counted by the markers in them; else the calls
to an API whose base URL its environment holds, through the downstream proxy.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.catalog import (
    MAX_FIELD_DEPTH,
    Leaf,
    Search,
    idempotency_key,
    is_free_text,
    is_identifier,
    json_type,
    leaves,
    names_database_object,
    obvious_value,
    resolve,
    searched_value,
    words,
)
from harness.effects.base import Drafted, SeenStore
from harness.effects.registry import drafts
from harness.effects.sql import SQL_TODO
from harness.history import excerpt

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
    """The free-text field the store most likely keeps as written: a memo, a description, a name;
    never an identifier (a table, a column, a path, an id, a reference to something that exists)."""
    usable = [leaf for leaf in candidates if is_free_text(leaf) and not is_identifier(leaf)]
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


@dataclass(frozen=True, slots=True)
class Checked:
    """The drafted arguments against the schema: with the required empty objects and arrays filled in,
    and why they still fail it (None: they pass); ``unchecked`` says why they could not be checked."""

    arguments: dict[str, Any]
    problem: str | None = None
    unchecked: str | None = None


@dataclass(frozen=True, slots=True)
class TooSlow:
    """A search or a check abandoned at its deadline (``harness.init.values``)."""

    seconds: float

    def said(self, doing: str) -> str:
        return (
            f"{doing} took longer than {self.seconds:.0f}s and was abandoned (a pattern that backtracks, "
            "or a search that rarely succeeds)"
        )


@dataclass(slots=True)
class Plan:
    """What the schema's walk decided (which fields are drafted, with which value, where the marker and
    the key go), before the values only a search can find: the fast and bounded part of a draft."""

    schema: Mapping[str, Any]
    fields: list[tuple[Leaf, Any]]
    """Each drafted field and its value: a value, a placeholder, a TODO, or a :class:`Search`."""
    marker: Leaf | None
    key: Leaf | None
    notes: list[str]

    @property
    def searches(self) -> list[tuple[Leaf, Search]]:
        """The fields whose value only a search of their schema can find or confirm, in order."""
        return [(leaf, value) for leaf, value in self.fields if isinstance(value, Search)]

    def arguments(self, found: Sequence[Any]) -> dict[str, Any]:
        """The arguments, with ``found`` what the search gave for each of :attr:`searches`: a value, None
        (there is none) or TooSlow; either of the last two is a TODO with a note."""
        values = iter(found)
        arguments: dict[str, Any] = {}
        for leaf, planned in self.fields:
            value = next(values, None) if isinstance(planned, Search) else planned
            if isinstance(value, TooSlow):
                self.notes.append(f"TODO: {value.said(f'finding a value for {_shown(leaf)}')}; fill it in")
                value = "TODO"
            elif value is None:
                self.notes.append(f"TODO: no valid value found for {_shown(leaf)}; fill it in")
                value = "TODO"
            _put(arguments, leaf.path, value)
        return arguments

    def draft(self, checked: Checked) -> Draft:
        notes = list(self.notes)
        if self.marker is None:
            notes.append(
                "TODO: no free-text field takes the marker; put {marker} into a field the store keeps "
                "as written"
            )
        if self.key is None:
            notes.append(
                "finding: no argument is an idempotency key, so a retry cannot be told from a new call; "
                "client.key_in: meta sends the intent's key in _meta, for servers that read it there"
            )
        if checked.problem:
            said = checked.problem
            notes.append(
                f"TODO: the drafted arguments do not validate against the tool's inputSchema: {said}"
            )
        elif checked.unchecked:
            said = checked.unchecked
            notes.append(f"the drafted arguments were not checked against the tool's inputSchema: {said}")
        return Draft(checked.arguments, self.marker, self.key, notes)


NAME_LIMIT = 80
"""Characters of a field's path a note quotes: a schema's names are the server's, of any length."""


def _shown(leaf: Leaf) -> str:
    return excerpt(leaf.shown(), NAME_LIMIT)


def plan_arguments(schema: Mapping[str, Any], marker: Leaf | None = None) -> Plan:
    """The fields drafted: the required ones, plus those that carry the marker and the key; ``marker``:
    the field a trial call showed the store keeps (else the likeliest, :func:`choose_marker`)."""
    found = list(leaves(schema))
    marker = marker if marker in found else choose_marker(found)
    key = idempotency_key(found)
    fields: list[tuple[Leaf, Any]] = []
    notes: list[str] = []
    for leaf in found:
        if not (leaf.required or leaf in (marker, key)):
            continue
        if leaf == marker:
            value: Any = "{marker}"
        elif leaf == key:
            value = "{key}"
        elif names_database_object(leaf) and json_type(leaf.schema) == "string" and "enum" not in leaf.schema:
            value = f"TODO: an existing {' '.join(words(leaf.name))}"
            notes.append(f"TODO: {_shown(leaf)} names something in the store that only you know; fill it in")
        else:
            value = obvious_value(leaf)
        fields.append((leaf, value))
    return Plan(schema, fields, marker, key, notes)


REFUSAL_LIMIT = 160
"""Characters of the server's refusal a TODO quotes."""


def value_at(tree: Any, path: tuple[str | int, ...]) -> Any:
    """The value at a leaf's path in drafted arguments (a list's first item stands for its items)."""
    node = tree
    for here in path:
        if isinstance(node, dict):
            node = node.get(here)
        elif isinstance(node, list) and node:
            node = node[0]
        else:
            return None
    return node


def refused(draft: Draft, schema: Mapping[str, Any], refusal: str) -> Draft:
    """The draft after the server refused a trial call with it (``refusal``: what it answered): every
    drafted per-intent identifier (``db_name-{index}``, ``contact_id-{index}``: a name made up for each
    intent, of a thing that has to exist) becomes a TODO quoting the refusal, as only the user can name
    one that exists."""
    arguments = copy.deepcopy(draft.arguments)
    notes = list(draft.notes)
    said = excerpt(refusal, REFUSAL_LIMIT)
    for leaf in leaves(schema):
        value = value_at(arguments, leaf.path)
        if not (isinstance(value, str) and "{index}" in value and is_identifier(leaf)):
            continue
        sample = value.replace("{index}", "0")
        _put(arguments, leaf.path, f"TODO: an existing {' '.join(words(leaf.name))}")
        notes.append(
            f"TODO: {_shown(leaf)} was drafted as {sample!r}, and the server refused the trial call with "
            f"it: {said!r}; name one that exists"
        )
    return Draft(arguments, draft.marker, draft.key, notes)


def draft_arguments(schema: Mapping[str, Any]) -> Draft:
    """Arguments for a tool, drafted in this process with no bound on time: searches and the check run
    here. ``init`` drafts through :func:`harness.init.values.draft_bounded`, which cannot hang."""
    plan = plan_arguments(schema)
    arguments = plan.arguments([searched_value(leaf.schema, search) for leaf, search in plan.searches])
    return plan.draft(check_arguments(schema, arguments))


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> Checked:
    """The arguments with the required properties no scalar field reached filled in (an empty object or
    array, so the draft validates), and why they fail the schema (placeholders filled with sample values).

    A schema the validator cannot read (a dangling ``$ref``, a recursion deeper than Python's stack,
    a pattern ``re`` refuses) is no reason to refuse a draft: it is said in ``unchecked``.
    """
    import jsonschema  # type: ignore[import-untyped]

    filled = copy.deepcopy(dict(arguments))
    try:
        validator = jsonschema.validators.validator_for(schema)(dict(schema))
        _fill_required(validator, schema, filled)
        error = jsonschema.exceptions.best_match(validator.iter_errors(sample_arguments(filled)))
    except RecursionError:
        return Checked(filled, unchecked="it nests deeper than the validator can follow")
    except Exception as exc:  # the validator's reading of the server's schema, whatever it raised
        return Checked(filled, unchecked=excerpt(str(exc) or type(exc).__name__, 200))
    if error is None:
        return Checked(filled)
    where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    return Checked(filled, problem=excerpt(f"{where}: {error.message}", 200))


def _fill_required(validator: Any, schema: Mapping[str, Any], arguments: dict[str, Any]) -> None:
    """Required properties no scalar field reached (an object with no properties, or none required, an
    array of them): an empty one of their type, so the draft validates."""
    empty = {"object": dict, "array": list}
    for _ in range(MAX_FIELD_DEPTH + 8):  # each round fills one level of nesting
        filled = False
        for error in validator.iter_errors(sample_arguments(arguments)):
            if error.validator != "required":
                continue
            node: Any = arguments
            for part in error.absolute_path:
                node = node[part]
            properties = (error.schema or {}).get("properties") or {}
            for name in error.validator_value:
                sub = properties.get(name) if isinstance(properties, Mapping) else None
                kind = json_type(resolve(sub, schema))
                if isinstance(node, dict) and name not in node and kind in empty:
                    node[name] = empty[kind]()
                    filled = True
        if not filled:
            return


def sample_arguments(arguments: Any) -> Any:
    """The drafted arguments with their placeholders filled with sample values, as one call sends them."""
    if isinstance(arguments, str):
        return (
            arguments.replace("{marker}", "init0000-m0000000")
            .replace("{key}", "init-key-0")
            .replace("{index}", "0")
        )
    if isinstance(arguments, dict):
        return {k: sample_arguments(v) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [sample_arguments(v) for v in arguments]
    return arguments


# -- the effect source


API_URL = re.compile(r"(https?://[^/\s{}?#]+)(/[^\s{}]*)?")
"""A variable's value that is an HTTP API's base URL (no placeholder in it): its origin, then its path."""


def downstream_of(env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The environment with the first HTTP API base URL it holds pointed at the downstream proxy
    (``{downstream_url}`` and the URL's path), and that URL's origin (the proxy's upstream), or None."""
    for name, value in env.items():
        found = API_URL.fullmatch(value)
        if found is not None:
            return {**env, name: "{downstream_url}" + (found.group(2) or "")}, found.group(1)
    return dict(env), None


def choose_source(
    stores: Sequence[SeenStore],
    marker: Leaf | None,
    *,
    remote: bool = False,
    stdio: bool = False,
    field: str | None = None,
) -> Drafted:
    """Where the effects are counted: the most specific of every effect source's drafts (SQL over a
    table with a column named like the marker's field; a JSON-lines file by that field; a JSON
    document, another file or a directory by the markers in their files, read in the format they were
    seen in; a SQL store whose query is left to
    write); else a source to fill in (for a ``remote`` server, one that already runs: its own store,
    as the harness reaches it; a ``stdio`` server's list leaves out the read tool, called over HTTP).
    ``field``: the store's own name for the marker's field, where a trial call showed it."""
    others = "sink, command, jsonl, files" if stdio else "sink, tool, command, jsonl, files"
    field_name = field if field is not None else marker.name.lower() if marker else None
    best = min(drafts(stores, field_name), key=lambda d: d.rank, default=None)
    if best is not None:
        return best
    if remote:
        return Drafted(
            {
                "sql": {
                    "url": "TODO: sqlite:////path/to/store.db or postgresql://user@host/db",
                    "query": SQL_TODO,
                }
            },
            "say where the server keeps its effects, as reachable from where the harness runs (its "
            "database, a port-forward to it; or use tool, command, jsonl, files: see scenarios/README.md)",
            "the server already runs: init cannot see its store",
        )
    return Drafted(
        {"sql": {"url": "TODO: sqlite:///{data_dir}/<file> or {postgres_url}", "query": SQL_TODO}},
        "say where the server keeps its effects (a path inside {data_dir} in its command line or "
        f"environment is found by init; or use {others}: see scenarios/README.md)",
        "no store was visible in the server's command line or environment",
    )
