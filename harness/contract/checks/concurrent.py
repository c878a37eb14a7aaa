"""``concurrent_same_key``: simultaneous calls with one key make one effect (keyless: lose nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.client.messages import CallResult
from harness.contract.checks.common import REPLAY_IT
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    lost_writes,
    record_ids,
    retryable,
    said,
    same_result,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome
from harness.workload import Intent

CONCURRENT_CALLS = 8


@check(
    "concurrent_same_key",
    f"{CONCURRENT_CALLS} simultaneous calls with one key: one effect",
    keyless=f"{CONCURRENT_CALLS} simultaneous identical calls (no key travels): each acknowledged one stored",
)
async def concurrent_same_key(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    if not s.keyed:
        return await _concurrent_repeats(c, s, o, seen)
    intent, results, effects = await _at_once(c, s, seen)
    oks = [r for r in results if r.outcome is Outcome.OK]
    refused = [r for r in results if r.outcome is not Outcome.OK]
    evidence = {"key": intent.key, "effects": effects, "answers": [shown(r) for r in results]}
    if effects > 1:
        seen.repeated[c.id] = effects
    failed = _not_one_effect(
        c,
        results,
        effects,
        evidence,
        many=f"{effects} effects from {CONCURRENT_CALLS} concurrent calls with one key: make the key "
        "unique in the store (a constraint in the effect's transaction) and answer the others 'in use' "
        "or the first result",
        none=f"{len(oks)} of {CONCURRENT_CALLS} concurrent calls answered OK and nothing was stored: the "
        "server stored nothing, or audit.effects does not see it (validate --preflight tells which)"
        if oks
        else f"every concurrent call was refused: {said(results[0])}",
    )
    if failed is not None:
        return failed
    if any(not same_result(oks[0], r) for r in oks[1:]):
        return c.failed(
            f"one effect, but the successful answers differ from each other: {REPLAY_IT}", evidence
        )
    wrong = [r for r in refused if not (r.outcome is Outcome.TOOL_ERROR and retryable(r))]
    if wrong:
        return c.failed(
            f"a concurrent call got a refusal that is not retryable: {said(wrong[0])}; a key in use is worth "
            "waiting for: say retryable: true, with retry_after_ms",
            evidence,
        )
    return c.passed(f"one effect; {len(oks)} replays, {len(refused)} retryable 'in use' answers", evidence)


async def _concurrent_repeats(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    """Without a key: what the same call made twice in a row does (one effect: naturally idempotent;
    two: an insert), then the same call made concurrently must do as much, losing nothing it acknowledged."""
    probe = s.intent()
    in_a_row = [await s.call(probe), await s.call(probe)]
    baseline = (await s.effects())[probe.marker]
    intent, results, effects = await _at_once(c, s, seen)
    oks = [r for r in results if r.outcome is Outcome.OK]
    evidence: dict[str, Any] = {
        "key": s.key_shown(intent),
        "the same call twice in a row": {"answers": [shown(r) for r in in_a_row], "effects": baseline},
        "effects": effects,
        "answers": [shown(r) for r in results],
    }
    if any(r.outcome is not Outcome.OK for r in in_a_row) or baseline == 0:
        return c.not_applicable(
            f"the same call made twice in a row stored nothing to compare with ({said(in_a_row[0])}, "
            f"{baseline} effects): see replay",
            evidence,
        )
    if baseline > 1:  # an insert: every acknowledged call must be a stored record
        if effects < len(oks):
            ids = {record_ids(r) for r in oks}
            same = (
                f" all with the same record ({', '.join(f'{k}={v}' for k, v in next(iter(ids)) or ())})"
                if len(ids) == 1 and None not in ids
                else ""
            )
            return c.failed(
                f"lost writes: {len(oks)} concurrent identical calls acknowledged{same}, {effects} stored: "
                f"{len(oks) - effects} acknowledged write(s) lost, where the same call twice in a row "
                "stores two (shared state written without a lock or transaction)",
                evidence,
            )
        if effects > len(oks):
            return c.failed(
                f"{effects} effects from {len(oks)} acknowledged calls: a refused call took effect; a "
                "refusal must store nothing",
                evidence,
            )
        return c.passed(
            f"{len(oks)} concurrent identical calls acknowledged, {effects} stored: none lost (each is a new "
            "record, as a retry is: see replay)",
            evidence,
        )
    failed = _not_one_effect(
        c,
        results,
        effects,
        evidence,
        many=f"{effects} effects from {CONCURRENT_CALLS} concurrent identical calls, where the same call "
        "made twice in a row makes one: a race between concurrent writes (write under a lock or in a "
        "transaction)",
        none=f"{len(oks)} concurrent identical calls acknowledged, nothing stored: the server stored "
        "nothing, or audit.effects does not see it (validate --preflight tells which)",
    )
    if failed is not None:
        return failed
    return c.passed(
        f"one effect from {CONCURRENT_CALLS} concurrent identical calls ({len(oks)} acknowledged), as "
        "the same call made twice in a row makes one",
        evidence,
    )


async def _at_once(c: Check, s: ContractSession, seen: Seen) -> tuple[Intent, list[CallResult], int]:
    """One intent called :data:`CONCURRENT_CALLS` times at once: the answers and the effects it made,
    which ``seen`` records."""
    intent = s.intent()
    results = await asyncio.gather(*(s.call(intent) for _ in range(CONCURRENT_CALLS)))
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, results, effects)
    return intent, results, effects


def _not_one_effect(
    c: Check, results: list[CallResult], effects: int, evidence: dict[str, Any], *, many: str, none: str
) -> CheckResult | None:
    """The failures both ways share, in this order: more than one effect (``many``), acknowledged
    writes lost, nothing stored (``none``); None when the calls made exactly one effect and lost none."""
    if effects > 1:
        return c.failed(many, evidence)
    if (lost := lost_writes(results, effects)) is not None:
        return c.failed(lost, evidence)
    if effects == 0:
        return c.failed(none, evidence)
    return None
