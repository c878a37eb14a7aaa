"""``--set dotted.path=value``: change a scenario's parsed YAML before it is validated."""

from __future__ import annotations

from typing import Any

import yaml

from harness.errors import ScenarioError
from harness.scenario import bounded_yaml


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.path=value`` override (value parsed as YAML) in place."""
    path, sep, raw = assignment.partition("=")
    if not sep or not path:
        raise ScenarioError(f"override {assignment!r} is not PATH=VALUE (e.g. workload.intents=100)")
    try:
        value = bounded_yaml.load(raw) if raw else ""
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
