"""The fault proxy against the real SDK server, with explicit per-attempt fault plans (no luck involved).

Each run: a handful of intents, one at a time, through the proxy; the plan names
the attempt to hit. The tests check the client saw a dropped connection (never an
HTTP error response), what the server did, and how the auditor attributed it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Verdict, read_history
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]


def with_faults(
    mode: str, rules: list[dict[str, Any]], env: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    data = invoice_scenario(mode=mode, intents=kw.pop("intents", 3), env=env, **kw)
    data["faults"] = {"stream": rules}
    return data


def attempts_of(result: AuditResult, intent: int) -> list[dict[str, Any]]:
    return [
        e
        for e in read_history(result.run_dir / "history.jsonl")
        if e["type"] == "attempt_ended" and e["intent"] == intent
    ]


def faults_in(result: AuditResult) -> list[dict[str, Any]]:
    return [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == "fault"]


def test_clean_exchanges_pass_through_unchanged(run: Run) -> None:
    # A rule that never matches: every exchange is relayed byte for byte, JSON and SSE alike.
    rules = [{"fault": "sever_request", "tool": "other_tool", "probability": 1.0}]
    for transport in ("json", "sse"):
        data = with_faults("atomic", rules, env={"INVOICES_TRANSPORT": transport}, intents=10, concurrency=4)
        data["workload"]["request_progress"] = True
        result = run(data)
        assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 10
        assert result.summary.attempts.retries == 0
        assert faults_in(result) == []


def test_sever_request_never_reaches_the_server(run: Run) -> None:
    result = run(with_faults("naive", [{"fault": "sever_request", "intent": 1, "attempt": 1}]))
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3  # even naive: nothing was done twice
    first, second = attempts_of(result, 1)
    assert (first["outcome"], first["detail"]) == ("transport_error", "closed_before_response")
    assert second["outcome"] == "ok"
    (fault,) = faults_in(result)
    assert (fault["fault"], fault["id"], fault["intent"], fault["attempt"]) == (
        "sever_request",
        first["id"],
        1,
        1,
    )
    assert fault["tool"] == "create_invoice"
    assert fault["key"] == str(result.intents.set_index("intent").loc[1, "key"])


@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("keyed", 0), ("atomic", 0)])
def test_sever_after_the_server_finished(run: Run, mode: str, duplicates: int) -> None:
    rules = [{"fault": "sever_response", "intent": 1, "attempt": 1, "wait_for_server": True}]
    result = run(with_faults(mode, rules))
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.pods.exits == 0
    first = attempts_of(result, 1)[0]
    # A dropped connection, not an HTTP error: the client cannot tell whether it happened.
    assert (first["outcome"], first["detail"]) == ("transport_error", "closed_before_response")
    (fault,) = faults_in(result)
    assert fault["server_done"] is True
    assert fault["relayed"] == 0
    row = result.intents.set_index("intent").loc[1]
    assert row["faults"] == "sever_response"
    if duplicates:
        assert row["cause"] == "sever_response"
        assert fault_row(s, FaultKind.SEVER_RESPONSE).duplicate.count == 1


def test_sever_mid_body(run: Run) -> None:
    rules = [{"fault": "sever_response", "intent": 0, "attempt": 1, "after_bytes": 60}]
    result = run(with_faults("atomic", rules))
    first = attempts_of(result, 0)[0]
    assert (first["outcome"], first["detail"]) == ("transport_error", "closed_mid_response")
    assert faults_in(result)[0]["relayed"] == 60
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3


SSE = {
    "INVOICES_TRANSPORT": "sse",
    "INVOICES_PRE_COMMIT_MS": "50",
    "INVOICES_BETWEEN_COMMITS_MS": "400",
    "INVOICES_POST_COMMIT_MS": "50",
}


@pytest.mark.parametrize(
    ("mode", "events", "duplicates"),
    [
        # Cut after progress event 2 (sent right after the business commit): the handler is
        # cancelled while it waits between its commits.
        ("keyed", 2, 1),  # the key record is never written: a duplicate without any crash
        ("naive", 2, 1),
        ("atomic", 2, 0),  # invoice and key committed together before event 2: the retry replays
        # Cut after event 1 (before any commit): the cancelled handler leaves nothing behind.
        ("keyed", 1, 0),
        ("naive", 1, 0),
    ],
)
def test_cancellation_mid_stream(run: Run, mode: str, events: int, duplicates: int) -> None:
    rules = [
        {
            "fault": "sever_response",
            "intent": 1,
            "attempt": 1,
            "after_events": events,
            "wait_for_server": False,
        }
    ]
    data = with_faults(mode, rules, env=SSE)
    data["workload"]["request_progress"] = True
    result = run(data)
    s = result.summary
    assert s.pods.exits == 0  # no crash at all
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    first = attempts_of(result, 1)[0]
    assert (first["outcome"], first["detail"], first["form"]) == (
        "transport_error",
        "closed_mid_response",
        "sse",
    )
    assert first["notifications"] == events
    (fault,) = faults_in(result)
    assert fault["server_done"] is False
    row = result.intents.set_index("intent").loc[1]
    assert row["faults"] == "sever_mid_stream"
    if duplicates:
        assert row["cause"] == "sever_mid_stream"
        assert fault_row(s, FaultKind.SEVER_MID_STREAM).duplicate.count == 1


@pytest.mark.parametrize(("mode", "duplicates"), [("keyed", 1), ("naive", 1), ("atomic", 0)])
def test_stall_races_the_retry(run: Run, mode: str, duplicates: int) -> None:
    # The original is held until the client gives up (1 s), then delivered: it reaches the server
    # together with its retry, and both work 400 ms before committing. Unstalled calls take 400 ms,
    # well inside the timeout.
    rules = [{"fault": "stall", "intent": 1, "attempt": 1, "hold": "request"}]
    env = {"INVOICES_PRE_COMMIT_MS": "400"}
    data = with_faults(mode, rules, env=env)
    data["client"]["attempt_timeout_s"] = 1.0
    data["client"]["max_attempts"] = 10
    data["client"]["backoff"] = {"initial_s": 0.01, "max_s": 0.01, "jitter": "none"}
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.LOST] == 0
    row = result.intents.set_index("intent").loc[1]
    assert row["n_timeout"] >= 1
    assert "stall" in row["faults"]
    if duplicates:
        assert row["cause"] == "stall"
    if mode == "atomic":
        # The retry met the original in flight and was told to come back.
        assert row["n_tool_error"] >= 1
        codes = {e.get("code") for e in attempts_of(result, 1)}
        assert "idempotency_key_in_use" in codes


@pytest.mark.parametrize(("mode", "effects"), [("keyed", 1), ("naive", 2)])
def test_stall_holding_the_response_runs_the_original_and_keyed_replays(
    run: Run, mode: str, effects: int
) -> None:
    """The request goes to the server at once; its answer is what is held until the client gives up. The
    naive design then makes the invoice again (the original ran: it never reached the server once)."""
    rules = [{"fault": "stall", "intent": 1, "attempt": 1, "hold": "response"}]
    data = with_faults(mode, rules)
    data["client"]["attempt_timeout_s"] = 0.5
    result = run(data)
    row = result.intents.set_index("intent").loc[1]
    assert row["n_timeout"] == 1
    assert row["effects"] == effects


def test_delay_is_recorded_and_harmless(run: Run) -> None:
    rules = [{"fault": "delay", "intent": 2, "delay_s": 0.2, "direction": "response"}]
    result = run(with_faults("naive", rules))
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 3
    assert result.summary.attempts.retries == 0
    (fault,) = faults_in(result)
    assert (fault["fault"], fault["delay_s"], fault["intent"]) == ("delay", 0.2, 2)
