"""The driver's retry policy, outcome by outcome, against a client that answers from a script.

The client is a fake (the outcomes a real server gives are the integration tests'); the driver,
the workload, the policy and the history are the real ones, and each test reads the history the
driver wrote, as the auditor does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client import CallResult, ToolCall
from harness.history import Detail, HistoryWriter, IntentStatus, Outcome, read_history
from harness.run.driver import Driver
from harness.run.retry import Answer, Attempts, End, Retry
from harness.scenario import ClientPolicy, parse_scenario
from harness.workload import Workload

OK = CallResult(Outcome.OK, result={"content": []})
BROKEN = CallResult(Outcome.TRANSPORT_ERROR, Detail.CLOSED_BEFORE_RESPONSE)
QUESTION = CallResult(
    Outcome.INPUT_REQUIRED,
    result={
        "resultType": "input_required",
        "inputRequests": {"confirm": {"method": "elicitation/create"}},
        "requestState": "s-1",
    },
)


def tool_error(*, retryable: bool | None, retry_after_ms: int | None = None) -> CallResult:
    return CallResult(Outcome.TOOL_ERROR, retryable=retryable, retry_after_ms=retry_after_ms, message="no")


class ScriptedClient:
    """Answers the n-th call with the n-th result of its script (the last one from then on)."""

    def __init__(self, script: list[CallResult]) -> None:
        self.script = script
        self.calls: list[ToolCall] = []

    async def call_tool(self, call: ToolCall, *, timeout: float) -> CallResult:
        self.calls.append(call)
        return self.script[min(len(self.calls), len(self.script)) - 1]

    async def aclose(self) -> None:
        return None


def drive(
    tmp_path: Path, script: list[CallResult], **client: Any
) -> tuple[ScriptedClient, list[dict[str, Any]]]:
    """One intent through the real driver; the client's calls and the history's events."""
    scenario = parse_scenario(
        {
            "name": "retries",
            "target": {"command": ["unused"]},
            "workload": {
                "intents": 1,
                "concurrency": 1,
                "tool": "create_invoice",
                "arguments": {"memo": "{marker}", "key": "{key}"},
                "answers": {"confirm": {"ok": True}},
            },
            "audit": {"effects": {"sql": {"url": "sqlite:///unused", "query": "select 1 as marker"}}},
            "client": {"backoff": {"initial_s": 0, "max_s": 0}, **client},
        }
    )
    fake = ScriptedClient(script)
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        driver = Driver(Workload(scenario, "ns"), [fake], history, scenario.client, concurrency=1, seed=1)
        asyncio.run(driver.run())
    return fake, list(read_history(path))


class OnDiskClient(ScriptedClient):
    """Checks, at every call, that the history holds every event the driver has numbered: nothing is
    held back while a request is out (a harness killed then would lose what it had seen)."""

    def __init__(self, script: list[CallResult], history: HistoryWriter) -> None:
        super().__init__(script)
        self.history = history
        self.written: list[int] = []

    async def call_tool(self, call: ToolCall, *, timeout: float) -> CallResult:
        written = len(list(read_history(self.history.path)))
        assert written == self.history.next_seq
        self.written.append(written)
        return await super().call_tool(call, timeout=timeout)


def test_every_event_is_on_disk_before_a_request_goes_out(tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            "name": "on-disk",
            "target": {"command": ["unused"]},
            "workload": {"intents": 3, "concurrency": 2, "tool": "t", "arguments": {"memo": "{marker}"}},
            "audit": {"effects": {"sql": {"url": "sqlite:///unused", "query": "select 1 as marker"}}},
            "client": {"backoff": {"initial_s": 0, "max_s": 0}},
        }
    )
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        fake = OnDiskClient([BROKEN, OK], history)
        driver = Driver(Workload(scenario, "ns"), [fake], history, scenario.client, concurrency=2, seed=1)
        asyncio.run(driver.run())
        assert len(list(read_history(path))) == history.next_seq  # the last intent's end, before close
    assert len(fake.written) == 4  # the first call broke and was retried after a backoff


def ended(events: list[dict[str, Any]]) -> dict[str, Any]:
    (end,) = [e for e in events if e["type"] == "intent_ended"]
    return end


@pytest.mark.parametrize(
    ("first", "client", "status", "attempts"),
    [
        (OK, {}, IntentStatus.OK, 1),
        (BROKEN, {}, IntentStatus.OK, 2),
        (CallResult(Outcome.TIMEOUT, Detail.TIMEOUT_NO_RESPONSE), {}, IntentStatus.OK, 2),
        (CallResult(Outcome.SESSION_LOST, Detail.SESSION_NOT_FOUND, status=404), {}, IntentStatus.OK, 2),
        (tool_error(retryable=True), {}, IntentStatus.OK, 2),
        (tool_error(retryable=True), {"retry_tool_errors": "never"}, IntentStatus.REJECTED, 1),
        (tool_error(retryable=False), {}, IntentStatus.REJECTED, 1),
        (tool_error(retryable=None), {}, IntentStatus.REJECTED, 1),
        (CallResult(Outcome.PROTOCOL_ERROR, status=500), {}, IntentStatus.REJECTED, 1),
        (CallResult(Outcome.AUTH_ERROR, status=401), {}, IntentStatus.REJECTED, 1),
        (QUESTION, {}, IntentStatus.OK, 2),
    ],
    ids=lambda v: v.outcome.value if isinstance(v, CallResult) else None,
)
def test_each_outcome_is_retried_answered_or_ends_the_intent(
    tmp_path: Path, first: CallResult, client: dict[str, Any], status: IntentStatus, attempts: int
) -> None:
    fake, events = drive(tmp_path, [first, OK], **client)
    end = ended(events)
    assert (end["status"], end["attempts"], len(fake.calls)) == (status.value, attempts, attempts)
    ids = [call.request_id for call in fake.calls]
    assert len(set(ids)) == len(ids)  # every attempt is a new request
    assert len({call.key for call in fake.calls}) == 1  # and carries the intent's key


def test_an_answer_carries_the_question_state_and_keeps_its_arguments(tmp_path: Path) -> None:
    fake, events = drive(tmp_path, [QUESTION, OK])
    question, answer = fake.calls
    assert question.answer is None
    assert answer.answer == {
        "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
        "requestState": "s-1",
    }
    assert answer.arguments == question.arguments
    rounds = [e.get("round") for e in events if e["type"] == "attempt_started"]
    assert rounds == [None, 2]


def test_a_question_uses_up_no_attempt_and_a_lost_session_neither(tmp_path: Path) -> None:
    lost = CallResult(Outcome.SESSION_LOST, Detail.SESSION_NOT_FOUND, status=404)
    # Two attempts allowed: were either charged, the second break would end it as given up.
    fake, events = drive(tmp_path, [QUESTION, lost, BROKEN, OK], max_attempts=2)
    assert (ended(events)["status"], len(fake.calls)) == ("ok", 4)


def test_a_server_that_keeps_breaking_is_given_up_after_max_attempts(tmp_path: Path) -> None:
    _, events = drive(tmp_path, [BROKEN], max_attempts=3)
    end = ended(events)
    assert (end["status"], end["attempts"], "reason" in end) == ("gave_up", 3, False)
    ends = [e for e in events if e["type"] == "attempt_ended"]
    assert [e["outcome"] for e in ends] == ["transport_error"] * 3


def test_a_server_that_forgets_every_session_cannot_keep_the_intent_for_ever(tmp_path: Path) -> None:
    forgotten = CallResult(Outcome.SESSION_LOST, Detail.SESSION_NOT_FOUND, status=404)
    fake, events = drive(tmp_path, [forgotten], max_attempts=3)
    assert (ended(events)["status"], len(fake.calls)) == ("gave_up", 6)


def test_questions_past_max_input_rounds_end_the_intent_rejected(tmp_path: Path) -> None:
    fake, events = drive(tmp_path, [QUESTION], max_input_rounds=2)
    end = ended(events)
    assert (end["status"], len(fake.calls)) == ("rejected", 3)
    assert "client.max_input_rounds" in end["reason"]


def test_a_question_the_scenario_cannot_answer_ends_the_intent_with_why(tmp_path: Path) -> None:
    other = CallResult(
        Outcome.INPUT_REQUIRED, result={"inputRequests": {"pay": {"method": "sampling/createMessage"}}}
    )
    fake, events = drive(tmp_path, [other])
    end = ended(events)
    assert (end["status"], len(fake.calls)) == ("rejected", 1)
    assert "only elicitation forms are answered" in end["reason"]


def test_a_fresh_key_client_gives_each_retry_its_own_key_in_the_arguments(tmp_path: Path) -> None:
    fake, _ = drive(tmp_path, [BROKEN, BROKEN, OK], key_reuse="fresh")
    keys = [call.key for call in fake.calls]
    assert len(set(keys)) == 3
    assert keys[1:] == [f"{keys[0]}-r2", f"{keys[0]}-r3"]
    assert [call.arguments["key"] for call in fake.calls] == keys


def attempts(clock: Callable[[], float] = lambda: 0.0, **policy: Any) -> Attempts:
    return Attempts(ClientPolicy(**policy), "0", clock=clock, respond=lambda _: {})


def after(a: Attempts, res: CallResult, *, past: bool = False, stopped: str | None = None) -> Any:
    a.start()
    return a.after(res, past_deadline=lambda: past, stopped=stopped)


def test_the_wait_is_the_servers_retry_after_or_the_backoff_whichever_is_longer() -> None:
    none = {"jitter": "none", "initial_s": 0.1, "max_s": 0.4}
    a = attempts(backoff=none)
    assert after(a, tool_error(retryable=True, retry_after_ms=250)) == Retry(0.25)
    assert after(a, BROKEN) == Retry(0.2)
    assert after(a, BROKEN) == Retry(0.4)
    assert after(a, BROKEN) == Retry(0.4)  # capped at max_s


def test_jittered_backoff_stays_within_its_bounds() -> None:
    full = attempts(backoff={"jitter": "full", "initial_s": 1, "max_s": 1})
    equal = attempts(backoff={"jitter": "equal", "initial_s": 1, "max_s": 1})
    full_waits = [after(full, BROKEN).wait_s for _ in range(10)]
    equal_waits = [after(equal, BROKEN).wait_s for _ in range(10)]
    assert all(0 <= w <= 1 for w in full_waits)
    assert all(0.5 <= w <= 1 for w in equal_waits)
    assert len(set(full_waits)) > 1
    assert len(set(equal_waits)) > 1


def test_an_intents_waits_are_its_own_whatever_else_failed_first() -> None:
    """The jitter is drawn from the intent's own seed: the same intent waits the same in a run made again,
    however the other intents' failures fell; two intents wait differently."""
    policy = ClientPolicy.model_validate({"backoff": {"jitter": "full", "initial_s": 1, "max_s": 1}})

    def waits(seed: str) -> list[float]:
        a = Attempts(policy, seed, clock=lambda: 0.0, respond=lambda _: {})
        return [after(a, BROKEN).wait_s for _ in range(5)]

    assert waits("7:backoff:3") == waits("7:backoff:3")
    assert waits("7:backoff:3") != waits("7:backoff:4")


