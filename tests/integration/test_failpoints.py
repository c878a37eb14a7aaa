"""Deterministic crashes (failpoints in the reference target) through the whole harness.

Each run: 3 intents, one at a time; the target SIGKILLs itself the 2nd time a call
reaches a point, the supervisor restarts it, the driver retries intent 1 with a new
request id and the same key, and the auditor counts invoices per marker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.history import Verdict, read_history
from tests.helpers.scenarios import invoice_scenario

Run = Callable[[dict[str, Any]], AuditResult]


def crash_at(point: str, mode: str) -> dict[str, Any]:
    return invoice_scenario(mode=mode, env={"INVOICES_FAILPOINT": f"{point}@2"})


@pytest.mark.integration
@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("keyed", 1), ("atomic", 0)])
def test_crash_after_business_commit(run: Run, mode: str, duplicates: int) -> None:
    result = run(crash_at("after_business_commit", mode))
    s = result.summary
    assert s.pods.crashes == 1
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    row = result.intents.set_index("intent").loc[1].to_dict()
    # An attempt broken by the crash (or two, on a loaded machine: a retry's connection also closed within
    # the crash window before the supervisor recorded the exit), retries refused while the pod restarts,
    # then one ok.
    assert row["attempts_hit_by_pod_fault"] >= 1
    assert row["n_ok"] == 1
    assert row["n_transport_error"] == row["attempts"] - 1 >= 1
    assert row["effects"] == 1 + duplicates
    if duplicates:
        assert row["cause"] == "crash"


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["keyed", "atomic"])
def test_crash_after_key_record_replays(run: Run, mode: str) -> None:
    result = run(crash_at("after_key_record", mode))
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3
    assert result.summary.pods.crashes == 1
    row = result.intents.set_index("intent").loc[1]
    # As above: the attempts the dying process broke are one, or two on a loaded machine.
    assert row["attempts_hit_by_pod_fault"] >= 1
    assert row["n_ok"] == 1


@pytest.mark.integration
def test_crash_before_business_commit_is_harmless_even_for_naive(run: Run) -> None:
    result = run(crash_at("before_business_commit", "naive"))
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3


@pytest.mark.integration
def test_history_records_every_attempt_with_distinct_ids(run: Run) -> None:
    result = run(crash_at("after_business_commit", "naive"))
    events = list(read_history(result.run_dir / "history.jsonl"))
    started = [e for e in events if e["type"] == "attempt_started"]
    ended = [e for e in events if e["type"] == "attempt_ended"]
    ids = [e["id"] for e in started]
    assert len(ids) == len(set(ids)) == result.summary.attempts.total > 3  # one intent retried
    assert sorted(e["id"] for e in ended) == sorted(ids)
    keys: dict[int, set[str]] = defaultdict(set)
    for e in started:
        keys[e["intent"]].add(e["key"])
    assert all(len(k) == 1 for k in keys.values())  # every attempt of an intent carries its key
    failed = [(e["outcome"], e["detail"]) for e in ended if e["outcome"] != "ok"]
    # The attempt in flight when the pod died, then attempts refused until it was back.
    assert failed[0] == ("transport_error", "closed_before_response")
    assert set(failed[1:]) <= {("transport_error", "connect_refused")}
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_ended"
    assert kinds.count("pod_exited") == 1
    assert kinds.count("pod_ready") == 2
    assert events[-1]["status"] == "completed"
