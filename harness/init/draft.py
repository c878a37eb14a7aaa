"""Drafting a scenario from what a server says of itself: pure functions, no I/O.

Which tools change state (annotations first, then the verb their name or
description starts with); an argument template built from the tool's
``inputSchema`` (structure walked here, so arrays get an item and nested
fields are reachable; constrained leaves get a valid value from
hypothesis-jsonschema's minimal example); where ``{marker}`` and ``{key}`` go;
and the effect source, from the stores the server was seen to write.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STATE_VERBS = frozenset(
    [
        "create",
        "add",
        "insert",
        "update",
        "delete",
        "remove",
        "send",
        "post",
        "write",
        "set",
        "put",
        "charge",
        "pay",
        "transfer",
        "book",
        "order",
        "submit",
        "upload",
        "publish",
        "cancel",
        "move",
        "rename",
        "edit",
        "save",
        "store",
        "register",
        "assign",
        "approve",
        "refund",
        "issue",
        "make",
        "append",
        "modify",
        "patch",
        "archive",
        "close",
        "start",
        "stop",
        "run",
        "execute",
        "trigger",
        "invite",
        "schedule",
        "reserve",
        "deploy",
        "record",
        "log",
        "enqueue",
        "push",
        "commit",
        "apply",
        "mark",
    ]
)
READ_VERBS = frozenset(
    [
        "get",
        "list",
        "search",
        "find",
        "read",
        "count",
        "describe",
        "show",
        "query",
        "fetch",
        "lookup",
        "check",
        "view",
        "browse",
        "inspect",
        "open",
        "explain",
        "estimate",
        "preview",
        "validate",
        "ping",
        "echo",
    ]
)
KEY_NAME = re.compile(r"idempot|dedup|requestid|clienttoken|operationid|uniquekey|nonce|clientreference")
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
MARKER_MIN_LENGTH = 24
"""A field the marker goes into must take at least this many characters (a marker has about 20)."""


def _words(text: str) -> list[str]:
    """Lower-case words of a name or sentence: ``createInvoice`` and ``create_invoice`` alike."""
    return re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower())


def _verb(word: str) -> str:
    """``creates`` -> ``create``, ``adds`` -> ``add``: a description's verb as a name's."""
    for suffix, cut in (("ies", "y"), ("es", ""), ("s", "")):
        stem = word[: -len(suffix)] + cut if word.endswith(suffix) else None
        if stem and (stem in STATE_VERBS or stem in READ_VERBS or stem + "e" in STATE_VERBS):
            return stem if stem in STATE_VERBS or stem in READ_VERBS else stem + "e"
    return word


@dataclass(frozen=True, slots=True)
class Classified:
    name: str
    changes_state: bool
    why: str


def classify(tool: Mapping[str, Any]) -> Classified:
    """Whether a tool changes state, and what says so."""
    name = str(tool["name"])
    ann = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    assert isinstance(ann, dict)
    if ann.get("readOnlyHint") is True:
        return Classified(name, False, "readOnlyHint: true")
    if ann.get("destructiveHint") is True:
        return Classified(name, True, "destructiveHint: true")
    if ann.get("readOnlyHint") is False:
        return Classified(name, True, "readOnlyHint: false")
    for source, text in (("name", name), ("description", str(tool.get("description") or ""))):
        words = _words(text)
        if words:
            verb = _verb(words[0])
            if verb in STATE_VERBS:
                return Classified(name, True, f"its {source} starts with '{words[0]}'")
            if verb in READ_VERBS:
                return Classified(name, False, f"its {source} starts with '{words[0]}'")
    return Classified(name, True, "nothing says it only reads (no annotations, no telling verb)")


# -- argument templates


@dataclass(frozen=True, slots=True)
class Leaf:
    path: tuple[str | int, ...]
    schema: Mapping[str, Any]
    required: bool
    """Required all the way from the top (an optional field inside a required one is not)."""

    @property
    def name(self) -> str:
        return next((str(p) for p in reversed(self.path) if isinstance(p, str)), "")

    def shown(self) -> str:
        return ".".join(str(p) for p in self.path)


@dataclass(slots=True)
class Draft:
    arguments: dict[str, Any]
    marker: Leaf | None
    key: Leaf | None
    notes: list[str] = field(default_factory=list)


def _resolve(node: Any, root: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any]:
    """Follow local ``$ref`` and take the first usable branch of ``anyOf``/``oneOf``/``allOf``."""
    if not isinstance(node, Mapping) or depth > 20:
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, root, depth + 1)
    for combinator in ("anyOf", "oneOf", "allOf"):
        options = node.get(combinator)
        if isinstance(options, list) and options:
            usable = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"] or options
            rest = {k: v for k, v in node.items() if k != combinator}
            return _resolve({**rest, **usable[0]}, root, depth + 1)
    return node


def _type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    return str(kind)


def leaves(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Iterator[Leaf]:
    """Every scalar field of a tool's arguments, arrays entered at their first item."""
    root = schema if root is None else root

    def walk(node: Any, path: tuple[str | int, ...], required: bool, depth: int) -> Iterator[Leaf]:
        node = _resolve(node, root)
        kind = _type(node)
        if depth > 12:
            return
        if kind == "object":
            needed = set(node.get("required") or ())
            for name, sub in (node.get("properties") or {}).items():
                yield from walk(sub, (*path, name), required and name in needed, depth + 1)
        elif kind == "array":
            yield from walk(node.get("items") or {}, (*path, 0), required, depth + 1)
        else:
            yield Leaf(path, node, required)

    return walk(schema, (), True, 0)


