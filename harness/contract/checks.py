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
"""

from __future__ import annotations

import asyncio
import enum
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client.messages import CallResult
from harness.contract.session import ContractSession
from harness.history import Outcome, excerpt

CONCURRENT_CALLS = 8
MAX_TOOLS = 15
MAX_SENTENCES = 3
"""One sentence of purpose, one of rules (the first article's FAQ), and one to spare."""
SENTENCE_END = re.compile(r"[.!?](\s|$)")
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
APOLOGY = re.compile(r"\b(sorry|something went wrong|unable to|could not|couldn't|failed to)\b", re.I)
JSONRPC_STANDARD = {-32700, -32600, -32601, -32602, -32603}


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


def shown(res: CallResult) -> dict[str, Any]:
    """A response as evidence: outcome, and what the server said."""
    out: dict[str, Any] = {"outcome": res.outcome.value}
    if res.detail:
        out["detail"] = str(res.detail)
    if res.result is not None:
        out["content"] = res.result.get("content")
        if "structuredContent" in res.result:
            out["structuredContent"] = res.result.get("structuredContent")
    elif res.message:
        out["message"] = res.message
    return out


def same_result(a: CallResult, b: CallResult) -> bool:
    """Identical content and structuredContent, compared exactly."""
    ra, rb = a.result or {}, b.result or {}
    return ra.get("content") == rb.get("content") and ra.get("structuredContent") == rb.get(
        "structuredContent"
    )


def _note(seen: Seen, check: str, *results: CallResult) -> None:
    for res in results:
        if res.outcome is Outcome.TOOL_ERROR or (res.outcome is Outcome.PROTOCOL_ERROR and res.error_code):
            seen.errors.append((check, res))


Check = Callable[[ContractSession, Seen], Awaitable[CheckResult]]


async def replay(s: ContractSession, seen: Seen) -> CheckResult:
    title = "the same key twice: one effect, the same result"
    intent = s.intent()
    first = await s.call(intent)
    second = await s.call(intent)
    _note(seen, "replay", first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {"key": intent.key, "first": shown(first), "second": shown(second), "effects": effects}
    if first.outcome is not Outcome.OK:
        return CheckResult(
            "replay", title, CheckVerdict.FAIL, f"the first call failed: {_said(first)}", evidence
        )
    seen.made_effects = seen.made_effects or effects > 0
    if effects == 0:
        seen.empty_successes.append(("replay", first))
    if second.outcome is not Outcome.OK:
        why = f"the retry with the same key answered {_said(second)} instead of the first result"
        return CheckResult("replay", title, CheckVerdict.FAIL, why, evidence)
    if effects != 1:
        return CheckResult("replay", title, CheckVerdict.FAIL, f"{effects} effects for one key", evidence)
    if not same_result(first, second):
        why = "the replay differs from the first result (content or structuredContent)"
        return CheckResult("replay", title, CheckVerdict.FAIL, why, evidence)
    return CheckResult("replay", title, CheckVerdict.PASS, "one effect; the replay is identical", evidence)


async def twins(s: ContractSession, seen: Seen) -> CheckResult:
    title = "identical payloads under two keys: two effects"
    intent = s.intent()
    other = s.intent()  # only its key is used
    first = await s.call(intent)
    second = await s.call(intent, key=other.key)
    _note(seen, "twins", first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {
        "keys": [intent.key, other.key],
        "first": shown(first),
        "second": shown(second),
        "effects": effects,
    }
    if first.outcome is not Outcome.OK or second.outcome is not Outcome.OK:
        bad = first if first.outcome is not Outcome.OK else second
        why = f"a call with a new key was refused: {_said(bad)}"
        return CheckResult("twins", title, CheckVerdict.FAIL, why, evidence)
    if effects != 2:
        why = f"{effects} effect(s) for two intents with two keys" + (
            ": the server deduplicates by payload" if effects == 1 else ""
        )
        return CheckResult("twins", title, CheckVerdict.FAIL, why, evidence)
    return CheckResult("twins", title, CheckVerdict.PASS, "two keys, two effects", evidence)


async def key_reuse(s: ContractSession, seen: Seen) -> CheckResult:
    title = "one key, another payload: a clear non-retryable error, no second effect"
    intent = s.intent()
    other = s.intent()
    first = await s.call(intent)
    second = await s.call(intent, payload_of=other)
    _note(seen, "key_reuse", first, second)
    counts = await s.effects()
    evidence = {
        "key": intent.key,
        "first": shown(first),
        "second (other payload)": shown(second),
        "effects": {"first payload": counts[intent.marker], "other payload": counts[other.marker]},
    }
    if first.outcome is not Outcome.OK:
        return CheckResult(
            "key_reuse", title, CheckVerdict.FAIL, f"the first call failed: {_said(first)}", evidence
        )
    if counts[other.marker] > 0:
        why = f"the other payload took effect ({counts[other.marker]}) under a key already used"
        return CheckResult("key_reuse", title, CheckVerdict.FAIL, why, evidence)
    if second.outcome is Outcome.OK:
        why = "the other payload got a success: the first result, silently, for a different request"
        return CheckResult("key_reuse", title, CheckVerdict.FAIL, why, evidence)
    if second.retryable:
        why = "the refusal says retryable: retrying cannot make a reused key right"
        return CheckResult("key_reuse", title, CheckVerdict.FAIL, why, evidence)
    return CheckResult("key_reuse", title, CheckVerdict.PASS, f"refused: {_said(second)}", evidence)


async def concurrent_same_key(s: ContractSession, seen: Seen) -> CheckResult:
    title = f"{CONCURRENT_CALLS} simultaneous calls with one key: one effect"
    intent = s.intent()
    results = await asyncio.gather(*(s.call(intent) for _ in range(CONCURRENT_CALLS)))
    _note(seen, "concurrent_same_key", *results)
    effects = (await s.effects())[intent.marker]
    oks = [r for r in results if r.outcome is Outcome.OK]
    refused = [r for r in results if r.outcome is not Outcome.OK]
    evidence = {"key": intent.key, "effects": effects, "answers": [shown(r) for r in results]}
    if effects != 1:
        why = f"{effects} effects from {CONCURRENT_CALLS} concurrent calls with one key"
        return CheckResult("concurrent_same_key", title, CheckVerdict.FAIL, why, evidence)
    if any(not same_result(oks[0], r) for r in oks[1:]):
        why = "the successful answers differ from each other"
        return CheckResult("concurrent_same_key", title, CheckVerdict.FAIL, why, evidence)
    wrong = [r for r in refused if not (r.outcome is Outcome.TOOL_ERROR and r.retryable)]
    if wrong:
        why = f"a concurrent call got a refusal that is not retryable: {_said(wrong[0])}"
        return CheckResult("concurrent_same_key", title, CheckVerdict.FAIL, why, evidence)
    why = f"one effect; {len(oks)} replays, {len(refused)} retryable 'in use' answers"
    return CheckResult("concurrent_same_key", title, CheckVerdict.PASS, why, evidence)


async def restart_keeps_keys(s: ContractSession, seen: Seen) -> CheckResult:
    title = "a key outlives the process: replay after a restart"
    intent = s.intent()
    first = await s.call(intent)
    await s.restart("restart_keeps_keys")
    second = await s.call(intent)
    _note(seen, "restart_keeps_keys", first, second)
    effects = (await s.effects())[intent.marker]
    evidence = {"key": intent.key, "before": shown(first), "after restart": shown(second), "effects": effects}
    if first.outcome is not Outcome.OK:
        why = f"the first call failed: {_said(first)}"
        return CheckResult("restart_keeps_keys", title, CheckVerdict.FAIL, why, evidence)
    if effects != 1:
        why = f"{effects} effects" + (": the key was forgotten with the process" if effects > 1 else "")
        return CheckResult("restart_keeps_keys", title, CheckVerdict.FAIL, why, evidence)
    if second.outcome is not Outcome.OK:
        why = f"after the restart the replay answered {_said(second)}, not the first result"
        return CheckResult("restart_keeps_keys", title, CheckVerdict.FAIL, why, evidence)
    if not same_result(first, second):
        why = "after the restart the replay differs from the first result"
        return CheckResult("restart_keeps_keys", title, CheckVerdict.FAIL, why, evidence)
    return CheckResult("restart_keeps_keys", title, CheckVerdict.PASS, "one effect, same result", evidence)


async def crash_window(s: ContractSession, seen: Seen) -> CheckResult:
    title = "a crash between the effect and the key record: the retry still makes no second effect"
    if not seen.crash_env:
        why = "needs --crash-env NAME=VALUE: how the target crashes at that point (a failpoint)"
        return CheckResult("crash_window", title, CheckVerdict.NOT_APPLICABLE, why, {})
    crashing = s.variant(seen.crash_env, "crash_window")
    async with crashing.started():
        intent = crashing.intent()
        first = await crashing.call(intent)
        retry = await crashing.retry(intent)  # while the supervisor starts it again, as a kubelet would
        effects = (await crashing.effects())[intent.marker]
    _note(seen, "crash_window", retry)
    evidence = {
        "env": seen.crash_env,
        "first (crashes)": shown(first),
        "retry": shown(retry),
        "effects": effects,
    }
    if first.outcome is Outcome.OK:
        why = f"the first call succeeded: {', '.join(seen.crash_env)} did not crash the target"
        return CheckResult("crash_window", title, CheckVerdict.NOT_APPLICABLE, why, evidence)
    if effects > 1:
        why = f"{effects} effects: the retry did the work again after a crash left the key unrecorded"
        return CheckResult("crash_window", title, CheckVerdict.FAIL, why, evidence)
    if retry.outcome is not Outcome.OK:
        why = f"after the crash the retry answered {_said(retry)}"
        return CheckResult("crash_window", title, CheckVerdict.FAIL, why, evidence)
    if effects == 0:
        return CheckResult(
            "crash_window", title, CheckVerdict.FAIL, "the retry answered OK with no effect", evidence
        )
    return CheckResult(
        "crash_window", title, CheckVerdict.PASS, "the crash cost nothing: one effect", evidence
    )


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


async def mrtr(s: ContractSession, seen: Seen) -> CheckResult:
    title = "input_required: at most two questions, then an end; requestState survives a restart"
    intent = s.intent()
    asked = await s.exchange(intent)
    evidence: dict[str, Any] = {"arguments": s.payload(intent), "asked": shown(asked)}
    if asked.outcome is not Outcome.INPUT_REQUIRED:
        why = (
            f"{s.tool} answered {_said(asked)} without asking: nothing to test; give arguments that "
            "make it ask (workload.arguments) and what to answer (workload.answers)"
        )
        return CheckResult("mrtr", title, CheckVerdict.NOT_APPLICABLE, why, evidence)
    assert asked.result is not None
    answer = s.workload.respond(asked.result)
    if isinstance(answer, str):
        why = f"{s.tool} asks, but the scenario cannot answer: {answer}"
        return CheckResult("mrtr", title, CheckVerdict.NOT_APPLICABLE, why, evidence)

    # Bounded: a call whose every question is declined must end, after at most two questions.
    probe = s.intent()
    loop = [await s.exchange(probe)]
    while loop[-1].outcome is Outcome.INPUT_REQUIRED and len(loop) < MRTR_GIVE_UP:
        loop.append(await s.exchange(probe, answer=declined(loop[-1].result or {})))
    questions = sum(r.outcome is Outcome.INPUT_REQUIRED for r in loop)
    evidence["every question declined"] = [shown(r) for r in loop]
    if loop[-1].outcome is Outcome.INPUT_REQUIRED:
        why = f"still asking after {questions} declined questions (the check gave up): an endless loop"
        return CheckResult("mrtr", title, CheckVerdict.FAIL, why, evidence)
    if questions > MRTR_QUESTIONS:
        why = f"{questions} questions before the end: at most {MRTR_QUESTIONS} round trips, then an end"
        return CheckResult("mrtr", title, CheckVerdict.FAIL, why, evidence)
    _note(seen, "mrtr", loop[-1])

    # The first question answered after a restart: the state must outlive the process that sealed it.
    await s.restart("mrtr")
    answered = await s.call(intent, answer=answer)  # and any question that follows
    _note(seen, "mrtr", answered)
    effects = (await s.effects())[intent.marker]
    seen.made_effects = seen.made_effects or effects > 0
    evidence |= {"answered after a restart": shown(answered), "effects": effects}
    if answered.outcome is not Outcome.OK:
        why = f"the answer sent after a restart got {_said(answered)}" + (
            ": the requestState did not outlive the process (sealed with a per-process key?)"
            if answered.outcome is Outcome.PROTOCOL_ERROR
            else ""
        )
        return CheckResult("mrtr", title, CheckVerdict.FAIL, why, evidence)
    if effects != 1:
        why = f"{effects} effects for one intent across its rounds"
        return CheckResult("mrtr", title, CheckVerdict.FAIL, why, evidence)
    why = (
        f"declined, it ended after {questions} question(s) with {_said(loop[-1])}; "
        "answered after a restart, it completed with one effect"
    )
    return CheckResult("mrtr", title, CheckVerdict.PASS, why, evidence)


HANDLE_POLL_S = 0.1


def _refusal_problem(res: CallResult, what: str) -> str | None:
    """Why an answer to a handle that cannot work is not a clear refusal, or None when it is one."""
    if res.outcome is Outcome.OK:
        return f"{what} got a success: {excerpt(json.dumps((res.result or {}).get('content')), 120)}"
    if res.outcome is Outcome.PROTOCOL_ERROR:
        if res.error_code == -32602:  # invalid params: clear, and not the server's fault
            return None
        said = excerpt(res.message or f"JSON-RPC error {res.error_code}", 80)
        return f"{what} got {said}: a model reads 'this tool is broken', not what to do"
    if res.outcome is not Outcome.TOOL_ERROR:
        return f"{what} got {_said(res)}"
    if (problem := contract_problem(res)) is not None:
        return f"{what}: {problem}"
    if res.retryable:
        return f"{what} says retryable: retrying the same handle cannot succeed"
    return None


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


async def handles(s: ContractSession, seen: Seen) -> CheckResult:
    from harness.contract.handles import (
        find_handle_tools,
        first_page_arguments,
        forged,
        handle_in,
        handle_problems,
    )

    title = "handles: opaque and versioned; an expired one answers handle_expired with a recovery hint"
    tools = {str(t.get("name")): t for t in await s.tools()}
    found = find_handle_tools(list(tools.values()))
    if isinstance(found, str):
        return CheckResult("handles", title, CheckVerdict.NOT_APPLICABLE, found, {"tools": list(tools)})
    for _ in range(2):  # two effects of the workload's tool: a page of one then has a next
        _note(seen, "handles", await s.call(s.intent()))
    asked = first_page_arguments(tools[found.producer].get("inputSchema") or {}, {})
    first = await s.call_tool(found.producer, asked)
    _note(seen, "handles", first)
    result = first.result or {}
    text = next((b.get("text") for b in result.get("content") or () if isinstance(b, dict)), None)
    handle = handle_in(result.get("structuredContent"), text, found.field)
    evidence: dict[str, Any] = {"found": found.why, "call": {found.producer: asked}, "first": shown(first)}
    if first.outcome is not Outcome.OK or handle is None:
        why = f"{found.producer} returned no handle with {json.dumps(asked)}: " + (
            _said(first) if first.outcome is not Outcome.OK else "everything fit one page"
        )
        return CheckResult("handles", title, CheckVerdict.NOT_APPLICABLE, why, evidence)
    evidence["handle"] = handle
    if problems := handle_problems(handle):
        evidence["problems"] = problems
        return CheckResult("handles", title, CheckVerdict.FAIL, "; ".join(problems), evidence)
    schema = tools[found.consumer].get("inputSchema") or {}
    arguments = first_page_arguments(schema, {found.param: handle})
    follow = await s.call_tool(found.consumer, arguments)
    bogus = first_page_arguments(schema, {found.param: forged(handle)})
    refused = await s.call_tool(found.consumer, bogus)
    _note(seen, "handles", follow, refused)
    evidence |= {"continuation": shown(follow), f"forged {bogus[found.param]}": shown(refused)}
    if follow.outcome is not Outcome.OK:
        why = f"{found.consumer} refused a fresh handle: {_said(follow)}"
        return CheckResult("handles", title, CheckVerdict.FAIL, why, evidence)
    if (problem := _refusal_problem(refused, "a forged handle")) is not None:
        return CheckResult("handles", title, CheckVerdict.FAIL, problem, evidence)
    waited = await _expiry(s, seen, found.consumer, arguments)
    if waited is None:
        why = (
            f"opaque, versioned, a forged one refused; but the handle still worked after "
            f"{seen.handle_wait_s:g}s, so expiry is untested: give the target a short handle lifetime in "
            "target.env, or a longer --handle-wait"
        )
        return CheckResult("handles", title, CheckVerdict.NOT_APPLICABLE, why, evidence)
    expired, after = waited
    _note(seen, "handles", expired)
    evidence[f"expired (after {after:.1f}s)"] = shown(expired)
    if (problem := _refusal_problem(expired, "an expired handle")) is not None:
        return CheckResult("handles", title, CheckVerdict.FAIL, problem, evidence)
    body = error_body(expired) or {}
    if body.get("code") != "handle_expired":
        why = f"an expired handle answered code {body.get('code')!r}, not handle_expired"
        return CheckResult("handles", title, CheckVerdict.FAIL, why, evidence)
    why = (
        f"{found.producer} returns opaque, versioned handles ({handle[: handle.index('_') + 1]}...), "
        f"{found.consumer} takes them back and refuses a forged one; expired after {after:.1f}s: "
        f"handle_expired, recovery: {excerpt(body['recovery'], 80)}"
    )
    return CheckResult("handles", title, CheckVerdict.PASS, why, evidence)


SESSION_STYLE = re.compile(
    r"^(start|begin|open|end|close)_?session|^(log_?in|connect|set_?context|use_|select_)"
)
RETRY_WORDS = re.compile(r"\bretr(y|ies|ying)\b|\breuse\b|\bsame key\b", re.I)


def catalog_findings(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a catalog breaks of the advice: keys where effects are, none where they are not, rules
    in the description, sentences (a few, not a page), few tools, no hidden session state."""
    from harness.init.draft import choose_key, classify, leaves

    findings = []
    if len(tools) > MAX_TOOLS:
        findings.append(f"{len(tools)} tools: past {MAX_TOOLS}, tool selection degrades")
    for tool in tools:
        name = str(tool.get("name"))
        description = str(tool.get("description") or "").strip()
        key = choose_key(list(leaves(tool.get("inputSchema") or {})))
        if classify(tool).changes_state:
            if key is None:
                findings.append(f"{name} changes state but takes no idempotency key")
            elif not RETRY_WORDS.search(description + " " + str(key.schema.get("description") or "")):
                findings.append(
                    f"{name}: nothing says to reuse {key.name} only for retries of the same intent"
                )
        elif key is not None:
            findings.append(f"{name} only reads but takes a key ({key.name}): schema noise")
        if not description:
            findings.append(f"{name} has no description")
        elif not (description[0].isupper() and description.endswith((".", "!", "?"))):
            findings.append(f"{name}: its description is not written as sentences")
        elif (sentences := len(SENTENCE_END.findall(description))) > MAX_SENTENCES:
            findings.append(
                f"{name}: {sentences} sentences; one of purpose and one of rules say it, the rest costs "
                "tokens and tool-selection accuracy"
            )
        if SESSION_STYLE.search(name.lower()):
            findings.append(f"{name} looks like a session-style tool that needs hidden state")
    return findings


def _snapshot_diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    before, after = {str(t.get("name")): t for t in old}, {str(t.get("name")): t for t in new}
    changes = [f"{n} added" for n in after if n not in before] + [
        f"{n} removed" for n in before if n not in after
    ]
    changes += [f"{n} changed" for n in after if n in before and before[n] != after[n]]
    if not changes and [str(t.get("name")) for t in old] != [str(t.get("name")) for t in new]:
        changes.append("the order changed")
    return changes


async def catalog(s: ContractSession, seen: Seen) -> CheckResult:
    from harness.contract.tokens import catalog_tokens

    title = "the catalog: the same every time, keys where effects are, within its token budget"
    first, second = await s.catalog(), await s.catalog()
    await s.restart("catalog")
    third = await s.catalog()
    tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    costs, total = catalog_tokens(tools)
    evidence: dict[str, Any] = {
        "tools": len(tools),
        "tokens": {"total": total, **costs},
        "budget": seen.token_budget,
    }
    problems = []
    if first.get("tools") != second.get("tools"):
        problems.append("tools/list differs between two calls")
    if first.get("tools") != third.get("tools"):
        problems.append("tools/list differs after a restart")
    if s.wiring.protocol >= "2026" and not ("ttlMs" in first and "cacheScope" in first):
        problems.append("no ttlMs/cacheScope on tools/list (2026-07-28 results carry them)")
    if total > seen.token_budget:
        problems.append(f"the catalog costs {total} tokens, over the budget of {seen.token_budget}")
    problems += catalog_findings(tools)
    if seen.snapshot is not None:
        if seen.snapshot.is_file():
            changes = _snapshot_diff(json.loads(seen.snapshot.read_text(encoding="utf-8")), tools)
            problems += [f"since the snapshot {seen.snapshot}: {c}" for c in changes]
        else:
            seen.snapshot.write_text(json.dumps(tools, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            evidence["snapshot"] = f"written to {seen.snapshot}"
    evidence["problems"] = problems
    if problems:
        why = problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        return CheckResult("catalog", title, CheckVerdict.FAIL, why, evidence)
    why = (
        f"{len(tools)} tools, {total} tokens (budget {seen.token_budget}), stable across calls and a restart"
    )
    return CheckResult("catalog", title, CheckVerdict.PASS, why, evidence)


def error_body(res: CallResult) -> Mapping[str, Any] | None:
    """A tool error's machine-readable body: structuredContent, or JSON in its first text block."""
    result = res.result or {}
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]  # type: ignore[no-any-return]
    for block in result.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "text":
            try:
                body = json.loads(block.get("text", ""))
            except (ValueError, TypeError):
                return None
            return body if isinstance(body, dict) else None
    return None


def contract_problem(res: CallResult) -> str | None:
    """What a tool error lacks of the error contract, or None."""
    if res.outcome is Outcome.PROTOCOL_ERROR:
        code = res.error_code
        if isinstance(code, int) and code not in JSONRPC_STANDARD and not -32099 <= code <= -32000:
            return f"JSON-RPC error code {code} is outside the standard codes and -32099..-32000"
        return None
    body = error_body(res)
    if body is None:
        return "no machine-readable body (structuredContent or JSON text)"
    code = body.get("code")
    if not isinstance(code, str) or not SNAKE_CASE.match(code):
        return f"code {code!r} is not a stable snake_case string"
    if not isinstance(body.get("retryable"), bool):
        return f"{code}: no boolean 'retryable'"
    if not isinstance(body.get("recovery"), str) or not body["recovery"].strip():
        return f"{code}: no 'recovery' saying what to do"
    if body["retryable"] and not isinstance(body.get("retry_after_ms"), int):
        return f"{code}: retryable without 'retry_after_ms'"
    return None


async def error_contract(s: ContractSession, seen: Seen) -> CheckResult:
    title = "errors say what happened and what to do (code, retryable, recovery)"
    evidence: dict[str, Any] = {"errors seen": [{"check": c, **shown(r)} for c, r in seen.errors]}
    for check, res in seen.empty_successes:
        text = json.dumps((res.result or {}).get("content"))
        if APOLOGY.search(text):
            why = f"in {check}, a success that apologises and made no effect: {excerpt(text, 120)}"
            return CheckResult("error_contract", title, CheckVerdict.FAIL, why, evidence)
    if not seen.errors:
        why = "no check provoked an error (run key_reuse and concurrent_same_key with it)"
        return CheckResult("error_contract", title, CheckVerdict.NOT_APPLICABLE, why, evidence)
    for check, res in seen.errors:
        problem = contract_problem(res)
        if problem is not None:
            return CheckResult("error_contract", title, CheckVerdict.FAIL, f"in {check}: {problem}", evidence)
    return CheckResult(
        "error_contract", title, CheckVerdict.PASS, f"{len(seen.errors)} error(s), all keep it", evidence
    )


async def annotations_hold(s: ContractSession, seen: Seen) -> CheckResult:
    title = "annotations match behaviour (idempotentHint, readOnlyHint, destructiveHint)"
    tools = {str(t.get("name")): t for t in await s.tools()}
    tool = tools.get(s.tool)
    if tool is None:
        why = f"{s.tool} is not in tools/list ({', '.join(tools) or 'empty'})"
        return CheckResult("annotations", title, CheckVerdict.FAIL, why, {"tools": list(tools)})
    ann = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    assert isinstance(ann, dict)
    evidence = {"tool": s.tool, "annotations": ann, "destructiveHint": ann.get("destructiveHint")}
    if ann.get("readOnlyHint") is True and seen.made_effects:
        why = f"{s.tool} says readOnlyHint: true, and the checks saw it make effects"
        return CheckResult("annotations", title, CheckVerdict.FAIL, why, evidence)
    if ann.get("idempotentHint") is True and seen.verdicts.get("replay") is CheckVerdict.FAIL:
        why = f"{s.tool} says idempotentHint: true, and replay failed"
        return CheckResult("annotations", title, CheckVerdict.FAIL, why, evidence)
    if not ann:
        return CheckResult(
            "annotations", title, CheckVerdict.NOT_APPLICABLE, f"{s.tool} declares none", evidence
        )
    return CheckResult("annotations", title, CheckVerdict.PASS, "what it declares holds", evidence)


def _said(res: CallResult) -> str:
    """An answer in a few words: ``tool_error idempotency_key_reused: this key was used for ...``."""
    body = error_body(res) if res.outcome is Outcome.TOOL_ERROR else None
    if body is not None and isinstance(body.get("code"), str):
        text = body.get("message")
        return f"{res.outcome.value} {body['code']}" + (f": {excerpt(str(text), 100)}" if text else "")
    said = f": {excerpt(res.message, 100)}" if res.message else ""
    return f"{res.outcome.value}{said}"


CHECKS: dict[str, Check] = {
    "replay": replay,
    "twins": twins,
    "key_reuse": key_reuse,
    "concurrent_same_key": concurrent_same_key,
    "restart_keeps_keys": restart_keeps_keys,
    "crash_window": crash_window,
    "mrtr": mrtr,
    "handles": handles,
    "error_contract": error_contract,
    "annotations": annotations_hold,
    "catalog": catalog,
}
"""In the order they run: error_contract and annotations judge what the others saw."""
