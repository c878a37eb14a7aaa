"""``mcp-chaos races``: an intent's retry sent beside its original at each of its points, each judged."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arguments import ids
from harness.cli.common import EXIT_GATE_FAILED, drive, say
from harness.cli.options import add_scenario_options, overrides
from harness.cli.outputs import output_dir, output_file, writing
from harness.errors import ScenarioError

if TYPE_CHECKING:
    from harness.cli.options import Commands

DEFAULT_BUDGET_S = 90.0
DEFAULT_HOLD_LIMIT_S = 2.0


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
        default=DEFAULT_HOLD_LIMIT_S,
        metavar="SECONDS",
        help="how long a held point waits for the other attempt before the ordering is blocked "
        f"(default {DEFAULT_HOLD_LIMIT_S:g})",
    )
    races.add_argument(
        "--only",
        metavar="ORDERING,...",
        help="try only these orderings, by id (original:db_commit#2: the retry sent at the original's "
        "point; retry:db_commit#2: the retry held at its own), as each finding's reproduce line names them",
    )
    races.add_argument(
        "--second",
        choices=("retry", "timeout", "call"),
        default="retry",
        help="what runs beside the first attempt: its retry (default; the same key, its stream broken), its "
        "retry by the client's own timeout (timeout: set below the hold limit, no stream broken), or a "
        "second call (another intent, sent fresh), placed at the file tracer's operations too: a file "
        "store's lost update",
    )
    races.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    races.add_argument(
        "--junit",
        metavar="FILE",
        help="also write JUnit XML: a case per ordering, failed where it has a finding",
    )
    races.add_argument(
        "--emit", metavar="DIR", help="write a reproducing scenario and a pytest file per finding into DIR"
    )
    races.add_argument(
        "--results", default="results", help="directory for run directories (default: results)"
    )
    races.add_argument("--run-id", help="name of the run directory")
    races.add_argument("--quiet", action="store_true", help="no progress line")
    add_scenario_options(races)
    races.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Explore the races; exit 1 when an ordering has a finding."""
    import shlex
    import sys

    from harness.crashpoints import emit as crash_emit
    from harness.crashpoints import racing
    from harness.crashpoints.points import parse_ordering
    from harness.crashpoints.races import HELD_BY_ID, Second
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    sets = overrides(args)
    scenario = load_scenario(args.scenario, ["workload.concurrency=1", *sets])
    only = tuple(ids(args.only))
    second = Second(args.second)
    words = ("first", "second") if second is Second.CALL else ("original", "retry")
    for text in only:
        try:
            held = parse_ordering(text)[0]
        except ValueError as exc:
            raise ScenarioError(f"races --only: {exc}") from None
        if held not in words or held not in HELD_BY_ID:
            raise ScenarioError(f"races --only {text}: with --second {second} use {words[0]}: or {words[1]}:")
    json_path = output_file(args.json, "--json")
    junit_path = output_file(args.junit, "--junit")
    emit = output_dir(args.emit, "--emit")
    check_environment(scenario)
    beside = {Second.CALL: "a second call", Second.TIMEOUT: "its retry on a client timeout"}.get(
        second, "its retry"
    )
    tries = (
        f"then the orderings {', '.join(only)}"
        if only
        else f"then {beside} sent at each of its points and held at each while the first runs"
    )
    sys.stderr.write(f"races: a clean call of {scenario.workload.tool}, {tries}, within {args.budget:g} s\n")
    results = Path(args.results)
    found = drive(
        racing.explore_races(
            scenario,
            results,
            budget_s=args.budget,
            hold_limit_s=args.hold_limit,
            only=only,
            second=second,
            run_id=args.run_id,
            progress_interval_s=None if args.quiet else 1.0,
        ),
        [],
    )
    again = ["mcp-chaos", "races", args.scenario, *(f"--set={one}" for one in sets)]
    if args.hold_limit != DEFAULT_HOLD_LIMIT_S:
        again.append(f"--hold-limit={args.hold_limit:g}")
    if second is not Second.RETRY:
        again.append(f"--second={second}")
    line = shlex.join(again)
    say(racing.render_terminal(found, line))
    if json_path is not None:
        with writing(json_path, "--json"):
            json_path.write_text(racing.json_text(found, line), encoding="utf-8")
    if junit_path is not None:
        with writing(junit_path, "--junit"):
            junit_path.write_text(racing.junit_text(found, line), encoding="utf-8")
    if emit is not None:
        with writing(emit, "--emit"):
            for path in crash_emit.write_race_tests(found, emit):
                sys.stderr.write(f"wrote {path}\n")
    return EXIT_GATE_FAILED if found.findings else 0
