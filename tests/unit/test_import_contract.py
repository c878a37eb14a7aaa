"""The import contract covers the whole package: a module that no layer names is unchecked by
import-linter, so a new module must be placed in the layer list (pyproject.toml) to exist."""

from __future__ import annotations

import pkgutil
import tomllib

import harness
from tests.helpers.paths import ROOT


def layered_names() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c.get("containers") == ["harness"]]
    return {name.strip() for layer in layers["layers"] for name in layer.split("|")}


def test_every_module_of_the_harness_is_in_a_layer() -> None:
    names = layered_names()
    unplaced = []
    for module in pkgutil.iter_modules(harness.__path__):
        if module.name in names:
            continue
        # A package split over layers names its modules instead (crashpoints).
        if module.ispkg and any(name.startswith(f"{module.name}.") for name in names):
            package = __import__(f"harness.{module.name}", fromlist=["_"])
            inner = [f"{module.name}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
            unplaced += [name for name in inner if name not in names]
            continue
        unplaced.append(module.name)
    assert not unplaced, f"modules no layer of pyproject.toml names (place them): {unplaced}"


def test_the_layer_list_names_only_modules_that_exist() -> None:
    existing = {m.name for m in pkgutil.iter_modules(harness.__path__)}
    stale = [name for name in layered_names() if name.split(".")[0] not in existing]
    assert not stale, f"layers name modules that are gone: {stale}"


def test_architecture_md_shows_the_layers_pyproject_toml_enforces() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c.get("containers") == ["harness"]]
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    first = layers["layers"][0]
    fence = "```text\n"  # every fence of the docs names its language (tests/helpers/docs.py)
    start = text.index(f"{fence}{first}\n")
    shown = text[start + len(fence) : text.index("```", start + len(fence))].splitlines()
    assert shown == layers["layers"], "ARCHITECTURE.md's layer list is not pyproject.toml's: copy it over"
