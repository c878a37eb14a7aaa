"""From a file (or parsed YAML) to a :class:`Scenario`; every failure is one ScenarioError line.

The order is the contract: overrides, then ``{scenario_dir}``, then the TODOs
``mcp-chaos init`` left, then the model; the first problem found is the one
reported, with the file's name and the field's dotted path. A file is also
refused while a comment says TODO: ``init`` writes what is left to do there too,
and a comment done but not deleted would mislead the next reader.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.errors import ScenarioError
from harness.scenario import bounded_yaml, hints
from harness.scenario.model import Scenario
from harness.scenario.overrides import apply_override
from harness.scenario.placeholders import Place, map_strings, strings_at


def _format_validation_error(source: str, exc: ValidationError) -> str:
    """pydantic's first error as ``source: dotted.field: message`` (and how many more there are); an
    unknown field goes first: ``tol: add`` is why ``tool`` is missing, and the one to fix."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    brace = hints.placeholder_as_mapping(first.get("input"))
    if first["type"] == "extra_forbidden":
        msg = "unknown field" + (hints.did_you_mean(Scenario, first["loc"]) or " (check the spelling)")
    elif first["type"] == "missing":
        msg = "required field is missing" + hints.missing(first["loc"])
    elif brace is not None:
        msg = (
            f'{brace} unquoted is a mapping to YAML (a value that starts with {{ opens one): write "{brace}"'
        )
    elif "input" in first and not isinstance(first["input"], dict | list):
        msg = f"{msg} (got {first['input']!r})"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {loc}: {msg}{more}"


TODO_COMMENT = re.compile(r"(^|\s)#.*TODO")

SHELL_LINES: tuple[Place, ...] = (("target", "kill_command"), ("target", "restart_command"))
"""Where a string is a line ``/bin/sh -c`` runs."""
SHELL_CODE = re.compile(r"[`$\\\"';&|<>()\n\r]")
"""What a shell may read as code, or as the end of a quote, wherever in a line it stands."""


def _shell_safe_scenario_dir(data: Any, scenario_dir: Path, source: str) -> None:
    """ScenarioError if a shell line holds ``{scenario_dir}`` and the directory holds :data:`SHELL_CODE`.

    ``{scenario_dir}`` is written into the line when the file is loaded (so a copy of the scenario run
    elsewhere still names it); what the line is then run with cannot tell it from the user's text."""
    bad = SHELL_CODE.search(str(scenario_dir))
    if bad is None:
        return
    for place, text in strings_at(data):
        if place in SHELL_LINES and "{scenario_dir}" in text:
            raise ScenarioError(
                f"{source}: {'.'.join(map(str, place))} is a shell line with {{scenario_dir}}, and the "
                f"scenario's directory {str(scenario_dir)!r} holds {bad.group()!r}, which a shell would "
                "read as code: write the command as a list of words (each one argument), or move the scenario"
            )


def _is_todo(text: str) -> bool:
    """What ``mcp-chaos init`` leaves: ``TODO``, or ``TODO: what to do``; not a name that begins with
    the word (``TODO_FILE``, a todo app's ``TODO list``)."""
    return text == "TODO" or text.startswith("TODO:")


def _first_todo(node: Any, path: str = "") -> str | None:
    """The first field whose value (or name) is a ``TODO`` that ``mcp-chaos init`` left for the user."""
    if isinstance(node, str):
        return (path or "(top level)") if _is_todo(node) else None
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        here = f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and _is_todo(key):
            return here
        found = _first_todo(value, here)
        if found is not None:
            return found
    return None


def _todo_comment(text: str) -> int | None:
    """The line number of the first comment that says TODO."""
    return next((n for n, line in enumerate(text.splitlines(), 1) if TODO_COMMENT.search(line)), None)


def parse_scenario(
    data: Any, *, source: str = "<scenario>", scenario_dir: Path | None = None, overrides: Sequence[str] = ()
) -> Scenario:
    """Validate already-parsed YAML data into a :class:`Scenario`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (name, seed, target, workload, ...)")
    data = dict(data)
    for assignment in overrides:
        apply_override(data, assignment)
    written: dict[Place, str] = {}
    if scenario_dir is not None:
        _shell_safe_scenario_dir(data, scenario_dir, source)
        written = {place: text for place, text in strings_at(data) if "{scenario_dir}" in text}
        data = map_strings(data, lambda s: s.replace("{scenario_dir}", str(scenario_dir)))
    todo = _first_todo({k: v for k, v in data.items() if k != "description"})
    if todo is not None:
        raise ScenarioError(f"{source}: {todo} still says TODO (left by mcp-chaos init): fill it in")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_validation_error(source, exc)) from None
    scenario._scenario_dir = scenario_dir
    scenario._with_scenario_dir = written
    return scenario


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file; every failure is one ScenarioError line."""
    p = Path(path)
    if p.is_dir():
        raise ScenarioError(
            f"{p} is a directory, not a scenario file (pass a YAML file, e.g. scenarios/pod-kill.yaml)"
        )
    if not p.is_file():
        raise ScenarioError(f"scenario file not found: {p} (pass a YAML file, e.g. scenarios/pod-kill.yaml)")
    try:
        text = p.read_text(encoding="utf-8")
        data = bounded_yaml.load(text)
    except bounded_yaml.YamlTooLarge as exc:
        raise ScenarioError(f"{p}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        marks = [m.line for m in (mark, getattr(exc, "context_mark", None)) if m is not None]
        brace = hints.yaml_leading_brace(text, marks)
        if brace is not None:
            raise ScenarioError(f"{p}: not valid YAML: {brace}") from None
        raise ScenarioError(f"{p}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc}") from None
    scenario = parse_scenario(data, source=str(p), scenario_dir=p.resolve().parent, overrides=overrides)
    line = _todo_comment(text)
    if line is not None:
        raise ScenarioError(
            f"{p}:{line}: a comment still says TODO (left by mcp-chaos init): do what it says, then delete it"
        )
    return scenario
