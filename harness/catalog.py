"""What a tool catalog says of itself: pure functions over ``tools/list`` entries, no I/O.

``init`` reads a catalog to draft a scenario, ``contract`` to judge one; both
need the same answers, so they are given here once: what a tool's annotations
promise, whether it changes state (annotations first, then the verb its name
or description starts with), the scalar fields of its arguments (``$ref`` and
combinators resolved, arrays entered at their first item), which of them is
the idempotency key, which are free text (could carry a marker), and a value
each field accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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
"""An idempotency key's name, lower-cased with everything but letters removed."""
FREE_TEXT_MIN_LENGTH = 24
"""A free-text field takes at least this many characters (a marker has about 20)."""


def words(text: str) -> list[str]:
    """Lower-case words of a name or sentence: ``createInvoice`` and ``create_invoice`` alike."""
    return re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower())


def _verb(word: str) -> str:
    """``creates`` -> ``create``, ``adds`` -> ``add``: a description's verb as a name's."""
    for suffix, cut in (("ies", "y"), ("es", ""), ("s", "")):
        stem = word[: -len(suffix)] + cut if word.endswith(suffix) else None
        if stem and (stem in STATE_VERBS or stem in READ_VERBS or stem + "e" in STATE_VERBS):
            return stem if stem in STATE_VERBS or stem in READ_VERBS else stem + "e"
    return word


# -- annotations and state


@dataclass(frozen=True, slots=True)
class Annotations:
    """What a tool's annotations promise; None where it declares nothing (or not a boolean).

    The protocol's defaults (not read-only, destructive, not idempotent) are what a
    client may assume when nothing is declared; a check judges only what was declared.
    """

    read_only: bool | None
    destructive: bool | None
    idempotent: bool | None
    open_world: bool | None
    declared: Mapping[str, Any]
    """As the server sent them (empty when it sent none)."""

    @classmethod
    def of(cls, tool: Mapping[str, Any]) -> Annotations:
        declared = tool.get("annotations")
        ann: Mapping[str, Any] = declared if isinstance(declared, Mapping) else {}

        def hint(name: str) -> bool | None:
            value = ann.get(name)
            return value if isinstance(value, bool) else None

        return cls(
            hint("readOnlyHint"), hint("destructiveHint"), hint("idempotentHint"), hint("openWorldHint"), ann
        )


@dataclass(frozen=True, slots=True)
class Classified:
    """Whether a tool changes state, and what in the catalog says so."""

    name: str
    changes_state: bool
    why: str


def classify(tool: Mapping[str, Any]) -> Classified:
    """Whether a tool changes state: its annotations first, then the verb its name or description starts
    with; a tool that says nothing is taken to change state (the safe side for a retry)."""
    name = str(tool.get("name"))
    ann = Annotations.of(tool)
    if ann.read_only is True:
        return Classified(name, False, "readOnlyHint: true")
    if ann.destructive is True:
        return Classified(name, True, "destructiveHint: true")
    if ann.read_only is False:
        return Classified(name, True, "readOnlyHint: false")
    for source, text in (("name", name), ("description", str(tool.get("description") or ""))):
        found = words(text)
        if found:
            verb = _verb(found[0])
            if verb in STATE_VERBS:
                return Classified(name, True, f"its {source} starts with '{found[0]}'")
            if verb in READ_VERBS:
                return Classified(name, False, f"its {source} starts with '{found[0]}'")
    return Classified(name, True, "nothing says it only reads (no annotations, no telling verb)")


# -- arguments


@dataclass(frozen=True, slots=True)
class Leaf:
    """One scalar field of a tool's arguments, where it sits and what its schema says."""

    path: tuple[str | int, ...]
    schema: Mapping[str, Any]
    required: bool
    """Required all the way from the top (an optional field inside a required one is not)."""

    @property
    def name(self) -> str:
        return next((str(p) for p in reversed(self.path) if isinstance(p, str)), "")

    def shown(self) -> str:
        return ".".join(str(p) for p in self.path)


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


def json_type(schema: Mapping[str, Any]) -> str:
    """The one JSON type a schema node stands for (``null`` set aside; guessed from its keywords)."""
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
        kind = json_type(node)
        if depth > 12:
            return
        if kind == "object":
            needed = set(node.get("required") or ())
            for name, sub in (node.get("properties") or {}).items():
                yield from walk(sub, (*path, name), required and name in needed, depth + 1)
        elif kind == "array":
            yield from walk(node.get("items") or {}, (*path, 0), required, depth + 1)
        elif path:  # arguments are an object: a root that is not one has no fields
            yield Leaf(path, node, required)

    return walk(schema, (), True, 0)


def idempotency_key(candidates: Sequence[Leaf]) -> Leaf | None:
    """The field that looks like an idempotency key, if the tool has one."""
    for leaf in candidates:
        if json_type(leaf.schema) == "string" and KEY_NAME.search(re.sub(r"[^a-z]", "", leaf.name.lower())):
            return leaf
    return None


def is_free_text(leaf: Leaf) -> bool:
    """A string kept as written, long enough for a marker: no enum, pattern or format, no short limit."""
    s = leaf.schema
    if json_type(s) != "string" or any(k in s for k in ("enum", "const", "pattern", "format")):
        return False
    return int(s.get("maxLength", FREE_TEXT_MIN_LENGTH)) >= FREE_TEXT_MIN_LENGTH


@dataclass(frozen=True, slots=True)
class Tool:
    """One catalog entry as init and contract read it."""

    name: str
    description: str
    annotations: Annotations
    state: Classified
    arguments: tuple[Leaf, ...]
    key: Leaf | None
    """The argument that carries an idempotency key; None when the tool takes none."""
    free_text: tuple[Leaf, ...]
    """The arguments that could carry a marker, in schema order."""

    @classmethod
    def of(cls, tool: Mapping[str, Any]) -> Tool:
        schema = tool.get("inputSchema")
        arguments = tuple(leaves(schema if isinstance(schema, Mapping) else {}))
        return cls(
            name=str(tool.get("name")),
            description=str(tool.get("description") or "").strip(),
            annotations=Annotations.of(tool),
            state=classify(tool),
            arguments=arguments,
            key=idempotency_key(arguments),
            free_text=tuple(leaf for leaf in arguments if is_free_text(leaf)),
        )


# -- values a field accepts


def minimal_example(schema: Mapping[str, Any]) -> Any:
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


def example_value(leaf: Leaf) -> Any:
    """A value the field accepts: its const, first enum value or default; ``NAME-{index}`` for plain
    text; 1 for a number that allows it; else the schema's minimal example (None if there is none)."""
    s = leaf.schema
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list) and s["enum"]:
        return s["enum"][0]
    if "default" in s and s["default"] is not None:
        return s["default"]
    kind = json_type(s)
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
    return minimal_example(s)


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
