"""Quality: the shipped stream-fault scenarios find what they are for, intent by intent.

Which attempts a rule hits is a seeded draw per attempt, so every run of these
tests hits the same attempts; what follows from a hit is the target's design.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Outcome, Verdict, read_history
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import fault_row

pytestmark = pytest.mark.quality

Run = Callable[[dict[str, Any]], AuditResult]


def shipped(name: str, mode: str, intents: int) -> dict[str, Any]:
    path = ROOT / "scenarios" / name
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["target"]["command"] = [
        c.replace("{scenario_dir}", str(path.parent)) for c in data["target"]["command"]
    ]
    data["target"]["env"]["INVOICES_MODE"] = mode
    data["workload"]["intents"] = intents
    return data


def events(result: AuditResult) -> list[dict[str, Any]]:
    return list(read_history(Path(result.run_dir) / "history.jsonl"))


def test_naive_duplicates_are_exactly_the_completed_severs(run: Run) -> None:
    result = run(shipped("sever-streams.yaml", "naive", 600))
    history = events(result)
    post_commit_severs: Counter[int] = Counter(
        e["intent"]
        for e in history
        if e["type"] == "fault" and e["fault"] == "sever_response" and e["server_done"]
    )
    ended_ok = {e["intent"] for e in history if e["type"] == "intent_ended" and e["status"] == "ok"}
    assert sum(post_commit_severs.values()) >= 10  # the seed does hit a fair number of attempts
    rows = result.intents.set_index("intent")
    expected = {i for i in post_commit_severs if i in ended_ok}
    assert set(rows.index[rows["verdict"] == "duplicate"]) == expected
    # Every severed attempt committed once more: effects = 1 + severs, intent by intent.
    for intent, severs in post_commit_severs.items():
        assert rows.loc[intent, "effects"] == 1 + severs
    assert result.summary.duplicate_causes == {"sever_response": len(expected)}


@pytest.mark.parametrize("mode", ["keyed", "atomic"])
def test_keyed_and_atomic_replay_severed_responses(run: Run, mode: str) -> None:
    result = run(shipped("sever-streams.yaml", mode, 600))
    s = result.summary
    assert fault_row(s, FaultKind.SEVER_RESPONSE).intents_hit >= 10
    assert s.verdicts[Verdict.DUPLICATE] == 0
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 600


def test_stalls_make_keyed_race_itself(run: Run) -> None:
    result = run(shipped("stall-race.yaml", "keyed", 300))
    s = result.summary
    assert s.pods.exits == 0
    assert s.verdicts[Verdict.DUPLICATE] >= 3
    assert s.duplicate_causes == {"stall": s.verdicts[Verdict.DUPLICATE]}
    assert fault_row(s, FaultKind.STALL).duplicate.count == s.verdicts[Verdict.DUPLICATE]


def test_atomic_survives_stalls(run: Run) -> None:
    result = run(shipped("stall-race.yaml", "atomic", 300))
    s = result.summary
    assert fault_row(s, FaultKind.STALL).intents_hit >= 5
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 300
    assert s.attempts.by_outcome[Outcome.TOOL_ERROR] >= 1  # idempotency_key_in_use, retried


@pytest.mark.parametrize(("mode", "expect_duplicates"), [("keyed", True), ("atomic", False)])
def test_cancelled_handlers(run: Run, mode: str, expect_duplicates: bool) -> None:
    result = run(shipped("cancel-mid-stream.yaml", mode, 300))
    s = result.summary
    assert s.pods.exits == 0  # no crash: the cancellation alone does it
    assert fault_row(s, FaultKind.SEVER_MID_STREAM).intents_hit >= 5
    if expect_duplicates:
        assert s.verdicts[Verdict.DUPLICATE] >= 3
        assert s.duplicate_causes == {"sever_mid_stream": s.verdicts[Verdict.DUPLICATE]}
    else:
        assert s.verdicts[Verdict.EXACTLY_ONCE] == 300
