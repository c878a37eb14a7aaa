"""``handles``: continuation handles are opaque and versioned, and expire with a recovery hint."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from harness.client.messages import CallResult
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.handles import (
    find_handle_tools,
    first_page_arguments,
    forged,
    handle_in,
    handle_problems,
)
from harness.contract.judging import (
    error_body,
    refusal_problem,
    said,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome, excerpt

HANDLE_POLL_S = 0.1


async def _expiry(
    s: ContractSession, o: Options, tool: str, arguments: dict[str, Any]
) -> tuple[CallResult, float] | None:
    """The first answer that is not a success and when it came (seconds), polling until --handle-wait
    runs out (None then)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() < started + o.handle_wait_s:
        await asyncio.sleep(HANDLE_POLL_S)
        res = await s.call_tool(tool, arguments)
        if res.outcome is not Outcome.OK:
            return res, loop.time() - started
    return None


@check("handles", "handles: opaque and versioned; an expired one answers handle_expired with a recovery hint")
async def handles(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
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
    waited = await _expiry(s, o, found.consumer, arguments)
    if waited is None:
        return c.not_applicable(
            f"opaque, versioned, a forged one refused; but the handle still worked after "
            f"{o.handle_wait_s:g}s, so expiry is untested: give the target a short handle lifetime in "
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
