"""The promises a retry-safe tool makes, each a check that needs no chaos, only the right calls.

From the source article (sections 02 to 08) and the idempotency reference:
the same key replays the first result, byte for byte, without a second
effect; the same payload under another key is another intent; a key reused
for another payload is refused, not silently replayed; concurrent calls with
one key make one effect; keys outlive the process; a question (MRTR) ends and its
state outlives the process; tool errors say what to do.
Each check makes fresh intents (markers and keys of their own), reads effects
through the scenario's source and returns a verdict with the evidence a
person needs: the responses side by side, the effect counts, the error text.
What an answer or a catalog says is judged by :mod:`harness.contract.judging`;
a check is the calls, the evidence and the order in which it concludes.

Where no key travels (no ``{key}`` in the arguments, none in ``_meta`` or a
header), a retry is the same call again, and the key checks become checks of
repetition, worded as such: a naturally idempotent write passes ``replay``, a
keyless insert fails it because a retry cannot be told from a new call, and
``twins`` and ``key_reuse`` do not apply. Every check that concludes
"deduplicated" or "replayed" also compares what was acknowledged with what was
stored, so lost acknowledged writes are never read as deduplication.
A check that raises is reported as ``error`` with its reason; the others run.

One module per check (``MODULES``), each registering itself with
:func:`harness.contract.framework.check` as it is imported here, in the order the
report lists them; what must run before what is declared by the checks themselves
(``needs``, ``judges``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from harness.contract.framework import REGISTRY, Check, choose, in_order

MODULES = (
    "replay",
    "twins",
    "key_reuse",
    "concurrent",
    "restart",
    "crash_window",
    "crash_points",
    "mrtr",
    "handles",
    "catalog",
    "error_contract",
    "annotations",
)
"""The checks' modules, in the order the report lists them (each registers its check as imported)."""
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")

CHECKS: dict[str, Check] = {cid: REGISTRY[cid] for cid in in_order(REGISTRY)}
"""Every check, in the order they run: each after what it needs, error_contract and annotations (which
judge what the others saw) last."""


def select(only: Sequence[str], skip: Sequence[str]) -> list[str]:
    """The check ids to run, in suite order, with what the chosen ones need; UsageError naming an
    unknown id."""
    return choose(CHECKS, only, skip)


__all__ = ["CHECKS", "MODULES", "select"]
