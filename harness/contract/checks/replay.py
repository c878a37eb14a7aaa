"""``replay``: the same key twice (or, keyless, the same call twice) makes one effect and the same answer."""

from __future__ import annotations

from harness.contract.checks.common import NO_KEY, REPLAY_IT, nothing_stored
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import lost_writes, said, same_result, shown
from harness.contract.session import ContractSession
from harness.history import Outcome


@check(
    "replay",
    "the same key twice: one effect, the same result",
    keyless="the same call twice (no key travels): one effect, the same result",
)
async def replay(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    intent = s.intent()
    first = await s.call(intent)
    second = await s.call(intent)
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, [first, second], effects)
    evidence = {
        "key": s.key_shown(intent),
        "first": shown(first),
        "second": shown(second),
        "effects": effects,
    }
    if first.outcome is not Outcome.OK:
        return c.failed(f"the first call failed: {said(first)} (check workload.arguments)", evidence)
    seen.repeated[c.id] = effects
    again = "the retry with the same key" if s.keyed else "the same call made again"
    if second.outcome is not Outcome.OK:
        return c.failed(f"{again} answered {said(second)} instead of the first result: {REPLAY_IT}", evidence)
    if effects == 0:
        return c.failed(nothing_stored(first, s), evidence)
    if (lost := lost_writes([first, second], effects)) is not None:
        return c.failed(lost, evidence)
    if effects > 1:
        if s.keyed:
            return c.failed(
                f"{effects} effects for one key: the retry did the work again (look the key up first, and "
                "record it in the same transaction as the effect)",
                evidence,
            )
        return c.failed(f"{effects} effects from the same call made twice: {NO_KEY}", evidence)
    if not same_result(first, second):
        return c.failed(
            f"one effect, but {again} answered differently (content or structuredContent): a client "
            f"whose first answer was lost never learns it; {REPLAY_IT}",
            evidence,
        )
    if s.keyed:
        return c.passed("one effect; the replay is identical", evidence)
    return c.passed("one effect and the same answer: the call is naturally idempotent", evidence)
