"""``key_reuse``: one key sent with another payload is refused, clearly and for good."""

from __future__ import annotations

from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    retryable,
    said,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome

REFUSE_REUSE = (
    "refuse a key reused for another payload (a non-retryable error such as idempotency_key_reused)"
)


@check("key_reuse", "one key, another payload: a clear non-retryable error, no second effect")
async def key_reuse(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    if not s.keyed:
        return c.not_applicable(
            "no key travels with a call (no {key} in workload.arguments, client.key_in: argument): "
            "there is no key to reuse for another payload"
        )
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
            f"the other payload took effect ({counts[other.marker]}) under a key already used: "
            f"{REFUSE_REUSE}",
            evidence,
        )
    if second.outcome is Outcome.OK:
        return c.failed(
            "the other payload got a success: the first result, silently, for a different request; "
            f"{REFUSE_REUSE}",
            evidence,
        )
    if retryable(second):
        return c.failed(
            "the refusal says retryable: retrying cannot make a reused key right; say retryable: false",
            evidence,
        )
    return c.passed(f"refused: {said(second)}", evidence)
