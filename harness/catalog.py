"""What a tool catalog says of itself: pure functions over ``tools/list`` entries, no I/O.

``init`` reads a catalog to draft a scenario, ``contract`` to judge one; both
need the same answers, so they are given here once: what a tool's annotations
promise, whether it changes state (annotations first, then the verb its name
or description starts with), what it does (makes a record, changes or removes
one, or changes a schema), the scalar fields of its arguments (``$ref`` and
combinators resolved, arrays entered at their first item), which of them is
the idempotency key, which are references to something that exists or
identifiers (a table, a path: never a marker), which are free text (could carry
a marker), and a value each field accepts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

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
KEY_NAME = re.compile(r"idempot|dedup|clienttoken|clientrequestid|uniquekey|nonce")
"""An idempotency key's name, lower-cased with everything but letters removed."""
MAYBE_KEY_NAME = re.compile(r"requestid|operationid|clientreference|requestkey")
"""A name that is a key only where its description says so; elsewhere it refers to a request that exists."""
KEY_WORDS = re.compile(r"idempot|retr(y|ies)|dedup|duplicate|replay", re.I)
REFERENCE_WORDS = re.compile(
    r"\bexisting\b|\b(of|for) (the|an?) \w+ (to|that|which|whose|where|being)\b|\bidentif", re.I
)
"""An argument's description that points at something that exists ("The name of the entity to add to")."""
IDENTIFIER_WORDS = frozenset(
    [
        "table",
        "column",
        "schema",
        "index",
        "database",
        "db",
        "collection",
        "path",
        "file",
        "filename",
        "dir",
        "directory",
        "folder",
        "url",
        "uri",
        "key",
        "type",
        "kind",
        "status",
        "sql",
        "query",
        "field",
        "id",
        "ids",
        "uuid",
        "slug",
        "sku",
        "email",
        "phone",
        "code",
        "format",
        "mode",
        "lang",
        "language",
    ]
)
"""Words of a field's name that make it an identifier: a value the store does not keep as written."""
DATABASE_WORDS = frozenset(["table", "column", "schema", "database", "collection"])
"""Identifiers only the user can name: a table that exists, not a value made up for each intent."""
MAKE_VERBS = frozenset(
    [
        "create",
        "add",
        "insert",
        "write",
        "request",
        "post",
        "submit",
        "record",
        "log",
        "append",
        "save",
        "store",
        "register",
        "book",
        "order",
        "send",
        "issue",
        "enqueue",
        "push",
        "upload",
        "publish",
        "reserve",
        "schedule",
        "invite",
        "charge",
        "pay",
        "transfer",
        "make",
        "put",
        "new",
    ]
)
REMOVE_VERBS = frozenset(["delete", "remove", "drop", "clear", "purge", "destroy", "truncate", "reset"])
SCHEMA_NOUNS = frozenset(
    [
        "table",
        "tables",
        "index",
        "indexes",
        "schema",
        "column",
        "columns",
        "database",
        "collection",
        "directory",
        "folder",
        "view",
        "migration",
    ]
)
"""What a schema operation makes or drops: not a business record."""
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


MAX_REF_DEPTH = 20
"""``$ref`` and combinators followed in a row at most: a cycle (``$ref: "#"``) ends there."""
MAX_FIELD_DEPTH = 12
"""Levels of objects and arrays entered at most: a recursive or 100-level schema ends there."""


def _pointer(root: Any, ref: str) -> Any:
    """The node a local ``$ref`` (``#``, ``#/$defs/x``, with ``~0``, ``~1`` and %-escapes) points at,
    or ``{}`` where it points at nothing (a dangling reference reads as a schema that says nothing)."""
    target = root
    for raw in ref[2:].split("/") if ref.startswith("#/") else ():
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping):
            target = target.get(part, {})
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return {}
    return target


def resolve(node: Any, root: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any]:
    """Follow local ``$ref`` and take the first usable branch of ``anyOf``/``oneOf``/``allOf``.

    Any JSON is taken: what is not a schema object is ``{}``, a reference to nothing
    or past ``MAX_REF_DEPTH`` references (a cycle) is ``{}``; never an exception.
    """
    if not isinstance(node, Mapping) or depth > MAX_REF_DEPTH:
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        target = _pointer(root, ref)
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return resolve({**target, **rest} if isinstance(target, Mapping) else rest, root, depth + 1)
    for combinator in ("anyOf", "oneOf", "allOf"):
        options = node.get(combinator)
        if isinstance(options, list) and options:
            usable = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"] or options
            rest = {k: v for k, v in node.items() if k != combinator}
            first = usable[0] if isinstance(usable[0], Mapping) else {}
            return resolve({**rest, **first}, root, depth + 1)
    return node


