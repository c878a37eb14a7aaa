"""The ``mcp-chaos`` command line: parses arguments and calls the library, nothing more.

One module per command (``run``, ``audit``, ...), each with its ``add`` (its arguments) and its
``command`` (the call); ``common``, ``outputs`` and ``options`` are what they share. Each command
imports what it uses when it runs: every command's modules took 0.7 s to import (pandas, the
runner, Docker's SDK), and ``audit`` starts reading before it imports its own.

Exit codes: 0 run (and gate) fine; 1 the scenario's gate failed; 2 bad usage or
scenario (an output path that cannot be written is one, found before any work);
3 the target could not be run; 4 a history or its effects could not be audited;
5 ``export --format otlp``'s collector did not take the spans; 130 interrupted (the partial
run is kept and can be audited).

Everything printed passes :func:`harness.sanitize.terminal`: tables and errors
quote servers, and an ESC sequence from one must not reach a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness._version import __version__
from harness.cli import (
    audit,
    cleanup,
    compare,
    conformance_client,
    contract,
    crashpoints,
    explain,
    export,
    init,
    races,
    replay,
    reproduce,
    run,
    trend,
    validate,
)
from harness.cli.common import EXIT_INTERRUPTED, Interrupted, say
from harness.errors import HarnessError

COMMANDS = (
    run,
    audit,
    explain,
    replay,
    export,
    validate,
    reproduce,
    compare,
    trend,
    contract,
    crashpoints,
    races,
    init,
    cleanup,
    conformance_client,
)
"""In the order ``mcp-chaos --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """``mcp-chaos`` and each command's arguments."""
    parser = argparse.ArgumentParser(
        prog="mcp-chaos",
        description="Retry-safety chaos harness for MCP servers (2026-07-28 and 2025, HTTP and stdio).",
    )
    parser.add_argument("--version", action="version", version=f"mcp-chaos {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (``sys.argv[1:]`` by default); its exit code."""
    return _command(build_parser().parse_args(argv))


QUICK_EXIT = ("audit",)


def entry() -> NoReturn:
    """The ``mcp-chaos`` console script and ``python -m harness.cli``: :func:`main`, then the exit.

    After ``audit`` the process ends without Python tearing down the modules it
    imported (pandas, Arrow, DuckDB): 0.12 s of a million-intent audit's 2.9, spent
    on nothing, as mypy ends its runs. By then the audit has closed what it opened
    and removed its temporary files, and the output is flushed. Other commands exit
    as usual: a run's services stop in their own exit handlers.
    """
    args = build_parser().parse_args()
    code = _command(args)
    if args.command in QUICK_EXIT:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # a reader gone (| head): nothing more to tell it
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _command(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
        return code
    except Interrupted as exc:
        for run_dir in exc.run_dirs:
            print(
                f"\nmcp-chaos: interrupted; the partial run is in {run_dir} "
                f"(audit it with: mcp-chaos audit {run_dir})",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        # Outside a run (validate, audit, cleanup) there is no partial run to point at; reports are
        # written through renames, so an interrupted audit leaves the previous ones whole.
        print(f"\nmcp-chaos: interrupted during {args.command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except HarnessError as exc:
        say(f"mcp-chaos: error: {exc.message}", err=True)
        if exc.details:
            say("\n".join("  | " + line for line in exc.details.splitlines()), err=True)
        return exc.exit_code


__all__ = ["build_parser", "entry", "main"]
