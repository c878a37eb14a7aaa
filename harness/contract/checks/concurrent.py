"""``concurrent_same_key``: simultaneous calls with one key make one effect (keyless: lose nothing).

Where the harness can hold the target's work (one pod it runs over HTTP, its statements through the
harness's PostgreSQL, or its calls through the sink or a downstream proxy), the keyed check is the
races of ``mcp-chaos races``: a retry with the key sent at each point of its original, and held at each
of its own while the original runs, every ordering judged by the ordinary audit. Elsewhere it is a
burst of :data:`CONCURRENT_CALLS` calls at once, which finds the wide windows by chance. The result
says which it was (its title, and ``method`` in its evidence)."""

from __future__ import annotations

import asyncio
import io
from collections import Counter
from typing import Any

from harness.client.messages import CallResult
from harness.contract.checks.common import REPLAY_IT
from harness.contract.framework import Check, CheckResult, CheckVerdict, Options, Seen, check
from harness.contract.judging import (
    lost_writes,
    record_ids,
    retryable,
    said,
    same_result,
    shown,
)
from harness.contract.session import ContractSession
from harness.crashpoints import racing
from harness.crashpoints.explore import hold_points
from harness.crashpoints.points import KINDS, Site
from harness.errors import PreflightError, ScenarioError
from harness.history import Outcome
from harness.scenario import Scenario
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
    why_not = unraceable(s.scenario)
    if why_not is None:
        return await _raced(c, s, o, seen)
    result = await _burst(c, s, seen)
    result.evidence["method"] = f"a burst of {CONCURRENT_CALLS} calls at once, not races: {why_not}"
    return result


RACED_TITLE = (
    "a retry beside its original, sent at each of its points and held at each of its own: one effect"
)


def unraceable(scenario: Scenario) -> str | None:
    """Why the races cannot place a retry beside this scenario's original at the points of its work, or
    None: one pod the harness runs over HTTP (the fault proxy breaks the original's stream) whose work
    passes the harness's PostgreSQL, its sink or a downstream proxy, in a scenario the race's rules take."""
    target = scenario.target
    if target.replicas != 1 or target.kubernetes is not None or scenario.services.balancer is not None:
        return "races hold one pod the harness runs; this target is replicated, balanced or in Kubernetes"
    if target.url is not None:
        return "races need a target the harness runs (the fault proxy breaks a stream); target.url is not"
    if target.transport == "stdio":
        return "races break the original's response stream in the fault proxy: an HTTP target, not stdio"
    if not any(KINDS[k].sites - {Site.FILES} for k in hold_points(scenario)):
        return (
            "no point a race holds: the target neither reaches the harness's PostgreSQL ({postgres_url} "
            "with services.postgres) nor calls its sink or a downstream proxy"
        )
    try:
        racing.racing_scenario(scenario, 1.0)
    except ScenarioError as exc:
        return exc.message
    return None


async def _raced(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    """The races of ``mcp-chaos races``, in a run of their own inside the contract's directory, within the
    exploration's budget (``--budget``): failed on the first ordering with a finding."""
    try:
        found = await racing.explore_races(
            s.scenario,
            s.run_dir,
            budget_s=o.explore.budget_s,
            run_id=c.id,
            out=io.StringIO(),
            progress_interval_s=None,
        )
    except PreflightError as exc:  # the clean call was not counted once: nothing to judge the races by
        return CheckResult(c.id, RACED_TITLE, CheckVerdict.ERROR, exc.message, {"method": "races"})
    seen.repeated[c.id] = max((r.effects for r in found.rows), default=0)
    seen.made_effects = seen.made_effects or any(r.effects for r in found.rows)
    evidence: dict[str, Any] = {
        "method": "races",
        "run_dir": str(found.run_dir),
        "clean call": found.clean,
        "orderings": {r.id: f"{r.made}: {r.verdict} ({r.effects} effects)" for r in found.rows},
        "coverage": racing.coverage_line(found),
        "seconds": round(found.seconds, 1),
    }
    if found.findings:
        first = found.findings[0]
        more = f" (and {len(found.findings) - 1} more orderings)" if len(found.findings) > 1 else ""
        evidence["ran"] = first.ran
        fix = f": {first.fix}" if first.fix else ""
        result = c.failed(
            f"races: {first.ordering} gave {first.verdict} ({first.effects} effects){more}{fix}; reproduce "
            f"with: mcp-chaos races SCENARIO --only {first.id}",
            evidence,
        )
    elif not found.rows:
        result = CheckResult(
            c.id,
            RACED_TITLE,
            CheckVerdict.ERROR,
            f"races: no ordering tried ({evidence['coverage']})",
            evidence,
        )
    elif found.untried:  # what was not tried proves nothing: no pass, as crash points say inconclusive
        evidence["not tried"] = found.untried
        result = CheckResult(
            c.id,
            RACED_TITLE,
            CheckVerdict.ERROR,
            f"inconclusive, no finding among the {len(found.rows)} orderings tried: {len(found.untried)} not "
            f"tried within the budget ({evidence['coverage']}); raise --budget to try them all",
            evidence,
        )
    else:
        made = Counter(r.made for r in found.rows)
        result = c.passed(
            f"races: each of {len(found.rows)} orderings of the original and a retry beside it took effect "
            f"exactly once ({', '.join(f'{n} {m}' for m, n in made.items())})",
            evidence,
        )
    result.title = RACED_TITLE
    return result


async def _burst(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    """:data:`CONCURRENT_CALLS` calls with one key at once: one effect, the others replays or a retryable
    'in use'."""
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
