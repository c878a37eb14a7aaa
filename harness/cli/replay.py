"""``mcp-chaos replay``: a run's findings made again, each kill at the point its attempt had reached."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.common import drive, say
from harness.cli.options import add_scenario_options
from harness.cli.outputs import output_file, writing
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands

MAX_TIMES = 20


def add(sub: Commands) -> None:
    """The command's arguments."""
    replay = sub.add_parser(
        "replay",
        help="make a run's findings happen again: each kill at the point its attempt had reached, on a fresh "
        "target; FIXED, STILL FAILING or COULD NOT REPRODUCE per finding (exit 0, 1, 2)",
    )
    replay.add_argument("run_dir", help="a run directory with findings (results/<run-id>)")
    replay.add_argument(
        "intents", nargs="*", type=int, help="only these intents (default: every finding, at most 100)"
    )
    replay.add_argument(
        "--times", type=int, default=3, help=f"tries per finding (default 3, at most {MAX_TIMES})"
    )
    replay.add_argument(
        "--results", help="directory for the replays' run directories (default: the run directory's own)"
    )
    replay.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    add_scenario_options(replay)
    replay.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Replay the findings; 0 when every one is FIXED, 1 when one is STILL FAILING, 2 otherwise."""
    from harness import replay
    from harness.cli.options import overrides

    if not 1 <= args.times <= MAX_TIMES:
        raise UsageError(f"--times {args.times}: give 1 to {MAX_TIMES} tries per finding")
    run_dir = Path(args.run_dir)
    json_path = output_file(args.json, "--json")
    results = Path(args.results) if args.results else run_dir.resolve().parent
    done = drive(
        replay.replay(
            run_dir,
            args.intents,
            times=args.times,
            overrides=overrides(args),
            results=results,
            out=sys.stderr,
        ),
        [run_dir],
    )
    if not done:
        say("replay: the run has no finding to replay (duplicate, lost, applied_despite_error)")
        return 0
    say(replay.render(done))
    if json_path is not None:
        with writing(json_path, "--json"):
            json_path.write_text(json.dumps(replay.as_json(done), indent=2) + "\n", encoding="utf-8")
    return replay.exit_code(done)
