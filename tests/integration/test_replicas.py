"""Replicas behind the harness's balancer, faults that name their victim, and rollouts.

Every test here is deterministic: one intent at a time (concurrency 1), stream
faults on named attempts, so which replica each attempt reaches follows from
the balancing policy alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Verdict, read_history
from tests.helpers.cli import mcp_chaos
from tests.helpers.paths import INVOICES
from tests.helpers.processes import alive
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]
SEVERED = (2, 5, 9)


def replicas(
    mode: str, n: int, *, flaw: str | None = None, balance: str = "round_robin", **kw: Any
) -> dict[str, Any]:
    env = {"INVOICES_FLAW": flaw} if flaw else {}
    data = invoice_scenario(mode=mode, env=env, intents=kw.pop("intents", 12), **kw)
    data["target"]["replicas"] = n
    data["client"]["balance"] = balance
    return data


def severed(data: dict[str, Any]) -> dict[str, Any]:
    """The responses of the first attempts of SEVERED cut after the server committed."""
    data["faults"] = {
        "stream": [
            {"fault": "sever_response", "intent": i, "attempt": 1, "wait_for_server": True} for i in SEVERED
        ]
    }
    return data


def events(result: AuditResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == kind]


@pytest.mark.parametrize(
    ("n", "balance", "flaw", "duplicates"),
    [
        (
            3,
            "round_robin",
            "memory_keys",
            len(SEVERED),
        ),  # every retry reaches a replica that never saw its key
        (3, "sticky", "memory_keys", 0),  # each retry goes back to the replica that did
        (1, "round_robin", "memory_keys", 0),  # one process: its memory replays
        (3, "round_robin", None, 0),  # keys in the shared store: replays on any replica
    ],
    ids=["memory-keys-3-round-robin", "memory-keys-3-sticky", "memory-keys-1", "shared-keys-3"],
)
def test_keys_in_process_memory_double_bill_when_a_retry_moves(
    run: Run, n: int, balance: str, flaw: str | None, duplicates: int
) -> None:
    result = run(severed(replicas("atomic", n, flaw=flaw, balance=balance)))
    summary = result.summary
    assert summary.verdicts[Verdict.DUPLICATE] == duplicates
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == 12 - duplicates
    assert fault_row(summary, FaultKind.SEVER_RESPONSE).intents_hit == len(SEVERED)
    started = events(result, "attempt_started")
    if n == 1:
        assert summary.replicas == []
        assert all("pod" not in e for e in started)
        return
    assert {e["pod"] for e in started} == {"pod-0", "pod-1", "pod-2"}
    moved = sum(row.moved for row in summary.replicas)
    assert moved == (len(SEVERED) if balance == "round_robin" else 0)
    assert sum(row.moved_duplicates for row in summary.replicas) == duplicates
    assert sum(row.intents for row in summary.replicas) == 12
    table = result.intents.set_index("intent")
    for i in SEVERED:
        pods = str(table.loc[i, "pods"]).split(";")
        assert len(pods) == (2 if balance == "round_robin" else 1), (i, pods)


def test_a_kill_hits_only_the_attempts_on_its_victim(run: Run) -> None:
    data = replicas(
        "naive", 3, intents=120, concurrency=6, kills={"count": 1, "victim": 1, "window": [0.3, 0.4]}
    )
    data["target"]["env"]["INVOICES_PRE_COMMIT_MS"] = "60"
    result = run(data)
    kills = events(result, "fault")
    assert [e["pod"] for e in kills] == ["pod-1"]
    table = result.intents
    hit = table[table["faults"].str.contains("kill")]
    assert len(hit) >= 1
    assert hit["pods"].str.contains("pod-1").all(), hit[["intent", "pods"]]
    assert fault_row(result.summary, FaultKind.KILL).injected == 1
    # The other replicas served on: their intents were never hit.
    untouched = table[~table["pods"].str.contains("pod-1")]
    assert (untouched["attempts_hit_by_pod_fault"] == 0).all()


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_rollout_replaces_each_replica_in_turn(run: Run, signal: str) -> None:
    # At most 40 intents a second whatever the machine (50 ms of sleep per call, two at a time): the
    # run lasts 15 s or more, and the rollout (~1.5 s a replica) starts within its first second.
    data = replicas("atomic", 3, intents=600, concurrency=2)
    data["target"]["env"]["INVOICES_PRE_COMMIT_MS"] = "50"
    data["faults"] = {"rollout": {"count": 1, "window": [0.05, 0.1], "signal": signal, "grace_s": 20}}
    result = run(data)
    pod_events = [
        (e["type"], e["pod"])
        for e in read_history(result.run_dir / "history.jsonl")
        if e["type"] in ("fault", "pod_exited", "pod_ready") and e["t"] > 0 and "pod" in e
    ][3:]  # after the first three pod_ready
    expected = []
    for k in range(3):
        expected += [("fault", f"pod-{k}"), ("pod_exited", f"pod-{k}"), ("pod_ready", f"pod-{k}")]
    assert pod_events == expected
    steps = events(result, "fault")
    assert [e["step"] for e in steps] == [0, 1, 2]
    assert all(e["fault"] == "rollout" for e in steps)
    assert ("signal" in steps[0]) == (signal == "SIGTERM")
    assert events(result, "pod_grace_expired") == []
    row = fault_row(result.summary, FaultKind.ROLLOUT)
    assert (row.planned, row.injected) == (3, 3)
    assert result.summary.conclusive
    assert result.summary.verdicts[Verdict.DUPLICATE] == 0  # atomic: safe whatever the signal
    exits = [e["returncode"] for e in events(result, "pod_exited")]
    assert exits == ([-15] * 3 if signal == "SIGTERM" else [-9] * 3)


def test_a_pod_that_ignores_sigterm_gets_sigkill_after_its_grace_period(run: Run) -> None:
    # The shell ignores SIGTERM and outlives the server (which stops at once): a pod that hangs.
    # ~100 intents a second for 4 s: the grace period (1 s) ends long before the workload does.
    data = replicas("atomic", 2, intents=400, concurrency=2)
    data["target"]["env"]["INVOICES_PRE_COMMIT_MS"] = "20"
    data["target"]["command"] = ["sh", "-c", f'trap "" TERM; "$0" {INVOICES} & wait; sleep 60', "{python}"]
    data["faults"] = {
        "kill": {"count": 1, "signal": "SIGTERM", "grace_s": 1, "victim": 0, "window": [0.1, 0.2]}
    }
    result = run(data)
    (kill,) = events(result, "fault")
    (expired,) = events(result, "pod_grace_expired")
    assert (kill["signal"], kill["pod"], expired["pod"], expired["pid"]) == (
        "SIGTERM",
        "pod-0",
        "pod-0",
        kill["pid"],
    )
    assert expired["t"] - kill["t"] >= 1.0  # not before its grace period
    (exited,) = events(result, "pod_exited")
    assert exited["returncode"] == -9
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 400


@pytest.mark.parametrize(
    ("balance", "state", "completed"),
    [
        ("round_robin", "process", 0),  # every answer reaches a replica whose key did not seal its state
        ("sticky", "process", 12),  # the answer goes back to the replica that asked
        ("round_robin", "shared", 12),  # one key for every replica
    ],
    ids=["process-key-round-robin", "process-key-sticky", "shared-key-round-robin"],
)
def test_request_state_must_survive_a_replica_change(
    run: Run, balance: str, state: str, completed: int
) -> None:
    data = replicas("atomic", 3, balance=balance)
    data["target"]["env"]["INVOICES_REQUEST_STATE"] = state
    data["workload"]["arguments"]["customer_id"] = "acme"  # matches two customers: the tool asks which
    data["workload"]["answers"] = {"customer": {"customer_id": "acme-inc"}}
    result = run(data)
    summary = result.summary
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == completed
    assert summary.verdicts[Verdict.DUPLICATE] == 0
    answers = [e for e in events(result, "attempt_started") if e.get("round") == 2]
    assert len(answers) == 12
    moved = sum(
        a["pod"] != q["pod"]
        for q, a in zip(
            [e for e in events(result, "attempt_started") if "round" not in e and e["attempt"] == 1],
            answers,
            strict=True,
        )
    )
    assert moved == (0 if balance == "sticky" else 12)
    if completed == 0:
        refused = [e for e in events(result, "attempt_ended") if e.get("code") == -32602]
        assert len(refused) == 12


@pytest.mark.parametrize("balancer", [False, True], ids=["harness-balancer", "nginx"])
def test_a_replica_that_cannot_start_fails_the_run_and_leaves_nothing(
    tmp_path: Path, request: pytest.FixtureRequest, balancer: bool
) -> None:
    # pod-2 exits at once; pod-0 and pod-1 (and nginx in front of them) must not outlive the failure.
    data = replicas("atomic", 3)
    data["target"]["command"] = [
        "sh",
        "-c",
        f'[ "$0" = pod-2 ] && exit 7; exec "$1" {INVOICES}',
        "{pod}",
        "{python}",
    ]
    if balancer:
        request.getfixturevalue("nginx_server")
        data["services"] = {"balancer": {"server": "nginx"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"), "--run-id", "f", "--no-preflight")
    assert proc.returncode == 3, proc.stderr
    assert "target pod pod-2 exited with code 7 before it was ready" in proc.stderr
    events = list(read_history(tmp_path / "r" / "f" / "history.jsonl"))
    started = [e for e in events if e["type"] in ("pod_started", "service_started")]
    assert {e.get("pod", e.get("service")) for e in started} == {
        "pod-0",
        "pod-1",
        "pod-2",
        *(["nginx"] if balancer else []),
    }
    assert not any(alive(e["pid"]) for e in started)
