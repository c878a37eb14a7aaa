"""``mcp-chaos reproduce``: the article's experiment, naive, keyed and atomic side by side."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arguments import ids
from harness.cli.common import drive, say
from harness.cli.options import add_scenario_options, overrides

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    rep = sub.add_parser("reproduce", help="the article's experiment: naive, keyed and atomic side by side")
    rep.add_argument("--scenario", default="scenarios/pod-kill.yaml")
    rep.add_argument("--runs", type=int, default=1, help="runs per variant, pooled (consecutive seeds)")
    rep.add_argument("--modes", metavar="LIST", help="the modes to run (default: naive,keyed,atomic)")
    rep.add_argument("--results", default="results")
    rep.add_argument("--quiet", action="store_true", help="no progress line")
    rep.add_argument("--no-preflight", action="store_true", help="skip each variant's preflight call")
    add_scenario_options(rep)
    rep.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from harness import reproduce

    results_dir = Path(args.results)
    modes = list(reproduce.MODES) if args.modes is None else ids(args.modes)
    plans = reproduce.plan(Path(args.scenario), modes, args.runs, overrides(args))
    started = time.monotonic()
    run_dirs: list[Path] = []
    running = reproduce.run_plan(
        plans,
        results_dir,
        run_dirs,
        preflight_first=not args.no_preflight,
        progress_interval_s=None if args.quiet else 1.0,
    )
    variants = reproduce.audit(drive(running, run_dirs))
    seconds = time.monotonic() - started
    saved = reproduce.write_reports(results_dir, variants, seconds)
    say(reproduce.table(variants))
    print(f"\nwall time {seconds:.0f}s; table saved to {saved}")
    return 0
