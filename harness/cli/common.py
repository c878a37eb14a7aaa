"""What every command shares: its exit codes, how it prints, and how it drives the event loop."""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.sanitize import terminal

if TYPE_CHECKING:
    from harness.scenario import Scenario

T = TypeVar("T")
EXIT_GATE_FAILED = 1
EXIT_INTERRUPTED = 130


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP during a command's event loop, naming the partial runs it leaves."""

    def __init__(self, run_dirs: Sequence[Path]) -> None:
        self.run_dirs = list(run_dirs)


def say(text: str = "", *, err: bool = False) -> None:
    """Print a line for people; whatever a server put in it, no control sequence reaches the terminal."""
    print(terminal(text), file=sys.stderr if err else sys.stdout)


def drive(coro: Coroutine[Any, Any, T], run_dirs: Sequence[Path]) -> T:
    """Run the event loop; Ctrl-C, SIGTERM or SIGHUP become Interrupted naming the partial runs."""
    import asyncio

    from harness import eventloop
    from harness.run.runner import cancel_on_stop_signals

    try:
        return eventloop.run(cancel_on_stop_signals(coro))
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise Interrupted(run_dirs) from None


def preflight_call(scenario: Scenario, parent: Path, run_id: str, run_dirs: Sequence[Path]) -> None:
    """Two real calls, each of whose effects must be counted once; PreflightError (exit 2) otherwise."""
    from harness.run.preflight import CALLS, preflight

    sys.stderr.write(f"preflight: {CALLS} calls of {scenario.workload.tool} ...\n")
    sys.stderr.flush()
    done = drive(preflight(scenario, parent, run_id), run_dirs)
    say(done.describe(), err=True)
