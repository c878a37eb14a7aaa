"""The promises a retry-safe tool makes, each a check that needs no chaos, only the right calls.

From the source article (sections 02 to 08) and the idempotency reference:
the same key replays the first result, byte for byte, without a second
effect; the same payload under another key is another intent; a key reused
for another payload is refused, not silently replayed; concurrent calls with
one key make one effect; keys outlive the process; a question (MRTR) ends and its
state outlives the process; tool errors say what to do.
Each check makes fresh intents (markers and keys of their own), reads effects
through the scenario's source and returns a verdict with the evidence a
person needs: the responses side by side, the effect counts, the error text.
What an answer or a catalog says is judged by :mod:`harness.contract.judging`;
a check is the calls, the evidence and the order in which it concludes.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.catalog import Annotations
from harness.client.messages import CallResult
from harness.contract.handles import (
    find_handle_tools,
    first_page_arguments,
    forged,
    handle_in,
    handle_problems,
)
from harness.contract.judging import (
    apology,
    contract_problem,
    error_body,
    is_error,
    listing_problems,
    refusal_problem,
    said,
    same_result,
    shown,
    snapshot_diff,
)
from harness.contract.session import ContractSession
from harness.contract.tokens import catalog_tokens
from harness.history import Outcome, excerpt

CONCURRENT_CALLS = 8


class CheckVerdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"


@dataclass(slots=True)
class CheckResult:
    id: str
    title: str
    verdict: CheckVerdict
    why: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Seen:
    """What the checks saw along the way, for the checks that judge it (errors, annotations)."""

    errors: list[tuple[str, CallResult]] = field(default_factory=list)
    empty_successes: list[tuple[str, CallResult]] = field(default_factory=list)
    verdicts: dict[str, CheckVerdict] = field(default_factory=dict)
    made_effects: bool = False
    crash_env: dict[str, str] = field(default_factory=dict)
    """Environment that makes the target crash between its effect and its key record (--crash-env)."""
    token_budget: int = 4000
    """Tokens (o200k_base) the whole catalog may cost every agent, every session (--token-budget)."""
    snapshot: Path | None = None
    """A catalog to compare with (written when missing): a changed description is a contract diff."""
    handle_wait_s: float = 5.0
    """How long the handles check waits for a handle to expire (--handle-wait)."""

    def note(self, check: str, *results: CallResult) -> None:
        """Keep the errors among ``results`` for error_contract."""
        self.errors += [(check, res) for res in results if is_error(res)]


Promise = Callable[["Check", ContractSession, Seen], Awaitable[CheckResult]]


@dataclass(frozen=True, slots=True)
class Check:
    """One promise: its id and title, said once, and the function that checks it.

    The function gets the check itself and concludes with :meth:`passed`,
    :meth:`failed` or :meth:`not_applicable`, which fill in the id and title.
    """

    id: str
    title: str
    promise: Promise

    async def __call__(self, session: ContractSession, seen: Seen) -> CheckResult:
        return await self.promise(self, session, seen)

    def passed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.PASS, why, evidence or {})

    def failed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.FAIL, why, evidence or {})

    def not_applicable(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.NOT_APPLICABLE, why, evidence or {})


def check(id: str, title: str) -> Callable[[Promise], Check]:
    """Declare a check: ``@check("replay", "the same key twice: ...")`` on its function."""

    def declare(promise: Promise) -> Check:
        return Check(id, title, promise)

    return declare


@check("replay", "the same key twice: one effect, the same result")
async def replay(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    first = await s.call(intent)
    second = await s.call(intent)
    seen.note(c.id, first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {"key": intent.key, "first": shown(first), "second": shown(second), "effects": effects}
    if first.outcome is not Outcome.OK:
        return c.failed(f"the first call failed: {said(first)}", evidence)
    seen.made_effects = seen.made_effects or effects > 0
    if effects == 0:
        seen.empty_successes.append((c.id, first))
    if second.outcome is not Outcome.OK:
        return c.failed(
            f"the retry with the same key answered {said(second)} instead of the first result", evidence
        )
    if effects != 1:
        return c.failed(f"{effects} effects for one key", evidence)
    if not same_result(first, second):
        return c.failed("the replay differs from the first result (content or structuredContent)", evidence)
    return c.passed("one effect; the replay is identical", evidence)


@check("twins", "identical payloads under two keys: two effects")
async def twins(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    other = s.intent()  # only its key is used
    first = await s.call(intent)
    second = await s.call(intent, key=other.key)
    seen.note(c.id, first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {
        "keys": [intent.key, other.key],
        "first": shown(first),
        "second": shown(second),
        "effects": effects,
    }
    if first.outcome is not Outcome.OK or second.outcome is not Outcome.OK:
        bad = first if first.outcome is not Outcome.OK else second
        return c.failed(f"a call with a new key was refused: {said(bad)}", evidence)
    if effects != 2:
        dedup = ": the server deduplicates by payload" if effects == 1 else ""
        return c.failed(f"{effects} effect(s) for two intents with two keys{dedup}", evidence)
    return c.passed("two keys, two effects", evidence)


@check("key_reuse", "one key, another payload: a clear non-retryable error, no second effect")
async def key_reuse(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    other = s.intent()
    first = await s.call(intent)
    second = await s.call(intent, payload_of=other)
    seen.note(c.id, first, second)
    counts = await s.effects()
    evidence = {
        "key": intent.key,
        "first": shown(first),
        "second (other payload)": shown(second),
        "effects": {"first payload": counts[intent.marker], "other payload": counts[other.marker]},
    }
    if first.outcome is not Outcome.OK:
        return c.failed(f"the first call failed: {said(first)}", evidence)
    if counts[other.marker] > 0:
        return c.failed(
            f"the other payload took effect ({counts[other.marker]}) under a key already used", evidence
        )
    if second.outcome is Outcome.OK:
        return c.failed(
            "the other payload got a success: the first result, silently, for a different request", evidence
        )
    if second.retryable:
        return c.failed("the refusal says retryable: retrying cannot make a reused key right", evidence)
    return c.passed(f"refused: {said(second)}", evidence)


@check("concurrent_same_key", f"{CONCURRENT_CALLS} simultaneous calls with one key: one effect")
async def concurrent_same_key(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    results = await asyncio.gather(*(s.call(intent) for _ in range(CONCURRENT_CALLS)))
    seen.note(c.id, *results)
    effects = (await s.effects())[intent.marker]
    oks = [r for r in results if r.outcome is Outcome.OK]
    refused = [r for r in results if r.outcome is not Outcome.OK]
    evidence = {"key": intent.key, "effects": effects, "answers": [shown(r) for r in results]}
    if effects != 1:
        return c.failed(f"{effects} effects from {CONCURRENT_CALLS} concurrent calls with one key", evidence)
    if any(not same_result(oks[0], r) for r in oks[1:]):
        return c.failed("the successful answers differ from each other", evidence)
    wrong = [r for r in refused if not (r.outcome is Outcome.TOOL_ERROR and r.retryable)]
    if wrong:
        return c.failed(f"a concurrent call got a refusal that is not retryable: {said(wrong[0])}", evidence)
    return c.passed(f"one effect; {len(oks)} replays, {len(refused)} retryable 'in use' answers", evidence)


@check("restart_keeps_keys", "a key outlives the process: replay after a restart")
async def restart_keeps_keys(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    first = await s.call(intent)
    await s.restart(c.id)
    second = await s.call(intent)
    seen.note(c.id, first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {"key": intent.key, "before": shown(first), "after restart": shown(second), "effects": effects}
    if first.outcome is not Outcome.OK:
        return c.failed(f"the first call failed: {said(first)}", evidence)
    if effects != 1:
        forgotten = ": the key was forgotten with the process" if effects > 1 else ""
        return c.failed(f"{effects} effects{forgotten}", evidence)
    if second.outcome is not Outcome.OK:
        return c.failed(
            f"after the restart the replay answered {said(second)}, not the first result", evidence
        )
    if not same_result(first, second):
        return c.failed("after the restart the replay differs from the first result", evidence)
    return c.passed("one effect, same result", evidence)


@check(
    "crash_window",
    "a crash between the effect and the key record: the retry still makes no second effect",
)
async def crash_window(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    if not seen.crash_env:
        return c.not_applicable(
            "needs --crash-env NAME=VALUE: how the target crashes at that point (a failpoint)"
        )
    crashing = s.variant(seen.crash_env, c.id)
    async with crashing.started():
        intent = crashing.intent()
        first = await crashing.call(intent)
        retry = await crashing.retry(intent)  # while the supervisor starts it again, as a kubelet would
        effects = (await crashing.effects())[intent.marker]
    seen.note(c.id, retry)
    evidence = {
        "env": seen.crash_env,
        "first (crashes)": shown(first),
        "retry": shown(retry),
        "effects": effects,
    }
    if first.outcome is Outcome.OK:
        return c.not_applicable(
            f"the first call succeeded: {', '.join(seen.crash_env)} did not crash the target", evidence
        )
    if effects > 1:
        return c.failed(
            f"{effects} effects: the retry did the work again after a crash left the key unrecorded", evidence
        )
    if retry.outcome is not Outcome.OK:
        return c.failed(f"after the crash the retry answered {said(retry)}", evidence)
    if effects == 0:
        return c.failed("the retry answered OK with no effect", evidence)
    return c.passed("the crash cost nothing: one effect", evidence)


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
async def mrtr(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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


HANDLE_POLL_S = 0.1


async def _expiry(
    s: ContractSession, seen: Seen, tool: str, arguments: dict[str, Any]
) -> tuple[CallResult, float] | None:
    """The first answer that is not a success and when it came (seconds), polling until --handle-wait
    runs out (None then)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() < started + seen.handle_wait_s:
        await asyncio.sleep(HANDLE_POLL_S)
        res = await s.call_tool(tool, arguments)
        if res.outcome is not Outcome.OK:
            return res, loop.time() - started
    return None


