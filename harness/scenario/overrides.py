"""``--set dotted.path=value``: change a scenario's parsed YAML before it is validated."""

from __future__ import annotations

import re
from typing import Any

import yaml

from harness.errors import ScenarioError
from harness.scenario import bounded_yaml

PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
"""A value that is one placeholder (``{marker}``, ``{index}``, ``{key}``), kept as the text it is."""


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.path=value`` override (value parsed as YAML) in place."""
    path, sep, raw = assignment.partition("=")
    if not sep or not path:
        raise ScenarioError(f"override {assignment!r} is not PATH=VALUE (e.g. workload.intents=100)")
    try:
        # ``{index}`` alone is a placeholder, not YAML's mapping {index: null}: sent as an object, it
        # would never be rendered (a shell user does not quote braces twice).
        value = raw if PLACEHOLDER.fullmatch(raw) else bounded_yaml.load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    except bounded_yaml.YamlTooLarge as exc:
        raise ScenarioError(f"override {assignment!r}: {exc}") from None
    node: dict[str, Any] = data
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"override {assignment!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value
