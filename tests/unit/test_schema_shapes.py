"""Any JSON as a tool's ``inputSchema``: a draft with a TODO or a note, never an exception.

The shapes an adversarial pass found (no schema, ``{}``, a cyclic ``$ref``, 100 levels,
a dangling ``$ref``, a leaf ``$ref: "#"``, ``enum: []``) each give a draft whose YAML
loads with exactly the scenario's sections; then hypothesis feeds the catalog and the
drafting arbitrary JSON and schema-like documents. Values only a search can find are
left to ``harness.init.values`` (a child process, tested in integration); here they
are "none found", so the walk, the placement, the check and the rendering are what
is exercised, in this process.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.catalog import Tool, classify, leaves, obvious_value
from harness.effects.base import SeenStore
from harness.init.draft import Draft, check_arguments, choose_source, plan_arguments
from harness.init.render import comment_text, render
from tests.helpers.quick import examples

SECTIONS = ["name", "seed", "target", "workload", "client", "faults", "audit", "gate"]

DEEP: dict[str, Any] = {"type": "string"}
for _ in range(100):
    DEEP = {"type": "object", "properties": {"x": DEEP}, "required": ["x"]}

SHAPES: dict[str, Any] = {
    "no schema": None,
    "empty": {},
    "not an object": ["type", "object"],
    "cyclic ref": {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/n"}},
        "required": ["a"],
        "definitions": {
            "n": {"type": "object", "properties": {"next": {"$ref": "#/definitions/n"}}, "required": ["next"]}
        },
    },
    "100 levels": DEEP,
    "dangling ref": {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/gone"}},
        "required": ["a"],
    },
    "leaf ref to the root": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "root ref to itself": {"$ref": "#"},
    "empty enum": {"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]},
    "escaped pointer": {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/x~1y%20z"}},
        "$defs": {"x/y z": {"type": "string", "enum": ["found"]}},
        "required": ["a"],
    },
    "pointer into a list": {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/kinds/0"}},
        "$defs": {"kinds": [{"type": "boolean"}]},
        "required": ["a"],
    },
    "keywords of the wrong type": {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": "long", "minimum": [], "enum": 3}},
        "required": True,
        "items": 7,
    },
    "an integer past any float": {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 10**400}},
        "required": ["n"],
    },
}


def draft_of(schema: Any) -> Draft:
    """The draft init makes, with every search "none found" (the child's part, tested elsewhere)."""
    plan = plan_arguments(schema if isinstance(schema, dict) else {})
    return plan.draft(check_arguments(plan.schema, plan.arguments([None] * len(plan.searches))))


def drafted_yaml(tool: dict[str, Any], draft: Draft) -> str:
    return render(
        name="x-chaos",
        origin="command 'server'",
        server_name=str(tool.get("name")),
        protocol="2025-11-25",
        target={"command": ["server"]},
        tools=[classify(tool)],
        tool=str(tool.get("name")),
        draft=draft,
        source=choose_source([SeenStore("jsonl", "{data_dir}/x.jsonl")], draft.marker),
        uses_postgres=False,
    )


def assert_drafts(tool: dict[str, Any]) -> Draft:
    Tool.of(tool)
    draft = draft_of(tool.get("inputSchema"))
    text = drafted_yaml(tool, draft)
    assert list(yaml.safe_load(text)) == SECTIONS
    assert all("\n" not in note for note in draft.notes)
    return draft


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_drafts(shape: str) -> None:
    tool: dict[str, Any] = {"name": "create_note"}
    if SHAPES[shape] is not None:
        tool["inputSchema"] = SHAPES[shape]
    assert_drafts(tool)


@pytest.mark.parametrize(
    ("shape", "note"),
    [
        ("cyclic ref", "TODO: the drafted arguments do not validate against the tool's inputSchema: a.next"),
        ("100 levels", "TODO: the drafted arguments do not validate against the tool's inputSchema: x.x"),
        ("empty enum", "TODO: no valid value found for a; fill it in"),
        ("dangling ref", "were not checked against the tool's inputSchema: PointerToNowhere"),
        ("root ref to itself", "were not checked against the tool's inputSchema: it nests deeper than"),
    ],
)
def test_what_cannot_be_drafted_is_said(shape: str, note: str) -> None:
    draft = draft_of(SHAPES[shape])
    assert any(n.startswith(note) or note in n for n in draft.notes), draft.notes


def test_escaped_pointers_and_pointers_into_lists_resolve() -> None:
    assert draft_of(SHAPES["escaped pointer"]).arguments == {"a": "found"}
    assert draft_of(SHAPES["pointer into a list"]).arguments == {"a": False}


def test_a_walk_ends_at_its_depth_whatever_the_schema() -> None:
    assert list(leaves(DEEP)) == []  # its one field is 100 levels down
    assert [leaf.shown() for leaf in leaves(SHAPES["leaf ref to the root"])] == []


BREAKS = ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1e", "\x00", "\x1b"]


@pytest.mark.parametrize("brk", BREAKS, ids=[repr(b) for b in BREAKS])
def test_a_name_cannot_break_out_of_a_comment(brk: str) -> None:
    """A tool's name and its fields' names are quoted in comments; none of YAML's line breaks (nor
    a control character PyYAML refuses) gets through: the draft loads, with the scenario's keys only."""
    evil = f"create_x{brk}gate: {{}}{brk}faults: 1"
    tool = {
        "name": evil,
        "description": f"makes{brk}seed: 9",
        "inputSchema": {
            "type": "object",
            "properties": {f"memo{brk}audit: 1": {"type": "string"}, "code": {"type": "string", "enum": []}},
            "required": ["code"],
        },
    }
    draft = assert_drafts(tool)
    text = drafted_yaml(tool, draft)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any("create_x" in line for line in comments)
    assert yaml.safe_load(text)["workload"]["tool"] == evil  # the value itself is dumped as it is


def test_a_comment_line_is_bounded() -> None:
    assert len(comment_text("x" * 1_000_000)) == 400
    assert comment_text("a\u2028b\u202ec") == "a\\u2028b\\u202ec"


KEYWORDS = [
    "type",
    "properties",
    "required",
    "items",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "enum",
    "const",
    "default",
    "format",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "$defs",
    "definitions",
    "additionalProperties",
    "description",
    "not",
    "prefixItems",
    "memo",
    "idempotency_key",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(
        [
            *("#", "#/", "#/$defs/a", "#/properties", "#/definitions/gone", "#/properties/memo"),
            *("string", "object", "array", "integer", "number", "null", "boolean", "date-time", "email"),
        ]
    )
)


# The extend functions are named functions, not lambdas: Hypothesis reads their source to check they
# use their argument, and the source of a lambda spread over lines is read unreliably (a warning,
# an error under filterwarnings = error).
def _json_of(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(KEYWORDS) | st.text(max_size=4), kids, max_size=5
    )


def _schema_of(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"type": st.sampled_from(["object", "array", "string"])},
        optional={
            "properties": st.dictionaries(st.sampled_from([*KEYWORDS[-2:], "a", "b"]), kids, max_size=3),
            "required": st.lists(st.sampled_from(["a", "b", "memo", "idempotency_key"]), max_size=3),
            "items": kids,
            "anyOf": st.lists(kids, max_size=2),
            "$ref": st.sampled_from(["#", "#/properties/a", "#/$defs/a", "#/definitions/gone"]),
            "$defs": st.dictionaries(st.just("a"), kids, max_size=1),
        },
    )


ANY_JSON = st.recursive(SCALARS, _json_of, max_leaves=40)
SCHEMA_LIKE = st.recursive(
    st.fixed_dictionaries({}, optional={k: SCALARS for k in ("type", "$ref", "default", "enum", "const")}),
    _schema_of,
    max_leaves=25,
)
FUZZ = settings(
    max_examples=examples(250),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(ANY_JSON)
def test_any_json_as_a_schema_drafts(schema: Any) -> None:
    assert_drafts({"name": "create_note", "description": schema, "inputSchema": schema})


@FUZZ
@given(SCHEMA_LIKE)
def test_any_schema_like_document_drafts(schema: Any) -> None:
    assert_drafts({"name": "create_note", "inputSchema": schema})
    for leaf in leaves(schema):
        obvious_value(leaf)  # what contract takes as is, where no search is needed
