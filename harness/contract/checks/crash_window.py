"""``crash_window``: a crash between the effect and its key record, at a failpoint the user names."""

from __future__ import annotations

from harness.contract.checks.common import REPLAY_IT
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    said,
    shown,
)
from harness.contract.session import ContractSession
from harness.history import Outcome


@check(
    "crash_window",
    "a crash between the effect and the key record: the retry still makes no second effect",
)
async def crash_window(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    if not o.crash_env:
        return c.not_applicable(
            "needs --crash-env NAME=VALUE: how the target crashes at that point (a failpoint); "
            "crash_points crashes a target there without one when its database is the harness's"
        )
    crashing = s.variant(o.crash_env, c.id)
    async with crashing.started():
        intent = crashing.intent()
        first = await crashing.call(intent)
        retry = await crashing.retry(intent)  # while the supervisor starts it again, as a kubelet would
        effects = (await crashing.effects())[intent.marker]
    seen.note(c.id, retry)
    if first.outcome is not Outcome.OK:
        seen.repeated[c.id] = effects
    evidence = {
        "env": o.crash_env,
        "first (crashes)": shown(first),
        "retry": shown(retry),
        "effects": effects,
    }
    if first.outcome is Outcome.OK:
        return c.not_applicable(
            f"the first call succeeded: {', '.join(o.crash_env)} did not crash the target", evidence
        )
    if effects > 1:
        return c.failed(
            f"{effects} effects: the retry did the work again after a crash left the key unrecorded", evidence
        )
    if retry.outcome is not Outcome.OK:
        return c.failed(f"after the crash the retry answered {said(retry)}: {REPLAY_IT}", evidence)
    if effects == 0:
        return c.failed("the retry answered OK with no effect", evidence)
    return c.passed("the crash cost nothing: one effect", evidence)
