"""mcp-chaos: a chaos / pod-kill retry-safety harness for MCP servers.

The public surface is small on purpose: load a scenario, run it (and audit
it), audit a run directory. Everything else is implementation and may change
between releases; ``tests/unit/test_public_api.py`` pins this list.

    from harness import load_scenario, prepare_run_dir, run_and_audit
    scenario = load_scenario("scenarios/pod-kill.yaml")
    audit = asyncio.run(run_and_audit(scenario, prepare_run_dir(Path("results"), scenario)))
    print(audit.summary.duplicates.describe())

The names are imported when first used (PEP 562): the pytest plugin
(``harness.pytest_plugin``) is loaded by every pytest run in an environment
that has mcp-chaos installed, and it must cost nothing there until its options
or fixtures are used; importing the auditor eagerly costs half a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harness._version import __version__

if TYPE_CHECKING:
    from harness.audit.auditor import AuditResult, audit_run
    from harness.audit.summary import Summary
    from harness.auditing import audit_and_report
    from harness.errors import HarnessError
    from harness.run.runner import execute, run_and_audit
    from harness.rundir import prepare_run_dir
    from harness.scenario import Scenario, load_scenario, parse_scenario

_HOMES = {
    "AuditResult": "harness.audit.auditor",
    "audit_run": "harness.audit.auditor",
    "Summary": "harness.audit.summary",
    "HarnessError": "harness.errors",
    "prepare_run_dir": "harness.rundir",
    "audit_and_report": "harness.auditing",
    "execute": "harness.run.runner",
    "run_and_audit": "harness.run.runner",
    "Scenario": "harness.scenario",
    "load_scenario": "harness.scenario",
    "parse_scenario": "harness.scenario",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "AuditResult",
    "HarnessError",
    "Scenario",
    "Summary",
    "__version__",
    "audit_and_report",
    "audit_run",
    "execute",
    "load_scenario",
    "parse_scenario",
    "prepare_run_dir",
    "run_and_audit",
]
