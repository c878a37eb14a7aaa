"""mcp-chaos: a chaos / pod-kill retry-safety harness for MCP servers.

The public surface is small on purpose: load a scenario, run it (and audit
it), audit a run directory. Everything else is implementation and may change
between releases; ``tests/unit/test_public_api.py`` pins this list.

    from harness import load_scenario, prepare_run_dir, run_and_audit
    scenario = load_scenario("scenarios/pod-kill.yaml")
    audit = asyncio.run(run_and_audit(scenario, prepare_run_dir(Path("results"), scenario)))
    print(audit.summary.duplicates.describe())
"""

from harness._version import __version__
from harness.audit.auditor import AuditResult, audit_run
from harness.audit.summary import Summary
from harness.errors import HarnessError
from harness.rundir import prepare_run_dir
from harness.runner import audit_and_report, execute, run_and_audit
from harness.scenario import Scenario, load_scenario, parse_scenario

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
