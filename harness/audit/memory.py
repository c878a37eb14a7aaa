"""The audit's memory: the C heap's freed pages given back between stages, and no cycle collection.

The audit's stages run on several threads, and glibc gives each its own heap
(arena). A stage that frees tens of megabytes leaves them resident in its arena
until something asks for them, and the next stage, on another thread, allocates
its own: the audit's peak was the sum. ``malloc_trim`` returns the free pages
of every arena (about 15 MB at 3M intents, measured). Elsewhere than glibc it
does nothing.

The audit makes very many short-lived objects (arrays, Arrow tables) and few
reference cycles; Python's cycle collector, run every few hundred allocations,
went over the long-lived objects of the imported modules again and again: 3% of
the audit's CPU at a million intents, measured. It is paused while the audit
folds and judges (:func:`no_cycle_collection`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
from collections.abc import Callable, Iterator


@functools.cache
def _trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, found among the symbols the process has loaded (``find_library`` would
    run ``ldconfig`` in a subprocess to find the C library by name)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def give_back() -> None:
    """Return the C heap's free pages to the system (glibc; elsewhere nothing)."""
    trim = _trim()
    if trim is not None:
        trim(0)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector (objects without cycles are freed as ever); resumed on leaving,
    when it was on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
