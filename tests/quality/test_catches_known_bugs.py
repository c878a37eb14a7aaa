"""Quality: the harness catches the bugs it claims to catch, with real kills, and passes the design without.

The latency profiles are chosen so the outcome is certain rather than likely: a
target that spends almost all of a call in the window under test puts nearly
every in-flight attempt in that window when the pod is killed, so missing the
bug would take every one of dozens of attempts to miss it (odds far below
1e-20). Flaky tests would be bugs; these are not probabilistic in practice. (That keyed is
safe when a crash falls outside its window is shown with failpoints, in
tests/integration/test_failpoints.py: a kill timed from outside can always land in
the microseconds between its two commits, so no kill-based test can promise zero.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Verdict
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.quality

Run = Callable[[dict[str, Any]], AuditResult]
KILLS = {"count": 3, "min_uptime_s": 0.3}


def profile(pre: int, between: int, post: int) -> dict[str, str]:
    return {
        "INVOICES_PRE_COMMIT_MS": str(pre),
        "INVOICES_BETWEEN_COMMITS_MS": str(between),
        "INVOICES_POST_COMMIT_MS": str(post),
        "INVOICES_LATENCY_JITTER": "0.2",
    }


def kill_run(run: Run, mode: str, env: dict[str, str], **client: Any) -> AuditResult:
    data = invoice_scenario(mode=mode, intents=300, concurrency=8, env=env, kills=KILLS)
    data["client"].update(client)
    return run(data)


def test_naive_double_bills_when_pods_die_after_commit(run: Run) -> None:
    result = kill_run(run, "naive", profile(1, 0, 40))
    s = result.summary
    assert s.injected(FaultKind.KILL) == 3
    assert s.verdicts[Verdict.DUPLICATE] >= 3
    assert s.duplicate_causes == {"kill": s.verdicts[Verdict.DUPLICATE]}
    assert s.verdicts[Verdict.LOST] == 0


def test_keyed_double_bills_when_pods_die_between_its_commits(run: Run) -> None:
    result = kill_run(run, "keyed", profile(1, 40, 1))
    assert result.summary.verdicts[Verdict.DUPLICATE] >= 3


def test_atomic_is_exactly_once_under_kills(run: Run) -> None:
    result = kill_run(run, "atomic", profile(1, 20, 20))
    s = result.summary
    assert s.injected(FaultKind.KILL) == 3
    assert s.attempts.retries > 0  # the kills did break attempts
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 300


def test_a_fresh_key_per_attempt_defeats_even_atomic(run: Run) -> None:
    # The client-side bug: retrying with a new key makes every retry a new intent.
    result = kill_run(run, "atomic", profile(1, 0, 40), key_reuse="fresh")
    assert result.summary.verdicts[Verdict.DUPLICATE] >= 3
