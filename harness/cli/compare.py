"""``mcp-chaos compare``: runs side by side (intervals, Fisher's test, sample size)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.common import say
from harness.cli.outputs import output_file, writing

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    compare = sub.add_parser(
        "compare", help="runs side by side: rates, intervals, Fisher's test, sample size"
    )
    compare.add_argument("run_dirs", nargs="+", help="audited run directories; the first is the baseline")
    compare.add_argument(
        "-o", "--output", metavar="FILE", help="also write it: FILE.html (with a plot) or Markdown"
    )
    compare.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from harness.report.compare import counts_of, mixed_scenarios, render_comparison, write_comparison

    run_dirs = [Path(d) for d in args.run_dirs]
    output = output_file(args.output, "-o")
    runs = [counts_of(d) for d in run_dirs]
    if (warning := mixed_scenarios(runs)) is not None:
        say(f"mcp-chaos: warning: {warning}", err=True)
    say(render_comparison(runs))
    if output is not None:
        with writing(output, "-o"):
            write_comparison(output, runs, run_dirs)
    return 0