@check("handles", "handles: opaque and versioned; an expired one answers handle_expired with a recovery hint")
async def handles(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    tools = {str(t.get("name")): t for t in await s.tools()}
    found = find_handle_tools(list(tools.values()))
    if isinstance(found, str):
        return c.not_applicable(found, {"tools": list(tools)})
    for _ in range(2):  # two effects of the workload's tool: a page of one then has a next
        seen.note(c.id, await s.call(s.intent()))
    asked = first_page_arguments(tools[found.producer].get("inputSchema") or {}, {})
    first = await s.call_tool(found.producer, asked)
    seen.note(c.id, first)
    result = first.result or {}
    text = next((b.get("text") for b in result.get("content") or () if isinstance(b, dict)), None)
    handle = handle_in(result.get("structuredContent"), text, found.field)
    evidence: dict[str, Any] = {"found": found.why, "call": {found.producer: asked}, "first": shown(first)}
    if first.outcome is not Outcome.OK or handle is None:
        why = said(first) if first.outcome is not Outcome.OK else "everything fit one page"
        return c.not_applicable(
            f"{found.producer} returned no handle with {json.dumps(asked)}: {why}", evidence
        )
    evidence["handle"] = handle
    if problems := handle_problems(handle):
        evidence["problems"] = problems
        return c.failed("; ".join(problems), evidence)
    schema = tools[found.consumer].get("inputSchema") or {}
    arguments = first_page_arguments(schema, {found.param: handle})
    follow = await s.call_tool(found.consumer, arguments)
    bogus = first_page_arguments(schema, {found.param: forged(handle)})
    refused = await s.call_tool(found.consumer, bogus)
    seen.note(c.id, follow, refused)
    evidence |= {"continuation": shown(follow), f"forged {bogus[found.param]}": shown(refused)}
    if follow.outcome is not Outcome.OK:
        return c.failed(f"{found.consumer} refused a fresh handle: {said(follow)}", evidence)
    if (problem := refusal_problem(refused, "a forged handle")) is not None:
        return c.failed(problem, evidence)
    waited = await _expiry(s, seen, found.consumer, arguments)
    if waited is None:
        return c.not_applicable(
            f"opaque, versioned, a forged one refused; but the handle still worked after "
            f"{seen.handle_wait_s:g}s, so expiry is untested: give the target a short handle lifetime in "
            "target.env, or a longer --handle-wait",
            evidence,
        )
    expired, after = waited
    seen.note(c.id, expired)
    evidence[f"expired (after {after:.1f}s)"] = shown(expired)
    if (problem := refusal_problem(expired, "an expired handle")) is not None:
        return c.failed(problem, evidence)
    body = error_body(expired) or {}
    if body.get("code") != "handle_expired":
        return c.failed(f"an expired handle answered code {body.get('code')!r}, not handle_expired", evidence)
    return c.passed(
        f"{found.producer} returns opaque, versioned handles ({handle[: handle.index('_') + 1]}...), "
        f"{found.consumer} takes them back and refuses a forged one; expired after {after:.1f}s: "
        f"handle_expired, recovery: {excerpt(body['recovery'], 80)}",
        evidence,
    )


@check("catalog", "the catalog: the same every time, keys where effects are, within its token budget")
async def catalog(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    first, again = await s.catalog(), await s.catalog()
    await s.restart(c.id)
    restarted = await s.catalog()
    tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    costs, total = catalog_tokens(tools)
    evidence: dict[str, Any] = {
        "tools": len(tools),
        "tokens": {"total": total, **costs},
        "budget": seen.token_budget,
    }
    problems = listing_problems(
        first, again, restarted, modern=s.wiring.protocol >= "2026", tokens=total, budget=seen.token_budget
    )
    if seen.snapshot is not None:
        if seen.snapshot.is_file():
            changes = snapshot_diff(json.loads(seen.snapshot.read_text(encoding="utf-8")), tools)
            problems += [f"since the snapshot {seen.snapshot}: {change}" for change in changes]
        else:
            seen.snapshot.write_text(json.dumps(tools, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            evidence["snapshot"] = f"written to {seen.snapshot}"
    evidence["problems"] = problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return c.failed(problems[0] + more, evidence)
    return c.passed(
        f"{len(tools)} tools, {total} tokens (budget {seen.token_budget}), stable across calls and a restart",
        evidence,
    )


@check("error_contract", "errors say what happened and what to do (code, retryable, recovery)")
async def error_contract(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    evidence: dict[str, Any] = {"errors seen": [{"check": by, **shown(r)} for by, r in seen.errors]}
    for by, res in seen.empty_successes:
        if (text := apology(res)) is not None:
            return c.failed(
                f"in {by}, a success that apologises and made no effect: {excerpt(text, 120)}", evidence
            )
    if not seen.errors:
        return c.not_applicable(
            "no check provoked an error (run key_reuse and concurrent_same_key with it)", evidence
        )
    for by, res in seen.errors:
        if (problem := contract_problem(res)) is not None:
            return c.failed(f"in {by}: {problem}", evidence)
    return c.passed(f"{len(seen.errors)} error(s), all keep it", evidence)


@check("annotations", "annotations match behaviour (idempotentHint, readOnlyHint, destructiveHint)")
async def annotations_hold(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    tools = {str(t.get("name")): t for t in await s.tools()}
    tool = tools.get(s.tool)
    if tool is None:
        return c.failed(
            f"{s.tool} is not in tools/list ({', '.join(tools) or 'empty'})", {"tools": list(tools)}
        )
    ann = Annotations.of(tool)
    evidence = {
        "tool": s.tool,
        "annotations": dict(ann.declared),
        "destructiveHint": ann.declared.get("destructiveHint"),
    }
    if ann.read_only is True and seen.made_effects:
        return c.failed(f"{s.tool} says readOnlyHint: true, and the checks saw it make effects", evidence)
    if ann.idempotent is True and seen.verdicts.get("replay") is CheckVerdict.FAIL:
        return c.failed(f"{s.tool} says idempotentHint: true, and replay failed", evidence)
    if not ann.declared:
        return c.not_applicable(f"{s.tool} declares none", evidence)
    return c.passed("what it declares holds", evidence)


CHECKS: dict[str, Check] = {
    c.id: c
    for c in (
        replay,
        twins,
        key_reuse,
        concurrent_same_key,
        restart_keeps_keys,
        crash_window,
        mrtr,
        handles,
        error_contract,
        annotations_hold,
        catalog,
    )
}
"""In the order they run: error_contract and annotations judge what the others saw."""
