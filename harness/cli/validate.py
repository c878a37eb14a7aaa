"""``mcp-chaos validate``: a scenario checked and its fault plan printed; with ``--preflight`` one
real call."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import preflight_call, say
from harness.cli.options import add_scenario_options, overrides

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    validate = sub.add_parser("validate", help="check a scenario file and print its fault schedule")
    validate.add_argument("scenario")
    validate.add_argument(
        "--preflight", action="store_true", help="also start the target, make one call, count its effect"
    )
    validate.add_argument("--results", default="results", help="where the preflight's run directory goes")
    add_scenario_options(validate)
    validate.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from harness.faults.describe import describe_plan
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, overrides(args))
    print(f"{args.scenario}: valid scenario {scenario.name!r}, seed {scenario.seed}")
    say("\n".join(describe_plan(scenario)))
    if args.preflight:
        check_environment(scenario)
        sys.stdout.flush()
        preflight_call(scenario, Path(args.results), rundir.new_run_id(scenario), [])
    return 0
