"""The options several commands take: scenario overrides and the gate's flags."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from harness.arguments import ids
from harness.crashpoints.options import SPECS, ExploreOptions, old_spellings, read_options

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    """The ``mcp-chaos`` subcommands, to which each command's module adds its parser."""

GATE_OPTIONS: dict[str, dict[str, Any]] = {
    "max_duplicates": {"type": int, "metavar": "N", "help": "fail (exit 1) above N duplicates"},
    "max_duplicate_rate": {"type": float, "metavar": "RATE", "help": "fail above this rate (0.001)"},
    "max_lost": {"type": int, "metavar": "N", "help": "fail above N lost intents"},
    "fail_on": {
        "metavar": "LIST",
        "help": "fail on any of these only: duplicate,lost,applied_despite_error (default: every finding)",
    },
    "expect": {"metavar": "LIST", "help": "a canary: fail unless the run shows each (duplicate,lost,...)"},
    "allow_inconclusive": {
        "action": "store_true",
        "default": None,
        "help": "pass a run that did not test what it planned (by default it fails)",
    },
}
"""The scenario's gate as flags, each the field of ``gate`` it overrides (``--max-lost``:
``gate.max_lost``) with its argparse arguments: one table for the parser and :func:`overrides`."""
GATE_FLAGS = tuple(GATE_OPTIONS)


def overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` and the flags that stand for scenario fields (``--seed``, the gate's)."""
    sets = list(args.set or [])
    if getattr(args, "seed", None) is not None:
        sets.append(f"seed={args.seed}")
    for flag in GATE_FLAGS:
        value = getattr(args, flag, None)
        if value is None:
            continue
        if flag in ("fail_on", "expect"):
            value = "[" + ", ".join(ids(value)) + "]"
        elif flag == "allow_inconclusive":
            if not value:
                continue
            value = "true"
        sets.append(f"gate.{flag}={value}")
    return sets


def add_gate_options(p: argparse.ArgumentParser) -> None:
    """The scenario's gate from the command line, for CI (they override the scenario's)."""
    for field, arguments in GATE_OPTIONS.items():
        p.add_argument("--" + field.replace("_", "-"), **arguments)


def add_scenario_options(p: argparse.ArgumentParser) -> None:
    """``--set`` and ``--seed``, for every command that loads a scenario."""
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a scenario field")
    p.add_argument("--seed", type=int, help="override the scenario's seed")


def add_explore_options(p: argparse.ArgumentParser, command: str) -> None:
    """The options of a crash exploration (:data:`harness.crashpoints.options.SPECS`: the same in every
    command that explores), and the old spellings ``command`` still takes, hidden."""
    for spec in SPECS:
        if spec.kind == "flag":
            p.add_argument(
                f"--{spec.name}", dest=spec.field, action=argparse.BooleanOptionalAction, help=spec.help
            )
        else:
            p.add_argument(f"--{spec.name}", dest=spec.field, metavar=spec.metavar, help=spec.help)
    for old in old_spellings(command):
        dest = "old_" + old.flag.removeprefix("--").replace("-", "_")
        if old.value is None:
            p.add_argument(old.flag, dest=dest, help=argparse.SUPPRESS)
        else:
            p.add_argument(old.flag, dest=dest, action="store_true", default=None, help=argparse.SUPPRESS)


def explore_options(
    args: argparse.Namespace, command: str, *, only: tuple[str, ...] | None = None
) -> ExploreOptions:
    """The exploration's options as given (an :class:`~harness.crashpoints.options.ExploreOptions`), an
    old spelling read as its new one with a one-line notice on stderr; UsageError for a value out of
    bounds, naming its flag."""
    given: dict[str, str | bool | None] = {spec.field: getattr(args, spec.field, None) for spec in SPECS}
    for old in old_spellings(command):
        value = getattr(args, "old_" + old.flag.removeprefix("--").replace("-", "_"), None)
        if value is None:
            continue
        sys.stderr.write(f"mcp-chaos {command}: {old.notice}\n")
        if old.field is not None and given.get(old.field) is None:
            given[old.field] = old.value if old.value is not None else value
    return read_options(given, only=only)
