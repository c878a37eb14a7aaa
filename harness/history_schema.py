"""The history's JSON Schema, generated from its event types (:mod:`harness.events`).

One definition per event class, each field with its JSON type and docstring; a line is held to the
definition its ``type`` names (``fault`` to either of its two), with no field beyond them. A field
that is left out while None (:func:`harness.history.optional_field`) is optional and never null; a
field with no default is required, null where its type allows it. ``python -m
harness.history_schema`` rewrites the shipped file (``make schema``); a unit test fails while it
differs from what the types generate.

:func:`check_history` validates a history file against it (with ``jsonschema``, which ``init``
already needs): what the tests do to every history a run writes, through :func:`checker`, while
``MCP_CHAOS_CHECK_HISTORY`` is set (``tests/conftest.py`` sets it for the whole suite).
"""

from __future__ import annotations

import enum
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from harness.errors import HistoryError
from harness.events import EVENTS
from harness.history import SCHEMA_VERSION, Absent, Event, EventType, optional_field
from harness.scenario.schema import attribute_docstrings

SCHEMA_FILE = Path(__file__).with_name("history.schema.json")
"""Shipped in the package (``package-data``), so an installed harness has it too."""

SCHEMA_ID = "history.schema.json"
CHECK_ENV = "MCP_CHAOS_CHECK_HISTORY"
"""Set (to anything but empty): every history a run writes is checked against the schema when it is
closed, and a line that does not match fails the run (a HistoryError naming it)."""


def _type(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of one field's type (the few the events use)."""
    if annotation is Any:
        return {}
    if annotation is type(None):
        return {"type": "null"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"type": "string", "enum": [m.value for m in annotation]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if typing.is_typeddict(annotation):
        return {
            "type": "object",
            "properties": {name: _type(hint) for name, hint in typing.get_type_hints(annotation).items()},
            "required": sorted(annotation.__required_keys__),
            "additionalProperties": False,
        }
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return {"type": "array", "items": _type(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type(args[1])}
    if origin in (typing.Union, types.UnionType):
        # Literal[ABSENT] is no value a line holds: the field is left out.
        options = [_type(a) for a in args if a != typing.Literal[Absent.ABSENT]]
        plain = [o["type"] for o in options if set(o) == {"type"}]
        if len(plain) == len(options):
            return {"type": plain}
        return {"anyOf": options}
    raise TypeError(f"no JSON Schema for {annotation!r}")


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A type with null taken out: an optional field is left out, never written null."""
    kinds = schema.get("type")
    if isinstance(kinds, list):
        rest = [k for k in kinds if k != "null"]
        return {**schema, "type": rest[0] if len(rest) == 1 else rest}
    if "anyOf" in schema:
        rest = [o for o in schema["anyOf"] if o != {"type": "null"}]
        return rest[0] if len(rest) == 1 else {"anyOf": rest}
    return schema


def _definition(cls: type[Event]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if isinstance(base, type) and issubclass(base, Event):
            docs.update(attribute_docstrings(base))
    properties: dict[str, Any] = {
        "seq": {"type": "integer", "minimum": 0, "description": "The event's number, from 0, in order."},
        "t": {"type": "number", "description": "Seconds since the run started (monotonic)."},
        "type": {"const": cls.TYPE.value},
    }
    required = ["seq", "t", "type"]
    for f in fields(cls):
        schema = _type(hints[f.name])
        if f.default is None:
            schema = _without_null(schema)
        if not optional_field(f):
            required.append(f.name)
        if f.name in docs:
            schema["description"] = docs[f.name]
        properties[f.name] = schema
    if cls.__doc__ and cls.__doc__ != Event.__doc__:
        head = {"description": " ".join(cls.__doc__.split())}
    else:
        head = {}
    return {
        "type": "object",
        **head,
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def history_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one line of ``history.jsonl``."""
    by_type: dict[EventType, list[str]] = {}
    for cls in EVENTS:
        by_type.setdefault(cls.TYPE, []).append(cls.__name__)
    branches = []
    for type_, names in by_type.items():
        refs = [{"$ref": f"#/$defs/{n}"} for n in names]
        branches.append(
            {
                "if": {"properties": {"type": {"const": type_.value}}, "required": ["type"]},
                "then": refs[0] if len(refs) == 1 else {"anyOf": refs},
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mcp-chaos history line",
        "description": (
            f"One line of a run's history.jsonl, format version {SCHEMA_VERSION} (run_started's"
            " `schema`): seq, t and type, and the fields of the event its type names."
        ),
        "x-schema-version": SCHEMA_VERSION,
        "type": "object",
        "required": ["seq", "t", "type"],
        "properties": {"type": {"enum": [t.value for t in EventType]}},
        "allOf": branches,
        "$defs": {cls.__name__: _definition(cls) for cls in EVENTS},
    }


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(history_schema(), indent=2, ensure_ascii=False) + "\n"


@cache
def _validators() -> dict[str | None, Any]:
    """A validator per event type (its branch of the shipped schema, with every definition), and the
    whole schema's under None: a line is checked against its own type's alone, not all 27 branches
    (a twentieth of the time), and a line of no known type against the whole."""
    import jsonschema  # type: ignore[import-untyped]  # only where histories are checked

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validators: dict[str | None, Any] = {None: jsonschema.Draft202012Validator(schema)}
    for branch in schema["allOf"]:
        type_ = branch["if"]["properties"]["type"]["const"]
        own = {"$schema": schema["$schema"], "$defs": schema["$defs"], **branch["then"]}
        validators[type_] = jsonschema.Draft202012Validator(own)
    return validators


def line_errors(event: Any) -> Iterator[str]:
    """What is wrong with one parsed line, one message per error (none for a valid line)."""
    validators = _validators()
    kind = event.get("type") if isinstance(event, dict) else None
    validator = validators.get(kind if isinstance(kind, str) else None, validators[None])
    for error in validator.iter_errors(event):
        where = "/".join(str(p) for p in error.absolute_path)
        yield f"{where or 'line'}: {error.message}"


def check_history(path: Path) -> None:
    """Every line of a history file valid against the schema; else a HistoryError naming the first
    that is not (its number, type and what is wrong)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            event = orjson.loads(raw)
            errors = list(line_errors(event))
            if errors:
                kind = event.get("type") if isinstance(event, dict) else None
                raise HistoryError(
                    f"{path}:{number}: a {kind} line does not match {SCHEMA_ID}: {'; '.join(errors[:3])}"
                )


def checker() -> Callable[[Path], None] | None:
    """:func:`check_history` where ``MCP_CHAOS_CHECK_HISTORY`` asks for it, else None."""
    return check_history if os.environ.get(CHECK_ENV) else None


if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_FILE.name}\n")
