"""What a scenario's error says beyond "wrong": the field meant, what a missing one holds, why YAML
failed. Pure: it reads the model's own fields, never a hand-kept list of names that could drift.

A new user's first scenario fails on a spelling (``comand``), a section left out
(``audit``), or a placeholder that opens an unquoted YAML value (``- {scenario_dir}/x.py``,
which YAML reads as the start of a mapping). Each costs minutes when the error says only
"unknown field", "required field is missing" or "expected <block end>"; here each gets its fix.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

MISSING: dict[tuple[str, ...], str] = {
    ("name",): "the scenario's name, e.g. name: my-server-chaos",
    ("target",): "how the server under test starts or where it runs, e.g. target: {command: [python, "
    '"{scenario_dir}/server.py"]} (or image: ..., or url: http://127.0.0.1:8000/mcp)',
    ("workload",): "the intents to replay, e.g. workload: {intents: 200, tool: create_note, arguments: "
    '{body: "{marker}"}}',
    ("workload", "intents"): "how many business intents to replay, e.g. intents: 200",
    ("workload", "tool"): "the tool every intent calls, e.g. tool: create_note",
    (
        "workload",
        "arguments",
    ): 'the tool\'s arguments, with {marker} where the store keeps it, e.g. arguments: {body: "{marker}"}',
    ("audit",): "where each intent's effects are counted, e.g. audit: {effects: {jsonl: {path: "
    '"{data_dir}/notes.jsonl", marker_field: body}}} (or sql, files, tool, command, sink: '
    "see scenarios/README.md)",
    ("audit", "effects"): 'the store the effects are counted in, e.g. effects: {sql: {url: "sqlite:///'
    '{data_dir}/app.db", query: "SELECT memo AS marker, COUNT(*) AS effects FROM t GROUP BY memo"}}',
}
"""What each required field holds, with an example: the text a "missing" error adds."""

CLOSE = 0.6
"""How alike a misspelt name and a field must be to be offered (difflib's ratio)."""


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The scenario sections an annotation may hold (through Optional, unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models(args[0])
    if origin is dict:
        return _models(args[1]) if len(args) == 2 else []
    if origin in (list, tuple, typing.Union, types.UnionType):
        return [model for arg in args for model in _models(arg)]
    return []


def sections_at(root: type[BaseModel], loc: Sequence[str | int]) -> list[type[BaseModel]]:
    """The sections that may stand at ``loc`` (a pydantic error's location) inside ``root``."""
    found = [root]
    for part in loc:
        if isinstance(part, int):
            continue  # a list's item: the list's own annotation already named its sections
        named = [m for m in found if m.__name__ == part]
        if named:  # a union's member, as pydantic names it in a location
            found = named
            continue
        found = [
            model
            for section in found
            if part in section.model_fields
            for model in _models(section.model_fields[part].annotation)
        ]
        if not found:
            return []
    return found


def did_you_mean(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    """For an unknown field at ``loc``: "; did you mean X?", else the section's fields; "" when the
    section is not known."""
    sections = sections_at(root, loc[:-1])
    fields = sorted({name for section in sections for name in section.model_fields})
    if not fields or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], fields, n=1, cutoff=CLOSE)
    if not close:
        close = [f for f in fields if f.lower() == loc[-1].lower()]
    return f"; did you mean {close[0]}?" if close else f" (the fields here: {', '.join(fields)})"


def missing(loc: Sequence[str | int]) -> str:
    """What a missing field at ``loc`` holds, with an example; "" for one without an entry."""
    said = MISSING.get(tuple(str(p) for p in loc))
    return f": {said}" if said else ""


PLACEHOLDER_KEY = re.compile(r"[a-z_]+")


def placeholder_as_mapping(value: Any) -> str | None:
    """The placeholder an unquoted ``{name}`` became when YAML read it as a mapping ({name: null})."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if inner is None and isinstance(key, str) and PLACEHOLDER_KEY.fullmatch(key):
            return "{" + key + "}"
    return None


LEADING_BRACE = re.compile(r"^(\s*(?:-\s+|[^\s#'\"][^:#]*:\s+))(\{[A-Za-z_]\w*\}\S*.*?)\s*$")
"""A YAML line whose value, unquoted, starts with a placeholder: ``- {scenario_dir}/server.py``."""


def yaml_leading_brace(text: str, lines: Sequence[int]) -> str | None:
    """Why YAML failed when it did at a value that starts with ``{`` unquoted (on one of ``lines``,
    0-based, or the line before): that value as it must be written; None when no such value is there."""
    rows = text.splitlines()
    for number in sorted({n for line in lines for n in (line, line - 1) if 0 <= n < len(rows)}):
        found = LEADING_BRACE.match(rows[number])
        if found is not None:
            value = found.group(2)
            return (
                f"line {number + 1}: {value} starts with {{, which YAML reads as the start of a mapping "
                f'unless the value is quoted: write {found.group(1).strip()} "{value}"'
            )
    return None
