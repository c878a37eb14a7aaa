"""The scenario's JSON Schema, generated from the model: every field with its type, default and docstring.

The model is the one definition of a scenario; the schema is derived from it for editors (a YAML
file that names ``scenario.schema.json`` gets completion and checks as it is typed) and for the
documentation's reference. pydantic writes the types and defaults; a field's docstring (the string
under it in the class body, the project's habit) becomes its ``description`` here, read from the
source, so the model's classes pay nothing for it when a scenario is loaded. A default made by a
factory (a whole section, an empty list) is written out too: a reader should not have to know the
section's own defaults to know what leaving it out means.

``python -m harness.scenario.schema`` rewrites the file shipped beside this module
(``make schema``); a unit test fails while the file differs from what the model generates.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from harness.scenario.model import Scenario

SCHEMA_FILE = Path(__file__).with_name("scenario.schema.json")
"""Shipped in the package (``package-data``), so an installed harness has it too."""

SCHEMA_ID = "scenario.schema.json"


def attribute_docstrings(cls: type) -> dict[str, str]:
    """The docstrings of ``cls``'s attributes: each string literal right under an assignment in its
    class body (what pydantic's ``use_attribute_docstrings`` reads, and enum members use too)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        target = (
            statement.target
            if isinstance(statement, ast.AnnAssign)
            else statement.targets[0]
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1
            else None
        )
        if (
            isinstance(target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[target.id] = inspect.cleandoc(following.value.value)
    return docs


def section_models(root: type[BaseModel] = Scenario) -> dict[str, type[BaseModel]]:
    """Every model a scenario is made of, by class name (the names pydantic gives its ``$defs``)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(annotation: Any) -> None:
        if (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and annotation.__name__ not in found
        ):
            found[annotation.__name__] = annotation
            for field in annotation.model_fields.values():
                visit(field.annotation)
        for argument in typing.get_args(annotation):
            visit(argument)

    visit(root)
    return found


def _documented(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Each field of ``model`` in ``schema`` given its docstring and, where a factory makes it, its
    default."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            docs.update(attribute_docstrings(cls))
    for name, field in model.model_fields.items():
        prop = schema["properties"][field.alias or name]
        if name in docs:
            prop["description"] = docs[name]
        if not field.is_required() and "default" not in prop:
            prop["default"] = to_jsonable_python(field.get_default(call_default_factory=True))


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a scenario file, every field described."""
    schema = Scenario.model_json_schema()
    models = section_models()
    _documented(schema, Scenario)
    for name, definition in schema["$defs"].items():
        _documented(definition, models[name])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
    }


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_FILE.name}\n")
