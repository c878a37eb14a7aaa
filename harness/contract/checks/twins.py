"""``twins``: identical payloads under two keys are two intents, two effects."""

from __future__ import annotations

from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    lost_writes,
    said,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome

NO_TWINS = (
    "no key travels with a call (no {key} in workload.arguments, client.key_in: argument), so two "
    "identical calls are one intent to the server: twins need two keys"
)


@check("twins", "identical payloads under two keys: two effects")
async def twins(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    if not s.keyed:
        return c.not_applicable(NO_TWINS)
    intent = s.intent()
    other = s.intent()  # only its key is used
    first = await s.call(intent)
    second = await s.call(intent, key=other.key)
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, [first, second], effects)
    evidence = {
        "keys": [intent.key, other.key],
        "first": shown(first),
        "second": shown(second),
        "effects": effects,
    }
    if first.outcome is not Outcome.OK or second.outcome is not Outcome.OK:
        bad = first if first.outcome is not Outcome.OK else second
        return c.failed(f"a call with a new key was refused: {said(bad)}", evidence)
    if (lost := lost_writes([first, second], effects)) is not None:
        return c.failed(lost, evidence)
    if effects != 2:
        dedup = (
            ": the server deduplicates by payload, so a second intent identical to the first is lost; "
            "deduplicate by the key, not the payload"
            if effects == 1
            else ": one effect per key"
        )
        return c.failed(f"{effects} effect(s) for two intents with two keys{dedup}", evidence)
    return c.passed("two keys, two effects", evidence)
