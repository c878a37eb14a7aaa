"""The public surface is pinned: changing it is a decision, made here on purpose."""

from __future__ import annotations

import harness


def test_exported_members() -> None:
    assert harness.__all__ == [
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
    for name in harness.__all__:
        assert getattr(harness, name) is not None
