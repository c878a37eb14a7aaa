"""``mcp-chaos crashpoints``: the target held and killed at each point of a call."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arguments import ids
from harness.cli.common import EXIT_GATE_FAILED, drive, say
from harness.cli.options import add_explore_options, add_scenario_options, explore_options, overrides
from harness.cli.outputs import output_dir, output_file, writing
from harness.errors import ScenarioError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    crash = sub.add_parser(
        "crashpoints",
        help="hold the target at each distinct crash state of a call (its commits, its file operations), "
        "kill it there (or cut its power), retry, judge each try",
    )
    crash.add_argument("scenario", help="scenario YAML file: its target, tool, services and effect source")
    add_explore_options(crash, "crashpoints")
    crash.add_argument(
        "--only", metavar="POINT,...", help="explore only these points, as named (db_commit#2, ...)"
    )
    crash.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    crash.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="exit 0 when nothing was found though some state could not be proven or was not tried "
        "(by default: exit 1)",
    )
    crash.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the two calls that prove the audit sees their effects before anything is explored",
    )
    crash.add_argument(
        "--emit", metavar="DIR", help="write a reproducing scenario and a pytest file per finding into DIR"
    )
    crash.add_argument(
        "--results", default="results", help="directory for run directories (default: results)"
    )
    crash.add_argument("--run-id", help="name of the run directory")
    crash.add_argument("--quiet", action="store_true", help="no progress line")
    add_scenario_options(crash)
    crash.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Kill the target at every distinct crash state of a call; exit 1 when a state has a finding."""
    from harness.crashpoints import emit as crash_emit
    from harness.crashpoints import explore as crash_explore
    from harness.crashpoints import jobs as crash_jobs
    from harness.crashpoints import render as crash_render
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    options = explore_options(args, "crashpoints", only=tuple(ids(args.only)) or None)
    # An exploration makes one call at a time whatever the scenario says: a --set of its
    # faults.crash_points is judged at that concurrency, not refused for the scenario's own.
    scenario = load_scenario(args.scenario, ["workload.concurrency=1", *overrides(args)])
    json_path = output_file(args.json, "--json")
    emit = output_dir(args.emit, "--emit")
    if (why := crash_explore.unexplorable(scenario)) is not None:
        raise ScenarioError(f"crashpoints: {why}")
    check_environment(scenario)
    planned = crash_jobs.prepare(
        scenario, Path(args.results), options, run_id=args.run_id
    )  # refuses options out of range: the line below never announces what will not run
    copies = len(planned.copies)
    sys.stderr.write(
        f"crashpoints: a clean call of {scenario.workload.tool}, then {options.repeat} "
        f"{'try' if options.repeat == 1 else 'tries'} per distinct crash state, within "
        f"{options.budget_s:g} s"
        + (f", in {copies} copies of the target side by side\n" if copies > 1 else "\n")
    )
    progress = None if args.quiet else 1.0
    # Each copy is a run of its own: an interrupted exploration names each one to audit.
    runs = [copy.run_dir for copy in planned.copies]
    exploring = crash_jobs.explore_jobs(
        planned, progress_interval_s=progress, preflight=not args.no_preflight
    )
    found = drive(exploring, runs)
    report = crash_render.write_reports(found)
    say(crash_render.render_terminal(found))  # first: an output the disk refuses costs no table
    print(f"report: {report}", flush=True)
    if json_path is not None:
        with writing(json_path, "--json"):
            json_path.write_text(crash_render.json_text(found), encoding="utf-8")
    if emit is not None:
        with writing(emit, "--emit"):
            for path in crash_emit.write_tests(found, emit):
                sys.stderr.write(f"wrote {path}\n")
    if found.findings or found.unavailable:
        return EXIT_GATE_FAILED
    if found.inconclusive and not args.allow_inconclusive:
        say("crashpoints: inconclusive (pass it with --allow-inconclusive)", err=True)
        return EXIT_GATE_FAILED
    return 0