def _takes_marker(leaf: Leaf) -> bool:
    s = leaf.schema
    if _type(s) != "string" or any(k in s for k in ("enum", "const", "pattern", "format")):
        return False
    return int(s.get("maxLength", MARKER_MIN_LENGTH)) >= MARKER_MIN_LENGTH


def choose_marker(candidates: Sequence[Leaf]) -> Leaf | None:
    """The free-text field the store most likely keeps as written: a memo, a description, a name."""
    usable = [leaf for leaf in candidates if _takes_marker(leaf)]
    for wanted in MARKER_NAMES:
        for leaf in usable:
            if wanted in _words(leaf.name) or leaf.name.lower() == wanted:
                return leaf
    required = [leaf for leaf in usable if leaf.required]
    return next(iter(required or usable), None)


def choose_key(candidates: Sequence[Leaf]) -> Leaf | None:
    """A field that looks like an idempotency key, if the tool has one."""
    for leaf in candidates:
        if _type(leaf.schema) == "string" and KEY_NAME.search(re.sub(r"[^a-z]", "", leaf.name.lower())):
            return leaf
    return None


def minimal_value(schema: Mapping[str, Any]) -> Any:
    """A valid value for a constrained scalar: hypothesis-jsonschema's minimal example (None if none)."""
    import warnings

    from hypothesis import HealthCheck, find, settings
    from hypothesis.errors import HypothesisException
    from hypothesis_jsonschema import from_schema

    quiet = settings(database=None, max_examples=200, suppress_health_check=list(HealthCheck), deadline=None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return find(from_schema(dict(schema)), lambda _: True, settings=quiet)
    except (HypothesisException, ValueError, TypeError, RecursionError):
        return None


def leaf_value(leaf: Leaf) -> Any:
    s = leaf.schema
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list) and s["enum"]:
        return s["enum"][0]
    if "default" in s and s["default"] is not None:
        return s["default"]
    kind = _type(s)
    constrained = any(
        k in s
        for k in ("pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum")
    )
    if kind == "string" and not constrained:
        return f"{leaf.name or 'value'}-{{index}}"
    if kind in ("integer", "number") and _allows_one(s):
        return 1  # not 0: an amount, a count or a quantity of 0 is what servers reject most
    if kind == "boolean":
        return False
    return minimal_value(s)


def _allows_one(schema: Mapping[str, Any]) -> bool:
    def bound(name: str) -> float | None:
        value = schema.get(name)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    low, high = bound("minimum"), bound("maximum")
    above, below = bound("exclusiveMinimum"), bound("exclusiveMaximum")
    return (
        "multipleOf" not in schema
        and (low is None or low <= 1)
        and (high is None or high >= 1)
        and (above is None or above < 1)
        and (below is None or below > 1)
    )


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
    key = choose_key(found)
    arguments: dict[str, Any] = {}
    notes: list[str] = []
    for leaf in found:
        if leaf.required or leaf in (marker, key):
            if leaf == marker:
                value: Any = "{marker}"
            elif leaf == key:
                value = "{key}"
            else:
                value = leaf_value(leaf)
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
