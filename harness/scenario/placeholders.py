"""Which placeholders each kind of string may hold, checked when the scenario is validated.

Placeholders are written ``{name}`` (see :mod:`harness.template`; every string
that may hold one is parsed when the scenario is validated, so a valid scenario
always renders). ``{scenario_dir}`` is resolved when the file is loaded (so a
copy of the scenario in a run directory still points at the same target); the
others are resolved when they are used:

* target command and env: ``{python}`` (process runtime only), ``{port}``, ``{data_dir}``
  (for an image: its mount point inside the container), ``{run_dir}``, ``{pod}``, and each
  service's, with its section set (:mod:`harness.scenario.serving`): ``{postgres_url}`` (with
  ``services.postgres``), ``{sink_url}`` (with ``audit.effects.sink``), ``{downstream_url}``,
  ``{downstream_hostport}``, ``{downstream_ca}`` (with ``services.downstream``)
* a url target's kill and restart commands: ``{python}``, ``{run_dir}``
* audit URLs: ``{data_dir}``, ``{run_dir}``, and the services' that an audit may hold (``{postgres_url}``)
* read-tool arguments: ``{namespace}`` (what every marker of the run starts with)
* tool arguments: ``{marker}``, ``{key}``, ``{index}``, ``{seed}``, and generators
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from harness.scenario.serving import SERVICE_PLACEHOLDERS, SERVICES
from harness.template import parse_text

Place = tuple[str | int, ...]
"""Where a string is in parsed YAML: the keys and list indexes that lead to it."""

BASE_PLACEHOLDERS = frozenset({"python", "port", "data_dir", "run_dir", "pod", "scenario_dir"})
"""What every target's command and environment may hold, whatever services the scenario has."""
TARGET_PLACEHOLDERS = BASE_PLACEHOLDERS | frozenset(SERVICE_PLACEHOLDERS)
"""A target's command and environment: the base, and every service's
(:data:`~harness.scenario.serving.SERVICES`; one whose section is not set is refused by
:func:`harness.scenario.rules.services_used`)."""
COMMAND_PLACEHOLDERS = frozenset({"python", "run_dir", "scenario_dir"})
"""What ``target.kill_command`` and ``restart_command`` may hold: the harness's interpreter, the run's
directory, the scenario's (a server started elsewhere has no port, data directory or pod of the harness)."""
AUDIT_PLACEHOLDERS = frozenset({"data_dir", "run_dir", "scenario_dir"}) | frozenset(
    name for service in SERVICES for name in service.audit
)
READ_TOOL_PLACEHOLDERS = frozenset({"namespace"})


def check_placeholders(text: str, allowed: frozenset[str], where: str, *, env_refs: bool = False) -> None:
    """Raise ValueError naming ``where`` unless ``text`` holds only ``allowed`` placeholders
    (and, with ``env_refs``, ``${VAR}`` references to the harness's environment)."""
    parse_text(text, allowed, where, env_refs=env_refs)


def map_strings(node: Any, change: Callable[[str], str]) -> Any:
    """Parsed YAML with ``change`` applied to every string value (keys unchanged): how
    ``{scenario_dir}`` is substituted on loading and passwords are masked on dumping."""
    if isinstance(node, str):
        return change(node)
    if isinstance(node, dict):
        return {k: map_strings(v, change) for k, v in node.items()}
    if isinstance(node, list):
        return [map_strings(v, change) for v in node]
    return node


def strings_at(node: Any, place: Place = ()) -> Iterator[tuple[Place, str]]:
    """Every string value of parsed YAML with its place (keys unchanged, as :func:`map_strings`)."""
    if isinstance(node, str):
        yield place, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings_at(v, (*place, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from strings_at(v, (*place, i))


def map_strings_at(node: Any, change: Callable[[Place, str], str], place: Place = ()) -> Any:
    """:func:`map_strings`, with ``change`` told each string's place."""
    if isinstance(node, str):
        return change(place, node)
    if isinstance(node, dict):
        return {k: map_strings_at(v, change, (*place, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [map_strings_at(v, change, (*place, i)) for i, v in enumerate(node)]
    return node
