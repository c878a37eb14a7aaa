"""Server-minted handles, found in a catalog and judged by their text: pure functions for the check.

The source article (section 03): state a tool keeps across calls shows in the
contract as a handle, an opaque string the server returns and the client
passes back. Opaque, because an agent that can decode a handle will one day
synthesize one; versioned (``h1_``), so the encoding can change without
breaking the handles agents hold. The check finds the tools from what the
catalog says of itself, never from their names: the tool that returns a handle
has a result field named like one (``next_page``, ``cursor``, ``page_token``,
``handle``) in its ``outputSchema``, or says so in its description; the tool
that takes one back has an argument named or described like one.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.catalog import example_value, leaves

HANDLE_NAME = re.compile(r"cursor|handle|next_?page|page_?token|continuation|resume_?token", re.I)
HANDLE_WORDS = re.compile(r"\b(cursor|handle|opaque|next page|next_page|page token)\b", re.I)
VERSION_PREFIX = re.compile(r"^[A-Za-z]{1,4}\d{1,3}_")
PAGE_SIZE = re.compile(r"^(limit|page_?size|per_?page|max_?results|count|size|first|top)$", re.I)
PRINTABLE = frozenset(string.printable)


@dataclass(frozen=True, slots=True)
class HandleTools:
    """Where handles come from and where they go back, and what in the catalog said so."""

    producer: str
    field: str | None
    """The result field that carries the handle; None when only the description told (found in the result)."""
    consumer: str
    param: str
    why: str


def _properties(schema: Any) -> dict[str, Mapping[str, Any]]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return (
        {str(k): v for k, v in props.items() if isinstance(v, Mapping)} if isinstance(props, Mapping) else {}
    )


def _handle_like(name: str, prop: Mapping[str, Any]) -> bool:
    return bool(HANDLE_NAME.search(name) or HANDLE_WORDS.search(str(prop.get("description") or "")))


def find_handle_tools(tools: Sequence[Mapping[str, Any]]) -> HandleTools | str:
    """The tool that returns handles and the one that takes them back, or why there are none."""
    takers: list[tuple[bool, str, str]] = []  # (required, tool, argument)
    for tool in tools:
        schema = tool.get("inputSchema") or {}
        required = set(schema.get("required") or ()) if isinstance(schema, Mapping) else set()
        for name, prop in _properties(schema).items():
            if prop.get("type") in ("string", None) and _handle_like(name, prop):
                takers.append((name in required, str(tool.get("name")), name))
    producers: list[tuple[str, str | None, str]] = []
    for tool in tools:
        name = str(tool.get("name"))
        fields = [f for f, prop in _properties(tool.get("outputSchema")).items() if _handle_like(f, prop)]
        if fields:
            producers.append((name, fields[0], f"{name}'s outputSchema has {fields[0]}"))
        elif HANDLE_WORDS.search(str(tool.get("description") or "")) and not any(
            req and t == name for req, t, _ in takers
        ):
            producers.append((name, None, f"{name}'s description speaks of a cursor or handle"))
    if not producers:
        return "no tool returns a handle (no outputSchema field or description names a cursor or handle)"
    producer, field, why = producers[0]
    if not takers:
        return f"{why}, but no tool takes a handle back (no argument is named or described like one)"
    # A separate continuation tool that requires the handle first; else the producer taking it back.
    takers.sort(key=lambda t: (not t[0], t[1] == producer))
    _, consumer, param = takers[0]
    return HandleTools(producer, field, consumer, param, f"{why}; {consumer} takes it as {param}")


def first_page_arguments(schema: Mapping[str, Any], fill: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a call: ``fill``, the other required top-level fields drafted, and the page size
    at its smallest, so that a few results already make a second page."""
    arguments: dict[str, Any] = {}
    for leaf in leaves(schema):
        if len(leaf.path) != 1 or leaf.name in fill:
            continue
        if PAGE_SIZE.match(leaf.name) and leaf.schema.get("type") in ("integer", "number"):
            low = leaf.schema.get("minimum", 1)
            arguments[leaf.name] = max(1, int(low)) if isinstance(low, int | float) else 1
        elif leaf.required:
            value = example_value(leaf)
            arguments[leaf.name] = value.replace("{index}", "0") if isinstance(value, str) else value
    return {**arguments, **fill}


def handle_in(structured: Any, text: str | None, field: str | None) -> str | None:
    """The handle in a result: its field in structuredContent, else a handle-like top-level key."""
    body = structured
    if not isinstance(body, Mapping) and text:
        try:
            body = json.loads(text)
        except ValueError:
            return None
    if not isinstance(body, Mapping):
        return None
    names = [field] if field is not None else [k for k in body if HANDLE_NAME.search(str(k))]
    for name in names:
        value = body.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _readable(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if len(text) >= 4 and all(c in PRINTABLE for c in text) else None


def revealed(handle: str) -> str | None:
    """What a handle gives away to anyone who reads it, or None when it is opaque."""
    body = VERSION_PREFIX.sub("", handle, count=1)
    if body.isdigit():
        return f"{handle!r} is a bare number an agent can change to go anywhere"
    if re.search(r"(^|[&;])[A-Za-z_]{2,}=[^&;=]+", body) or body.lstrip().startswith(("{", "[")):
        return f"{handle!r} is readable text an agent can edit"
    for name, decode in (
        ("base64", lambda b: base64.urlsafe_b64decode(b + "=" * (-len(b) % 4))),
        ("base64", lambda b: base64.b64decode(b + "=" * (-len(b) % 4))),
        ("hex", bytes.fromhex),
    ):
        try:
            text = _readable(decode(body))
        except (ValueError, binascii.Error):
            continue
        if text is not None:
            return f"{handle!r} is {name} of readable text ({text[:60]!r}) an agent can decode and forge"
    return None


def handle_problems(handle: str) -> list[str]:
    """What a handle breaks of the article's advice: a version prefix, opacity."""
    problems = []
    if not VERSION_PREFIX.match(handle):
        problems.append(
            f"{handle!r} has no version prefix (like h1_): its encoding cannot change without breaking "
            "the handles agents hold"
        )
    if (why := revealed(handle)) is not None:
        problems.append(f"not opaque: {why}")
    return problems


def forged(handle: str) -> str:
    """A handle this server never issued, in the shape of one it did (its prefix kept)."""
    prefix = match.group(0) if (match := VERSION_PREFIX.match(handle)) else ""
    return f"{prefix}forged0000000000000000"
