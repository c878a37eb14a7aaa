"""The options several commands take: scenario overrides and the gate's flags."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.arguments import ids

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    """The ``mcp-chaos`` subcommands, to which each command's module adds its parser."""

GATE_FLAGS = ("max_duplicates", "max_duplicate_rate", "max_lost", "fail_on", "expect", "allow_inconclusive")


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
    p.add_argument("--max-duplicates", type=int, metavar="N", help="fail (exit 1) above N duplicates")
    p.add_argument("--max-duplicate-rate", type=float, metavar="RATE", help="fail above this rate (0.001)")
    p.add_argument("--max-lost", type=int, metavar="N", help="fail above N lost intents")
    p.add_argument(
        "--fail-on",
        metavar="LIST",
        help="fail on any of these only: duplicate,lost,applied_despite_error (default: every finding)",
    )
    p.add_argument(
        "--expect", metavar="LIST", help="a canary: fail unless the run shows each (duplicate,lost,...)"
    )
    p.add_argument(
        "--allow-inconclusive",
        action="store_true",
        default=None,
        help="pass a run that did not test what it planned (by default it fails)",
    )


def add_scenario_options(p: argparse.ArgumentParser) -> None:
    """``--set`` and ``--seed``, for every command that loads a scenario."""
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a scenario field")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