def json_type(schema: Mapping[str, Any]) -> str:
    """The one JSON type a schema node stands for (``null`` set aside; guessed from its keywords)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    return str(kind)


def _names(value: Any) -> set[str]:
    """``required`` as a set of names, whatever JSON it is (a list of strings, else nothing)."""
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def leaves(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Iterator[Leaf]:
    """Every scalar field of a tool's arguments, arrays entered at their first item; at most
    ``MAX_FIELD_DEPTH`` levels deep, whatever the schema (recursive, malformed) says."""
    root = schema if root is None else root

    def walk(node: Any, path: tuple[str | int, ...], required: bool, depth: int) -> Iterator[Leaf]:
        node = resolve(node, root)
        kind = json_type(node)
        if depth > MAX_FIELD_DEPTH:
            return
        if kind == "object":
            needed = _names(node.get("required"))
            properties = node.get("properties")
            for name, sub in properties.items() if isinstance(properties, Mapping) else ():
                yield from walk(sub, (*path, str(name)), required and name in needed, depth + 1)
        elif kind == "array":
            items = node.get("items")
            yield from walk(items if isinstance(items, Mapping) else {}, (*path, 0), required, depth + 1)
        elif path:  # arguments are an object: a root that is not one has no fields
            yield Leaf(path, node, required)

    return walk(schema, (), True, 0)


def top_level(schema: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], bool]]:
    """The tool's arguments themselves (name, schema resolved, required), whatever their type."""
    root = resolve(schema, schema)
    needed = _names(root.get("required"))
    props = root.get("properties")
    return [
        (str(name), resolve(sub, schema), name in needed)
        for name, sub in (props.items() if isinstance(props, Mapping) else ())
    ]


def idempotency_key(candidates: Sequence[Leaf]) -> Leaf | None:
    """The field that looks like an idempotency key, if the tool has one: named like one
    (``idempotency_key``, ``client_token``), or named like a request id and described as a key.
    A ``requestId`` that says nothing of retries is a reference to a request, never called a key."""
    for leaf in candidates:
        if json_type(leaf.schema) != "string":
            continue
        letters = re.sub(r"[^a-z]", "", leaf.name.lower())
        described = str(leaf.schema.get("description") or "")
        if KEY_NAME.search(letters) or (MAYBE_KEY_NAME.search(letters) and KEY_WORDS.search(described)):
            return leaf
    return None


def is_reference(leaf: Leaf) -> bool:
    """A field that names something that must exist already (``taskId``, ``entityName`` "of the entity to
    add ... to"): a tool that takes one changes a record, it does not make one."""
    found = words(leaf.name)
    if not found:
        return False
    described = str(leaf.schema.get("description") or "")
    if found[-1] in ("id", "ids", "uuid"):
        return True
    return (found[-1] == "name" and len(found) > 1) or REFERENCE_WORDS.search(described) is not None


def is_identifier(leaf: Leaf) -> bool:
    """A field whose value names a thing (a table, a path, an id, a type) rather than text the store
    keeps as written: never where a marker goes."""
    return bool(IDENTIFIER_WORDS.intersection(words(leaf.name))) or is_reference(leaf)


def names_database_object(leaf: Leaf) -> bool:
    """A table, column or schema name: only the user knows one that exists."""
    return bool(DATABASE_WORDS.intersection(words(leaf.name)))


def is_free_text(leaf: Leaf) -> bool:
    """A string kept as written, long enough for a marker: no enum, pattern or format, no short limit."""
    s = leaf.schema
    if json_type(s) != "string" or any(k in s for k in ("enum", "const", "pattern", "format")):
        return False
    longest = _bound(s, "maxLength")
    return longest is None or longest >= FREE_TEXT_MIN_LENGTH


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
    does: str
    """What it does, from its name (or description): ``makes`` a record, ``changes`` or ``removes``
    one, changes a ``schema`` (create_table, create_directory), or ``reads``."""

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
            does=_does(tool),
        )

    @property
    def takes_reference(self) -> bool:
        """A required argument names something that exists (``taskId``): it changes, not makes."""
        return any(leaf.required and is_reference(leaf) and leaf != self.key for leaf in self.arguments)

    def suitability(self) -> tuple[int, ...]:
        """How well the tool suits a workload of intents that each make one effect (higher first):
        a tool that makes a record, with a key, with free text for the marker, taking no reference."""
        rank = {"makes": 3, "changes": 2, "schema": 1, "removes": 0, "reads": -1}[self.does]
        marker = any(not is_identifier(leaf) for leaf in self.free_text)
        return (rank, self.key is not None, marker, not self.takes_reference)


