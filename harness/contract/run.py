"""Running the contract: the target started once, the checks in order, each result redacted as it comes.

A check's why and evidence quote the server, which is untrusted: each result is
redacted (:mod:`harness.redaction`) and cut to excerpts (:mod:`harness.sanitize`)
as it comes, before any output sees it, and so is an error that stops the checks.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.contract.checks import CHECKS
from harness.contract.framework import CheckResult, Options, Seen
from harness.contract.session import ContractSession
from harness.crashpoints.options import ExploreOptions
from harness.errors import HarnessError
from harness.redaction import Redactor
from harness.sanitize import FIELD_LIMIT, bounded, bounded_data
from harness.scenario import Scenario

WHY_LIMIT = 3 * FIELD_LIMIT
"""A check's why is a sentence that may quote the server more than once."""


async def run_contract(
    scenario: Scenario,
    run_dir: Path,
    ids: Sequence[str],
    *,
    crash_env: dict[str, str] | None = None,
    token_budget: int = 4000,
    snapshot: Path | None = None,
    handle_wait_s: float = 5.0,
    explore: ExploreOptions | None = None,
    on_result: Callable[[CheckResult, float], None] | None = None,
) -> list[CheckResult]:
    """Start the target once and run the checks in order; each result as it comes."""
    session = ContractSession(scenario, run_dir, secrets.token_hex(4))
    seen = Seen()
    options = Options(
        crash_env=dict(crash_env or {}),
        token_budget=token_budget,
        snapshot=snapshot,
        handle_wait_s=handle_wait_s,
        explore=explore or ExploreOptions(),
    )
    results = []
    redactor = session.wiring.redactor
    try:
        async with session.started():
            for check_id in ids:
                started = time.monotonic()
                result = told(await CHECKS[check_id](session, options, seen), redactor)
                results.append(result)
                if on_result is not None:
                    on_result(result, time.monotonic() - started)
    except HarnessError as exc:
        raise redactor.error(exc) from None
    return results


def told(result: CheckResult, redactor: Redactor) -> CheckResult:
    """The result as outputs may show it: secrets redacted first, then every text cut to an excerpt."""
    return dataclasses.replace(
        result,
        why=bounded(redactor.text(result.why), WHY_LIMIT),
        evidence=bounded_data(redactor.data(result.evidence)),
    )
