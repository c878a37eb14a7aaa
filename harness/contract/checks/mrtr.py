"""``mrtr``: a call that asks (input_required) ends within two questions, its state outlives a restart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    said,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome

MRTR_QUESTIONS = 2
"""Questions one call may ask before it must end: two round trips, then a terminal answer."""
MRTR_GIVE_UP = 5
"""Requests the check makes for one call before it calls the loop endless."""


def declined(question: Mapping[str, Any]) -> dict[str, Any]:
    """The answer that declines every elicitation of a question, its ``requestState`` echoed."""
    requests = question.get("inputRequests") or {}
    answer: dict[str, Any] = {"inputResponses": {name: {"action": "decline"} for name in requests}}
    if "requestState" in question:
        answer["requestState"] = question["requestState"]
    return answer


@check("mrtr", "input_required: at most two questions, then an end; requestState survives a restart")
async def mrtr(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    intent = s.intent()
    asked = await s.exchange(intent)
    evidence: dict[str, Any] = {"arguments": s.payload(intent), "asked": shown(asked)}
    if asked.outcome is not Outcome.INPUT_REQUIRED:
        return c.not_applicable(
            f"{s.tool} answered {said(asked)} without asking: nothing to test; give arguments that "
            "make it ask (workload.arguments) and what to answer (workload.answers)",
            evidence,
        )
    assert asked.result is not None
    answer = s.workload.respond(asked.result)
    if isinstance(answer, str):
        return c.not_applicable(f"{s.tool} asks, but the scenario cannot answer: {answer}", evidence)

    # Bounded: a call whose every question is declined must end, after at most two questions.
    probe = s.intent()
    loop = [await s.exchange(probe)]
    while loop[-1].outcome is Outcome.INPUT_REQUIRED and len(loop) < MRTR_GIVE_UP:
        loop.append(await s.exchange(probe, answer=declined(loop[-1].result or {})))
    questions = sum(r.outcome is Outcome.INPUT_REQUIRED for r in loop)
    evidence["every question declined"] = [shown(r) for r in loop]
    if loop[-1].outcome is Outcome.INPUT_REQUIRED:
        return c.failed(
            f"still asking after {questions} declined questions (the check gave up): an endless loop",
            evidence,
        )
    if questions > MRTR_QUESTIONS:
        return c.failed(
            f"{questions} questions before the end: at most {MRTR_QUESTIONS} round trips, then an end",
            evidence,
        )
    seen.note(c.id, loop[-1])

    # The first question answered after a restart: the state must outlive the process that sealed it.
    await s.restart(c.id)
    answered = await s.call(intent, answer=answer)  # and any question that follows
    seen.note(c.id, answered)
    effects = (await s.effects())[intent.marker]
    seen.made_effects = seen.made_effects or effects > 0
    evidence |= {"answered after a restart": shown(answered), "effects": effects}
    if answered.outcome is not Outcome.OK:
        lost = (
            ": the requestState did not outlive the process (sealed with a per-process key?)"
            if answered.outcome is Outcome.PROTOCOL_ERROR
            else ""
        )
        return c.failed(f"the answer sent after a restart got {said(answered)}{lost}", evidence)
    if effects != 1:
        return c.failed(f"{effects} effects for one intent across its rounds", evidence)
    return c.passed(
        f"declined, it ended after {questions} question(s) with {said(loop[-1])}; "
        "answered after a restart, it completed with one effect",
        evidence,
    )
