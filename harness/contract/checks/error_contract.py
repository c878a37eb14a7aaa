"""``error_contract``: errors say what happened and what to do; a failure is never answered as success."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.catalog import json_type, top_level
from harness.client.messages import CallResult
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    contract_problem,
    failure_text,
    is_error,
    provoked_problem,
    said,
    sdk_wrapped,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome, excerpt


@check(
    "error_contract",
    "errors say what happened and what to do (code, retryable, recovery)",
    needs=("replay",),
    judges=True,
)
async def error_contract(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    """Judges the server's own errors, its answers to calls its schema refuses, and every ok answer the
    checks got: ``replay`` (which it needs) brings ordinary calls, so an ok that reads as a failure on
    every call is found even when nothing the checks provoke is refused in the server's own words."""
    provoked, stored = await _provoke(s)
    evidence: dict[str, Any] = {
        "errors seen": [{"check": by, **shown(r)} for by, r in seen.errors],
        "provoked": {what: shown(r) for what, r, _ in provoked},
        "effects of the provoked calls": stored,
        "ordinary ok answers": [{"check": by, **shown(r)} for by, r in seen.successes[:SHOWN]],
    }
    # Its own calls first: an answer to them that reads as a failure, with nothing stored, is one.
    mine = [(f"its own call ({what})", r, False) for what, r, _ in provoked] if stored == 0 else []
    empty = {id(r) for _, r in seen.empty_successes}
    ordinary = [(by, r, id(r) not in empty) for by, r in seen.successes]
    for by, res, kept in [*mine, *ordinary]:
        if (text := failure_text(res)) is not None:
            return c.failed(_reads_as_failure(by, s.tool, text, kept), evidence)
    business = [(by, res) for by, res in seen.errors] + [
        (f"its own call ({what})", r) for what, r, own in provoked if own and is_error(r)
    ]
    for what, res, own in provoked:
        if not own and (problem := provoked_problem(res, what)) is not None:
            return c.failed(problem, evidence)
    for by, res in business:
        if (problem := contract_problem(res)) is not None:
            return c.failed(
                f"in {by}, {s.tool} answered {said(res)}: {problem}; answer errors with isError and "
                "structuredContent {code, retryable, recovery}",
                evidence,
            )
    refusals = [r for _, r, own in provoked if not own and r.outcome is not Outcome.OK]
    plain = f"{len(ordinary)} ordinary ok answer(s) read as done"
    if not business:
        # Nothing made the server refuse a call in its own words: its SDK's schema validation is not its
        # error contract, so there is nothing to pass (Jepsen's unknown, never valid).
        schema = (
            f"{len(refusals)} call(s) its schema refuses were clearly refused, by its SDK; "
            if refusals
            else ""
        )
        return c.not_applicable(
            f"no error in the server's own words to judge: the checks provoked none ({schema}{plain}), "
            f"so its error contract is unknown; make {s.tool} refuse a call in its own code (a required "
            "text sent empty is one) to judge it",
            evidence,
        )
    wrapped = [res for _, res in business if sdk_wrapped(res)]
    note = (
        "; its errors carry their JSON after the SDK's 'Error executing tool ...:' prefix, which a model "
        "reads; structuredContent (isError with the body as structured content) is cleaner"
        if wrapped
        else ""
    )
    judged = "; ".join(f"{by}: {said(res)}" for by, res in business[:SHOWN])
    more = f"; and {len(business) - SHOWN} more" if len(business) > SHOWN else ""
    return c.passed(
        f"{len(business)} error(s) in the server's own words keep it ({judged}{more}); {len(refusals)} "
        f"call(s) its schema refuses were clearly refused; {plain}{note}",
        evidence,
    )


SHOWN = 3
"""Of the errors judged (and the ok answers kept as evidence), how many a result names."""


def _reads_as_failure(by: str, tool: str, text: str, kept: bool) -> str:
    """Why an ok whose text reads as a failure fails the contract, with the reply: with nothing stored, a
    failure reported as success; with the effect stored, a success a model reads as failed."""
    if not kept:
        return (
            f"failure reported as success: in {by}, {tool} answered OK (isError false) with "
            f"{excerpt(text, 120)!r} and stored nothing; a model reads that as done: set isError "
            "and say what to do"
        )
    return (
        f"an ok that reads as a failure: in {by}, {tool} answered OK (isError false) with "
        f"{excerpt(text, 120)!r} though its effect was stored; a model reads that as failed and calls "
        "again: answer what was done"
    )


WRONG_TYPE: dict[str, Any] = {
    "string": {"not": "a string"},
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not an array",
    "object": "not an object",
}
"""A value of another JSON type for each type: what no validator coerces."""


async def _provoke(s: ContractSession) -> tuple[list[tuple[str, CallResult, bool]], int]:
    """Calls the tool's schema refuses (a required argument left out, one of the wrong type) and one the
    schema allows that a server may refuse itself (a required text sent empty): (what was sent, the
    answer, whether a refusal is in the server's own words rather than its SDK's validation), and the
    effects the calls left (all carry one intent's marker)."""
    entry = next((t for t in await s.tools() if t.get("name") == s.tool), None)
    schema = entry.get("inputSchema") if entry is not None else None
    if not isinstance(schema, Mapping):
        return [], 0
    intent = s.intent()
    base = s.payload(intent)
    marked = {k for k, v in base.items() if intent.marker in json.dumps(v)}
    required = [(name, sub) for name, sub, needed in top_level(schema) if needed]
    required.sort(key=lambda arg: arg[0] in marked)  # spare the marker's argument where it can
    calls: list[tuple[str, dict[str, Any], bool]] = []
    if required:
        name = required[0][0]
        calls.append((f"without its required {name}", {k: v for k, v in base.items() if k != name}, False))
        kind = json_type(required[0][1])
        if kind in WRONG_TYPE:
            calls.append(
                (f"{name} of the wrong type ({kind} expected)", {**base, name: WRONG_TYPE[kind]}, False)
            )
    text = next(
        (name for name, sub in required if json_type(sub) == "string" and not sub.get("minLength")), None
    )
    if text is not None:
        calls.append((f"{text} sent empty", {**base, text: ""}, True))
    answers = [(what, await s.call_tool(s.tool, arguments), own) for what, arguments, own in calls]
    return answers, (await s.effects())[intent.marker] if answers else 0
