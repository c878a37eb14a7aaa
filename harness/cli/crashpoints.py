"""``mcp-chaos crashpoints``: the target held and killed at each point of a call."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arguments import ids
from harness.cli.common import EXIT_GATE_FAILED, drive, say
from harness.cli.options import add_scenario_options, overrides
from harness.cli.outputs import output_dir, output_file, writing
from harness.errors import ScenarioError, UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    crash = sub.add_parser(
        "crashpoints", help="hold the target at each commit of a call, kill it there, retry, judge each try"
    )
    crash.add_argument("scenario", help="scenario YAML file: its target, tool, services and effect source")
    crash.add_argument("--repeat", type=int, default=3, metavar="R", help="tries per point (default 3)")
    crash.add_argument("--only", metavar="POINT,...", help="explore only these points (db_commit#2, ...)")
    crash.add_argument(
        "--max-points",
        type=int,
        default=8,
        metavar="N",
        help="points explored at most, the call's own first, then its retries' (default 8)",
    )
    crash.add_argument(
        "--no-power-loss",
        action="store_true",
        help="crash each point as a process kill only (by default, where the call writes files in its "
        "data directory, also as a power loss: the data rolled back to what was durable)",
    )
    crash.add_argument(
        "--jobs",
        metavar="N",
        help="explore in N copies of the target side by side, each a run of its own (its data directory, "
        "PostgreSQL, sink and ports); the same table as one copy (default: the cores)",
    )
    crash.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    crash.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="exit 0 when nothing was found though some point could not be proven (by default: exit 1)",
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
    """Kill the target at every point of a call, R times each; exit 1 when a point has a finding."""
    from harness.crashpoints import emit as crash_emit
    from harness.crashpoints import explore as crash_explore
    from harness.crashpoints import jobs as crash_jobs
    from harness.crashpoints import render as crash_render
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    jobs = job_count(args.jobs, crash_jobs.default_jobs())
    # An exploration makes one call at a time whatever the scenario says: a --set of its
    # faults.crash_points is judged at that concurrency, not refused for the scenario's own.
    scenario = load_scenario(args.scenario, ["workload.concurrency=1", *overrides(args)])
    json_path = output_file(args.json, "--json")
    emit = output_dir(args.emit, "--emit")
    if args.repeat < 1 or args.max_points < 1:
        raise UsageError("--repeat and --max-points must be at least 1")
    if (why := crash_explore.unexplorable(scenario)) is not None:
        raise ScenarioError(f"crashpoints: {why}")
    check_environment(scenario)
    only = ids(args.only) or None
    if only is not None:
        args.max_points = max(args.max_points, len(only))
    planned = crash_jobs.prepare(
        scenario,
        Path(args.results),
        jobs=jobs,
        repeat=args.repeat,
        max_points=args.max_points,
        power_loss=not args.no_power_loss,
        only=only,
        run_id=args.run_id,
    )  # refuses tries, points or --only out of range: the line below never announces what will not run
    sys.stderr.write(
        f"crashpoints: a clean call of {scenario.workload.tool}, then {args.repeat} "
        f"{'try' if args.repeat == 1 else 'tries'} per point"
        + (f", in {jobs} copies of the target side by side\n" if jobs > 1 else "\n")
    )
    progress = None if args.quiet else 1.0
    # Each copy is a run of its own: an interrupted exploration names each one to audit.
    runs = [copy.run_dir for copy in planned.copies]
    found = drive(crash_jobs.explore_jobs(planned, progress_interval_s=progress), runs)
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


def job_count(text: str | None, default: int) -> int:
    """``--jobs``: copies of the target to explore in, 1 to MAX_JOBS; ``default`` (the cores) when not
    given. UsageError (exit 2) for anything else, saying what it takes."""
    from harness.scenario.crash_points import MAX_JOBS

    if text is None:
        return default
    try:
        count = int(text.strip())
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_JOBS:
        raise UsageError(
            f"--jobs {text!r}: give the number of copies of the target to explore in, an integer from 1 "
            f"to {MAX_JOBS} (default: the cores, {default} here)"
        )
    return count
