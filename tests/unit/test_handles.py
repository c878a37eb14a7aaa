"""Handles found from what a catalog says of itself, and judged by their text (the article's section 03)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from harness.contract.handles import (
    HandleTools,
    find_handle_tools,
    first_page_arguments,
    forged,
    handle_in,
    handle_problems,
    revealed,
)


def tool(name: str, props: dict[str, Any], required: list[str], **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "inputSchema": {"type": "object", "properties": props, "required": required},
        **more,
    }


PAGE = {"type": "object", "properties": {"results": {"type": "array"}, "next_page": {"type": "string"}}}
SEARCH = tool("find_things", {"limit": {"type": "integer", "minimum": 1}}, [], outputSchema=PAGE)
NEXT = tool("more_things", {"token": {"type": "string", "description": "The opaque cursor."}}, ["token"])


def test_the_tools_are_found_by_schema_and_description_not_by_name() -> None:
    found = find_handle_tools([NEXT, SEARCH])
    assert found == HandleTools(
        "find_things",
        "next_page",
        "more_things",
        "token",
        "find_things's outputSchema has next_page; more_things takes it as token",
    )


def test_the_same_tool_may_take_its_handle_back() -> None:
    search = tool(
        "list_rows", {"cursor": {"type": "string"}}, [], description="Lists rows; returns a cursor."
    )
    found = find_handle_tools([search])
    assert isinstance(found, HandleTools)
    assert (found.producer, found.field, found.consumer, found.param) == (
        "list_rows",
        None,
        "list_rows",
        "cursor",
    )


def test_why_there_is_nothing_to_check() -> None:
    plain = tool("create_invoice", {"memo": {"type": "string"}}, ["memo"], description="Creates an invoice.")
    assert find_handle_tools([plain]) == (
        "no tool returns a handle (no outputSchema field or description names a cursor or handle)"
    )
    assert find_handle_tools([SEARCH]) == (
        "find_things's outputSchema has next_page, but no tool takes a handle back "
        "(no argument is named or described like one)"
    )


def test_the_first_page_is_as_small_as_the_schema_allows() -> None:
    schema = {
        "type": "object",
        "properties": {
            "page_size": {"type": "integer", "minimum": 2},
            "customer": {"type": "string"},
            "query": {"type": "string"},
        },
        "required": ["query"],
    }
    assert first_page_arguments(schema, {}) == {"page_size": 2, "query": "query-0"}
    assert first_page_arguments(schema, {"query": "x"}) == {"page_size": 2, "query": "x"}


def test_the_handle_is_read_from_its_field_or_any_handle_like_key() -> None:
    assert handle_in({"next_page": "h1_x", "results": []}, None, "next_page") == "h1_x"
    assert handle_in(None, '{"cursor": "h1_y"}', None) == "h1_y"
    assert handle_in({"next_page": None}, None, "next_page") is None
    assert handle_in(None, "not json", None) is None


@pytest.mark.parametrize(
    ("handle", "gives_away"),
    [
        ("20", "a bare number"),
        ("h1_20", "a bare number"),
        ("offset=20&limit=5", "readable text"),
        ('{"offset": 20}', "readable text"),
        ("h1_" + base64.urlsafe_b64encode(b'{"offset":20}').decode().rstrip("="), "base64 of readable text"),
        ("h1_" + b"page 3 of query x".hex(), "hex of readable text"),
    ],
)
def test_a_handle_that_can_be_read_is_not_opaque(handle: str, gives_away: str) -> None:
    why = revealed(handle)
    assert why is not None
    assert gives_away in why


def test_random_handles_are_opaque_and_need_a_version() -> None:
    handle = "h1_Zx3vQ9kLm2PbT7wYc4RnHg"  # what secrets.token_urlsafe(16) makes
    assert handle_problems(handle) == []
    assert handle_problems("v12_9f86d081884c7d659a2feaa0c55ad015") == []
    (problem,) = handle_problems("Zx3vQ9kLm2PbT7wYc4RnHg")
    assert "has no version prefix (like h1_)" in problem
    assert forged(handle) == "h1_forged0000000000000000"
    assert forged("abc") == "forged0000000000000000"
