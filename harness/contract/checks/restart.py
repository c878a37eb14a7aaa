"""``restart_keeps_keys``: a key, and its result, outlive the process."""

from __future__ import annotations

from typing import Any

from harness.contract.checks.common import NO_KEY, REPLAY_IT, nothing_stored
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import lost_writes, said, same_result, shown
from harness.contract.session import ContractSession
from harness.history import Outcome


@check(
    "restart_keeps_keys",
    "a key outlives the process: replay after a restart",
    keyless="the same call after a restart (no key travels): one effect, the same result",
)
async def restart_keeps_keys(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    intent = s.intent()
    first = await s.call(intent)
    await s.restart(c.id)
    lost_before = s.sessions_lost
    second = await s.call(intent)
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, [first, second], effects)
    evidence: dict[str, Any] = {
        "key": s.key_shown(intent),
        "before": shown(first),
        "after restart": shown(second),
        "effects": effects,
    }
    session = ""
    if s.sessions_lost > lost_before:
        evidence["session"] = "lost with the process (404); a new one was opened, as a run does"
        session = " (the 2025 session was lost with the process too; the check opened a new one)"
    if first.outcome is not Outcome.OK:
        return c.failed(f"the first call failed: {said(first)}", evidence)
    seen.repeated[c.id] = effects
    if effects > 1:
        if s.keyed:
            return c.failed(
                f"{effects} effects: the key was forgotten with the process (keep keys in the store, "
                f"not in memory){session}",
                evidence,
            )
        return c.failed(
            f"{effects} effects from the same call before and after a restart: {NO_KEY}{session}", evidence
        )
    if second.outcome is not Outcome.OK:
        return c.failed(
            f"after the restart the same call answered {said(second)}, not the first result{session}: keep "
            "keys and their results in the store",
            evidence,
        )
    if effects == 0:
        return c.failed(nothing_stored(first, s), evidence)
    if (lost := lost_writes([first, second], effects)) is not None:
        return c.failed(lost, evidence)
    if not same_result(first, second):
        return c.failed(
            f"one effect, but after the restart the answer differs from the first{session}: {REPLAY_IT}",
            evidence,
        )
    return c.passed(f"one effect, same result{session}", evidence)