def _does(tool: Mapping[str, Any]) -> str:
    if not classify(tool).changes_state:
        return "reads"
    name = words(str(tool.get("name")))
    verb = _verb(name[0]) if name else ""
    if verb not in STATE_VERBS and verb not in MAKE_VERBS and verb not in REMOVE_VERBS:
        described = words(str(tool.get("description") or ""))  # a name without a verb: its description's
        verb = _verb(described[0]) if described else verb
    if SCHEMA_NOUNS.intersection(name[1:]):  # create_table, drop_index, create_directory
        return "schema"
    if verb in REMOVE_VERBS:
        return "removes"
    return "makes" if verb in MAKE_VERBS else "changes"


# -- values a field accepts


@dataclass(frozen=True, slots=True)
class Search:
    """What :func:`obvious_value` gives where only a search of the field's schema can tell: a value to
    find, or ``first`` (a default under a ``pattern``) to confirm before one is searched for."""

    first: Any = None


def minimal_example(schema: Mapping[str, Any]) -> Any:
    """A valid value for a constrained scalar: hypothesis-jsonschema's minimal example (None if none).

    Unbounded in time for some schemas (a pattern that backtracks, a search that
    rejects most of what it draws): ``init`` runs it in a process it can abandon
    (``harness.init.values``). Any failure of the search is "no value": the
    schema is the server's, and what hypothesis makes of it is not ours to raise.
    """
    import warnings

    from hypothesis import HealthCheck, find, settings
    from hypothesis_jsonschema import from_schema

    quiet = settings(database=None, max_examples=200, suppress_health_check=list(HealthCheck), deadline=None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return find(from_schema(dict(schema)), lambda _: True, settings=quiet)
    except Exception:
        return None


def obvious_value(leaf: Leaf) -> Any:
    """A value the field accepts, where it is plain: its const, first enum value or default;
    ``NAME-{index}`` for plain text; 1 for a number that allows it; False for a boolean; None for an
    empty enum (nothing is accepted). A :class:`Search` where only a search can tell, or where the
    default must match a pattern (matching is what can take forever)."""
    s = leaf.schema
    if "const" in s:
        return s["const"]
    enum = s.get("enum")
    if isinstance(enum, list):
        return enum[0] if enum else None
    if "default" in s and s["default"] is not None:
        return Search(s["default"]) if "pattern" in s else s["default"]
    kind = json_type(s)
    constrained = any(k in s for k in ("pattern", "format", "minimum", "maximum", "exclusiveMinimum"))
    named = f"{leaf.name or 'value'}-{{index}}"
    if kind == "string" and not constrained and _fits(s, len(named) - len("{index}"), INDEX_DIGITS):
        return named
    if kind in ("integer", "number") and _allows_one(s):
        return 1  # not 0: an amount, a count or a quantity of 0 is what servers reject most
    if kind == "boolean":
        return False
    return Search()


INDEX_DIGITS = 7
"""The most digits an intent's index has (a run of up to ten million intents)."""


def _fits(schema: Mapping[str, Any], prefix: int, digits: int) -> bool:
    """``NAME-{index}`` is within the length bounds for every index (zod's ``.min(1)``, that most
    TypeScript servers write, left ``name`` drafted as the minimal example ``"0"`` for every intent)."""
    shortest, longest = _bound(schema, "minLength"), _bound(schema, "maxLength")
    return (shortest is None or prefix + 1 >= shortest) and (longest is None or prefix + digits <= longest)


def example_value(leaf: Leaf) -> Any:
    """A value the field accepts: :func:`obvious_value`, a default as it is, else the schema's minimal
    example (None if there is none)."""
    value = obvious_value(leaf)
    if not isinstance(value, Search):
        return value
    return value.first if value.first is not None else minimal_example(leaf.schema)


def searched_value(schema: Mapping[str, Any], search: Search) -> Any:
    """What a search gives: ``search.first`` if the schema accepts it, else its minimal example (None if
    there is none). Unbounded in time: ``init`` runs it where it can abandon it."""
    if search.first is not None:
        import jsonschema  # type: ignore[import-untyped]

        try:
            if jsonschema.validators.validator_for(schema)(dict(schema)).is_valid(search.first):
                return search.first
        except Exception:  # a schema the validator cannot read: search it as hypothesis reads it
            pass
    return minimal_example(schema)


def _bound(schema: Mapping[str, Any], name: str) -> float | None:
    """A numeric keyword's value; None when absent or not a number (``"maxLength": "x"``)."""
    value = schema.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past any float
        return math.inf if value > 0 else -math.inf


def _allows_one(schema: Mapping[str, Any]) -> bool:
    low, high = _bound(schema, "minimum"), _bound(schema, "maximum")
    above, below = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    return (
        "multipleOf" not in schema
        and (low is None or low <= 1)
        and (high is None or high >= 1)
        and (above is None or above < 1)
        and (below is None or below > 1)
    )
