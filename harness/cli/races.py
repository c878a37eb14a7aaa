"""``mcp-chaos races``: an intent's retry sent beside its original at each of its points, each judged."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.common import EXIT_GATE_FAILED, drive, say
from harness.cli.options import add_scenario_options, overrides
from harness.cli.outputs import output_file, writing

if TYPE_CHECKING:
    from harness.cli.options import Commands

DEFAULT_BUDGET_S = 90.0


def add(sub: Commands) -> None:
    """The command's arguments."""
    races = sub.add_parser(
        "races",
        help="run each intent's original and a retry with its key side by side (the original's stream "
        "broken at each of its points, the client re-issuing at once), every ordering judged",
    )
    races.add_argument("scenario", help="scenario YAML file: its target, tool, services and effect source")
    races.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"no ordering begins after this many seconds (default {DEFAULT_BUDGET_S:g})",
    )
    races.add_argument(
        "--hold-limit",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how long a held point waits for the other attempt before the ordering is blocked (default 2)",
    )
    races.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    races.add_argument(
        "--results", default="results", help="directory for run directories (default: results)"
    )
    races.add_argument("--run-id", help="name of the run directory")
    races.add_argument("--quiet", action="store_true", help="no progress line")
    add_scenario_options(races)
    races.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Explore the races; exit 1 when an ordering has a finding."""
    import sys

    from harness.crashpoints import racing
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, ["workload.concurrency=1", *overrides(args)])
    json_path = output_file(args.json, "--json")
    check_environment(scenario)
    sys.stderr.write(
        f"races: a clean call of {scenario.workload.tool}, then its retry sent at each of its points and "
        f"held at each while the original runs, within {args.budget:g} s\n"
    )
    results = Path(args.results)
    found = drive(
        racing.explore_races(
            scenario,
            results,
            budget_s=args.budget,
            hold_limit_s=args.hold_limit,
            run_id=args.run_id,
            progress_interval_s=None if args.quiet else 1.0,
        ),
        [],
    )
    say(racing.render_terminal(found))
    if json_path is not None:
        with writing(json_path, "--json"):
            json_path.write_text(racing.json_text(found), encoding="utf-8")
    return EXIT_GATE_FAILED if found.findings else 0
