"""``mcp-chaos explain``: the story of one intent, or of the first of each kind of finding."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import say
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    explain_cmd = sub.add_parser(
        "explain", help="what happened to an intent, or to the first intent of each kind of finding"
    )
    explain_cmd.add_argument("run_dir")
    explain_cmd.add_argument(
        "intent", nargs="?", type=int, help="an intent's index (default: one per finding)"
    )
    explain_cmd.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """The story of one intent, or of the first intent of each kind of finding."""
    from harness.audit.auditor import audit_run, story_of
    from harness.report.stories import explain, story_lines

    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    if args.intent is not None and not 0 <= args.intent < 2**62:
        raise UsageError(f"explain: intent {args.intent} is no intent's index (they count from 0)")
    audit = audit_run(run_dir)
    if args.intent is None:
        say(explain(audit.summary))
    else:
        say("\n".join(story_lines(story_of(audit, args.intent))))
    return 0
