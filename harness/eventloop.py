"""Which event loop the harness runs on: uvloop where it is installed, the standard loop when asked.

The driver's cost per call is mostly the event loop's: a bare request-and-answer
loop over asyncio protocols cost 0.08-0.10 ms of CPU per call on the standard
loop and 0.03-0.05 ms on uvloop (libuv, in C), against wrk's 0.02 ms; a contract
check, a crash-point exploration and a preflight make one call at a time, so that
cost is their latency. Nothing in the harness depends on which loop runs it (the
transports are cast, never type-checked: ``client/pool.py``), and both are tested.

``MCP_CHAOS_LOOP``: ``uvloop`` (the default where it imports) or ``asyncio`` (the
standard loop: to rule the loop out when something misbehaves, or where uvloop
has no wheel). Every command (but ``conformance-client``, a client for the suite, whose speed
nothing measures), the pytest plugin and the benchmark's driver start their loops
here (decision 0072).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from harness.errors import UsageError

T = TypeVar("T")
LOOP_ENV = "MCP_CHAOS_LOOP"
LOOPS = ("uvloop", "asyncio")


def chosen() -> str:
    """The loop ``MCP_CHAOS_LOOP`` names, or uvloop where it is installed; UsageError for another name or
    for uvloop asked for by name and missing."""
    asked = os.environ.get(LOOP_ENV, "").strip().lower()
    if asked and asked not in LOOPS:
        raise UsageError(f"{LOOP_ENV}={asked!r}: the event loop is one of {', '.join(LOOPS)}")
    if asked == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if asked == "uvloop":
            raise UsageError(f"{LOOP_ENV}=uvloop, but uvloop is not installed (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of the chosen kind."""
    if chosen() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind, for a caller that steps it itself (the pytest plugin)."""
    return factory()()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""
    with asyncio.Runner(loop_factory=factory()) as runner:
        return runner.run(coro)
