"""``mcp-chaos trend``: the duplicate rate over runs; exit 1 when the newest moved."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.common import EXIT_GATE_FAILED, say
from harness.cli.outputs import output_file, writing

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    trend_cmd = sub.add_parser("trend", help="duplicate rate over runs from a trend file; exit 1 if it moved")
    trend_cmd.add_argument("file", help="a trend file written by run --trend")
    trend_cmd.add_argument(
        "-o", "--output", metavar="FILE", help="also write FILE.html (a plot) or the table"
    )
    trend_cmd.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """The trend table; exit 1 when the newest run of a scenario moved beyond its interval."""
    from harness.report import trend

    path = Path(args.file)
    output = output_file(args.output, "-o")
    table, moved = trend.render(path)
    say(table)
    if output is not None:
        with writing(output, "-o"):
            trend.write_output(path, output)
    if moved:
        print(
            "\nthe newest run's interval does not overlap the previous run's: the rate moved", file=sys.stderr
        )
    return EXIT_GATE_FAILED if moved else 0
