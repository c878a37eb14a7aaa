"""``mcp-chaos contract``: the promises of a retry-safe tool, checked on any target a scenario describes.

``session`` starts the scenario's target and makes the calls; ``framework`` says
what a check is (its result, options, what it leaves for others, the registry);
``checks`` holds the promises, one module each; ``run`` runs them in order;
``judging`` says what the answers and the catalog mean (pure); ``report`` writes
what a person and CI read.

Importing this package loads only the framework: the checks, the session and the
run (the target's whole wiring) load when first asked for, so the pure parts
(``judging``, ``report``) import in milliseconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.contract.framework import CheckResult, CheckVerdict

if TYPE_CHECKING:
    from harness.contract.checks import CHECKS, select
    from harness.contract.run import run_contract

_LAZY = {
    "CHECKS": "harness.contract.checks",
    "select": "harness.contract.checks",
    "run_contract": "harness.contract.run",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CHECKS", "CheckResult", "CheckVerdict", "run_contract", "select"]