def test_no_attempt_starts_past_give_up_after_s() -> None:
    now = [0.0]
    a = attempts(lambda: now[0], give_up_after_s=1.0, backoff={"jitter": "none", "initial_s": 0.3})
    assert isinstance(after(a, BROKEN), Retry)
    now[0] = 0.75  # the next wait (0.6 s) would start an attempt at 1.35 s
    step = after(a, BROKEN)
    assert isinstance(step, End)
    assert step.status is IntentStatus.GAVE_UP
    assert step.reason == "gave up after 1s of attempts (client.give_up_after_s)"


def test_a_stopped_run_or_a_passed_deadline_retries_nothing() -> None:
    stopped = after(attempts(), BROKEN, stopped="the pod is unavailable")
    assert stopped == End(IntentStatus.GAVE_UP, "the run stopped: the pod is unavailable")
    assert after(attempts(), BROKEN, past=True) == End(IntentStatus.GAVE_UP)


def test_the_deadline_is_asked_only_when_a_retry_would_follow() -> None:
    asked: list[bool] = []

    def past() -> bool:
        asked.append(True)
        return True

    a = attempts()
    for res in (OK, tool_error(retryable=False), QUESTION):
        a.start()
        a.after(res, past_deadline=past, stopped=None)
    assert asked == []


def test_an_answerable_question_is_answered_at_once() -> None:
    a = Attempts(ClientPolicy(), "0", clock=lambda: 0.0, respond=lambda q: {"requestState": 1})
    assert after(a, QUESTION) == Answer({"requestState": 1})
    assert (a.charged, a.questions) == (0, 1)
