"""Scenarios for the reference invoices target, and whole harness runs of them in-process."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from harness.audit.auditor import AuditResult
from harness.audit.summary import FaultRow, Summary
from harness.history import FaultKind
from harness.run.runner import run_and_audit
from harness.rundir import prepare_run_dir
from harness.scenario import parse_scenario
from tests.helpers.paths import INVOICES, PGCLIENTS

EFFECTS_QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"


def invoice_scenario(
    *,
    mode: str = "atomic",
    intents: int = 3,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    kills: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A scenario dict for the reference invoices target; ``sections`` replace top-level keys."""
    data: dict[str, Any] = {
        "name": "itest",
        "seed": 1,
        "target": {
            "command": ["{python}", str(INVOICES)],
            "env": {"INVOICES_MODE": mode, "INVOICES_DB": "{data_dir}/invoices.db", **(env or {})},
            "restart_delay_s": 0.05,
            "ready_timeout_s": 30,
        },
        "workload": {
            "intents": intents,
            "concurrency": concurrency,
            "tool": "create_invoice",
            "arguments": {
                "customer_id": "c-{index}",
                "amount_cents": {"random_int": [100, 9999]},
                "memo": "{marker}",
                "idempotency_key": "{key}",
            },
        },
        # Retries every 0.1 s on average (full jitter up to 0.2 s), for about 10 s: longer than any
        # restart of the target, even on a loaded machine where it takes seconds. A test of giving
        # up sets its own budget; 30 attempts (3 s) ran out under parallel tests on 2 cores.
        "client": {
            "attempt_timeout_s": 10,
            "max_attempts": 100,
            "backoff": {"initial_s": 0.02, "max_s": 0.2},
        },
        "audit": {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": EFFECTS_QUERY}}},
    }
    if kills is not None:
        data["faults"] = {"kill": kills}
    data.update(sections)
    return data


def invoices_on_postgres(mode: str = "atomic", **env: str) -> dict[str, Any]:
    """The reference invoices target on the harness's PostgreSQL (``services.postgres``), its invoices
    counted by memo; ``env`` is added to the target's."""
    data = invoice_scenario(mode=mode, env=env)
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": EFFECTS_QUERY}}}
    return data


def pgclients_scenario(mode: str = "naive", **env: str) -> dict[str, Any]:
    """The pgclients reference target (``PGCLIENTS_*``: a PostgreSQL client library, a pool, a mode) on
    asyncpg and the harness's PostgreSQL, its invoices counted by memo; ``env`` adds to its settings."""
    data = invoice_scenario()
    data["services"] = {"postgres": {}}
    data["target"]["command"] = ["{python}", str(PGCLIENTS)]
    data["target"]["env"] = {
        "PGCLIENTS_DB": "{postgres_url}",
        "PGCLIENTS_DRIVER": "asyncpg",
        "PGCLIENTS_MODE": mode,
        **env,
    }
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": EFFECTS_QUERY}}}
    return data


def run_scenario(data: dict[str, Any], results: Path) -> AuditResult:
    """A whole run (real target process, driver, supervisor, injector), its audit and reports."""
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(results, scenario)
    # report.html is left to the tests about it (tests/integration/test_reports.py): it costs a second.
    return asyncio.run(
        run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False)
    )


def fault_row(summary: Summary, kind: FaultKind) -> FaultRow:
    """The summary's row for one kind of fault, which the test expects to be there."""
    row = summary.fault(kind)
    assert row is not None, f"no {kind} in the summary's faults: {[r.kind for r in summary.faults]}"
    return row
