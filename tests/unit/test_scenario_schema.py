"""The scenario's JSON Schema (harness/scenario/scenario.schema.json): generated from the model,
current, every field described with its default, and the ready-made scenarios valid under it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from harness.scenario import Scenario
from harness.scenario.schema import SCHEMA_FILE, attribute_docstrings, scenario_schema, schema_text
from tests.helpers.paths import ROOT

SCHEMA = scenario_schema()


def definitions() -> dict[str, dict[str, Any]]:
    return {"Scenario": SCHEMA, **SCHEMA["$defs"]}


def test_the_shipped_schema_is_what_the_model_generates() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        f"{SCHEMA_FILE.name} is stale: the scenario's model changed; run `make schema` and commit it"
    )


@pytest.mark.parametrize("name", sorted(definitions()))
def test_every_field_has_a_docstring_and_every_optional_one_its_default(name: str) -> None:
    definition = definitions()[name]
    required = set(definition.get("required", []))
    for field, prop in definition["properties"].items():
        assert prop.get("description"), f"{name}.{field}: give the field a docstring (the line under it)"
        assert field in required or "default" in prop, f"{name}.{field}: no default in the schema"


def test_a_default_made_by_a_factory_is_written_out() -> None:
    client = SCHEMA["properties"]["client"]
    assert (
        client["default"]["max_attempts"]
        == Scenario.model_fields["client"].get_default(call_default_factory=True).max_attempts
    )
    assert SCHEMA["$defs"]["Faults"]["properties"]["stream"]["default"] == []


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_the_ready_made_scenarios_are_valid_under_it(path: Path) -> None:
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_it_refuses_what_the_model_refuses() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    scenario = yaml.safe_load((ROOT / "scenarios" / "pod-kill.yaml").read_text())
    scenario["workload"]["intens"] = 3
    (error,) = validator.iter_errors(scenario)
    assert "intens" in error.message


def test_attribute_docstrings_are_the_strings_under_assignments() -> None:
    class Sample:
        first: int = 1
        """The first."""
        second = 2
        third: str
        """The third,
        on two lines."""

    assert attribute_docstrings(Sample) == {"first": "The first.", "third": "The third,\non two lines."}
    assert json.loads(schema_text())["$id"] == "scenario.schema.json"
