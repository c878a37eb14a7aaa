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
from harness.history import read_history
from tests.conftest import ROOT

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
    assert result.summary["causes"]["duplicate"] == {"sever_response": len(expected)}


@pytest.mark.parametrize("mode", ["keyed", "atomic"])
def test_keyed_and_atomic_replay_severed_responses(run: Run, mode: str) -> None:
    result = run(shipped("sever-streams.yaml", mode, 600))
    s = result.summary
    assert s["by_fault"]["sever_response"]["intents_hit"] >= 10
    assert s["verdicts"]["duplicate"] == 0
    assert s["verdicts"]["exactly_once"] == 600


def test_stalls_make_keyed_race_itself(run: Run) -> None:
    result = run(shipped("stall-race.yaml", "keyed", 300))
    s = result.summary
    assert s["faults"]["pod_exits"] == 0
    assert s["verdicts"]["duplicate"] >= 3
    assert s["causes"]["duplicate"] == {"stall": s["verdicts"]["duplicate"]}
    assert s["by_fault"]["stall"]["duplicate"]["count"] == s["verdicts"]["duplicate"]


def test_atomic_survives_stalls(run: Run) -> None:
    result = run(shipped("stall-race.yaml", "atomic", 300))
    s = result.summary
    assert s["by_fault"]["stall"]["intents_hit"] >= 5
    assert s["verdicts"]["exactly_once"] == 300
    assert s["attempts"]["tool_error"] >= 1  # idempotency_key_in_use, retried


@pytest.mark.parametrize(("mode", "expect_duplicates"), [("keyed", True), ("atomic", False)])
def test_cancelled_handlers(run: Run, mode: str, expect_duplicates: bool) -> None:
    result = run(shipped("cancel-mid-stream.yaml", mode, 300))
    s = result.summary
    assert s["faults"]["pod_exits"] == 0  # no crash: the cancellation alone does it
    assert s["by_fault"]["sever_mid_stream"]["intents_hit"] >= 5
    if expect_duplicates:
        assert s["verdicts"]["duplicate"] >= 3
        assert s["causes"]["duplicate"] == {"sever_mid_stream": s["verdicts"]["duplicate"]}
    else:
        assert s["verdicts"]["exactly_once"] == 300
