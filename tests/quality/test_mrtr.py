"""Quality: a chaos run covers tools that ask questions (MRTR), and tells the two requestState keys apart.

Every intent names the ambiguous customer, so each is a question (fast) and an
answer that does the work (80 ms before the commit): at any moment nearly every
attempt in flight is an answer, and each kill breaks several of them. Their
retries carry the same requestState to the restarted pod. Sealed with the SDK's
per-process key it is refused there, every time; sealed with a shared key it
is accepted and the intent takes effect once. With three kills hitting about
eight answers each, the per-process run shows no rejection only if every kill
missed every answer, which the latency profile rules out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from harness import rundir
from harness.audit.auditor import AuditResult
from harness.history import EventType, FaultKind, Outcome, Verdict
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.quality

Run = Callable[[dict[str, Any]], AuditResult]
INTENTS = 200


def mrtr_run(run: Run, request_state: str) -> AuditResult:
    env = {
        "INVOICES_REQUEST_STATE": request_state,
        "INVOICES_PRE_COMMIT_MS": "80",
        "INVOICES_POST_COMMIT_MS": "5",
        "INVOICES_LATENCY_JITTER": "0.3",
    }
    data = invoice_scenario(
        mode="atomic", intents=INTENTS, concurrency=8, env=env, kills={"count": 3, "min_uptime_s": 0.3}
    )
    data["workload"]["arguments"]["customer_id"] = "acme"
    data["workload"]["answers"] = {"customer": {"customer_id": "acme-inc"}}
    return run(data)


def test_a_shared_key_survives_kills_between_rounds_and_each_intent_counts_once(run: Run) -> None:
    s = mrtr_run(run, "shared").summary
    assert s.injected(FaultKind.KILL) == 3
    assert s.verdicts[Verdict.EXACTLY_ONCE] == INTENTS  # one intent, one effect, however many rounds
    assert s.attempts.by_outcome[Outcome.INPUT_REQUIRED] >= INTENTS
    assert s.attempts.by_outcome[Outcome.PROTOCOL_ERROR] == 0


def test_the_per_process_key_fails_the_rounds_a_kill_interrupts(run: Run) -> None:
    result = mrtr_run(run, "process")
    s = result.summary
    assert s.injected(FaultKind.KILL) == 3
    refused = s.verdicts[Verdict.REJECTED] + s.verdicts[Verdict.APPLIED_DESPITE_ERROR]
    assert refused >= 3
    assert s.verdicts[Verdict.EXACTLY_ONCE] == INTENTS - refused
    assert s.verdicts[Verdict.DUPLICATE] == 0
    assert any("Invalid or expired requestState" in e.message for e in s.errors)
    # Each refused answer is a later round of its intent, retried after the kill, in the history.
    events = [orjson.loads(line) for line in (result.run_dir / rundir.HISTORY).read_bytes().splitlines()]
    rounds = {e["id"]: e for e in events if e["type"] == EventType.ATTEMPT_STARTED and "round" in e}
    refusals = [e for e in events if e["type"] == EventType.ATTEMPT_ENDED and e.get("code") == -32602]
    assert len(refusals) >= 3
    assert all(rounds[e["id"]]["round"] == 2 for e in refusals)


@pytest.mark.parametrize("flaw", ["", "endless_questions"])
def test_a_question_that_cannot_be_answered_ends_the_intent(run: Run, flaw: str) -> None:
    data = invoice_scenario(mode="atomic", intents=4, env={"INVOICES_FLAW": flaw})
    data["workload"]["arguments"]["customer_id"] = "acme"
    data["workload"]["answers"] = {"customer": {"customer_id": "nobody"}}  # not one of the choices
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.REJECTED] == 4
    events = [orjson.loads(line) for line in (result.run_dir / rundir.HISTORY).read_bytes().splitlines()]
    ended = [e for e in events if e["type"] == EventType.INTENT_ENDED]
    if flaw:  # the server never stops asking: the client's bound (client.max_input_rounds) ends it
        assert s.attempts.by_outcome[Outcome.INPUT_REQUIRED] == 4 * 4
        assert {e.get("reason") for e in ended} == {"still asked after 3 answers (client.max_input_rounds)"}
    else:  # the server's bound: two questions, then its terminal error
        assert s.attempts.by_outcome[Outcome.INPUT_REQUIRED] == 4 * 2
        assert s.attempts.by_outcome[Outcome.TOOL_ERROR] == 4
        assert {e.get("reason") for e in ended} == {None}
