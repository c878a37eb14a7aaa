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
What an answer or a catalog says is judged by :mod:`harness.contract.judging`;
a check is the calls, the evidence and the order in which it concludes.

Where no key travels (no ``{key}`` in the arguments, none in ``_meta`` or a
header), a retry is the same call again, and the key checks become checks of
repetition, worded as such: a naturally idempotent write passes ``replay``, a
keyless insert fails it because a retry cannot be told from a new call, and
``twins`` and ``key_reuse`` do not apply. Every check that concludes
"deduplicated" or "replayed" also compares what was acknowledged with what was
stored, so lost acknowledged writes are never read as deduplication.
A check that raises is reported as ``error`` with its reason; the others run.
"""

from __future__ import annotations

import asyncio
import enum
import io
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import rundir
from harness.catalog import Annotations, json_type, top_level
from harness.client.messages import CallResult
from harness.contract.handles import (
    find_handle_tools,
    first_page_arguments,
    forged,
    handle_in,
    handle_problems,
)
from harness.contract.judging import (
    contract_problem,
    error_body,
    failure_text,
    is_error,
    listing_problems,
    lost_writes,
    provoked_problem,
    record_ids,
    refusal_problem,
    retryable,
    said,
    same_result,
    sdk_wrapped,
    shown,
    snapshot_diff,
)
from harness.contract.session import ContractSession
from harness.contract.tokens import catalog_tokens
from harness.crashpoints import explore as crash_explore
from harness.crashpoints import render as crash_render
from harness.crashpoints.advice import advice
from harness.errors import HarnessError
from harness.history import Outcome, excerpt
from harness.sanitize import json_safe

CONCURRENT_CALLS = 8


class CheckVerdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"
    ERROR = "error"
    """The check could not finish (the target would not come back, the harness broke): no verdict."""


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
    """Successes after which the store held nothing for their intent."""
    repeated: dict[str, int] = field(default_factory=dict)
    """Effects of one call made again (a retry, a replay after a restart), by the check that made it."""
    made_effects: bool = False
    crash_env: dict[str, str] = field(default_factory=dict)
    """Environment that makes the target crash between its effect and its key record (--crash-env)."""
    token_budget: int = 4000
    """Tokens (o200k_base) the whole catalog may cost every agent, every session (--token-budget)."""
    snapshot: Path | None = None
    """A catalog to compare with (written when missing): a changed description is a contract diff."""
    handle_wait_s: float = 5.0
    """How long the handles check waits for a handle to expire (--handle-wait)."""
    crash_repeat: int = 1
    """Tries per hold point of the crash_points check (--crash-repeat): one keeps the contract short."""
    crash_max_points: int = 8
    """Paths the crash_points check explores at most (--crash-max-points)."""

    def note(self, check: str, *results: CallResult) -> None:
        """Keep the errors among ``results`` for error_contract."""
        self.errors += [(check, res) for res in results if is_error(res)]

    def saw(self, check: str, results: Sequence[CallResult], effects: int) -> None:
        """Keep what ``results`` (the calls of one intent) say for the checks that judge it: their
        errors, whether they made effects, and their successes when the store held nothing."""
        self.note(check, *results)
        self.made_effects = self.made_effects or effects > 0
        if effects == 0:
            self.empty_successes += [(check, r) for r in results if r.outcome is Outcome.OK]


Promise = Callable[["Check", ContractSession, Seen], Awaitable[CheckResult]]


@dataclass(frozen=True, slots=True)
class Check:
    """One promise: its id and title, said once, and the function that checks it.

    The function gets the check itself and concludes with :meth:`passed`,
    :meth:`failed` or :meth:`not_applicable`, which fill in the id and title.
    Calling the check is the one place it runs: a check that raises is an
    ``error`` result with its reason, never the end of the contract run.
    """

    id: str
    title: str
    promise: Promise
    keyless: str | None = None
    """The title where no key travels, for a check that then judges plain repetition."""

    async def __call__(self, session: ContractSession, seen: Seen) -> CheckResult:
        try:
            result = await self.promise(self, session, seen)
        except Exception as exc:  # a check's own failure is its result; cancellation goes through
            return self.errored(exc, session)
        if not session.keyed and self.keyless is not None:
            result.title = self.keyless
        return result

    def passed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.PASS, why, evidence or {})

    def failed(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.FAIL, why, evidence or {})

    def not_applicable(self, why: str, evidence: dict[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.title, CheckVerdict.NOT_APPLICABLE, why, evidence or {})

    def errored(self, exc: Exception, session: ContractSession) -> CheckResult:
        what = exc.message if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        logs = session.run_dir / rundir.PODS
        why = (
            f"the check could not finish: {excerpt(what, 200)}; the target's log is in {logs}: fix what "
            f"stopped it, then run this check again (--only {self.id})"
        )
        return CheckResult(self.id, self.title, CheckVerdict.ERROR, why, {"error": type(exc).__name__})


def check(id: str, title: str, *, keyless: str | None = None) -> Callable[[Promise], Check]:
    """Declare a check: ``@check("replay", "the same key twice: ...")`` on its function; ``keyless``
    is its title where no key travels."""

    def declare(promise: Promise) -> Check:
        return Check(id, title, promise, keyless)

    return declare


NO_KEY = "a retry cannot be told from a new call: give the tool an idempotency key"
REPLAY_IT = "store the first result with the key and return it, as it was, to every retry"


@check(
    "replay",
    "the same key twice: one effect, the same result",
    keyless="the same call twice (no key travels): one effect, the same result",
)
async def replay(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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
        return c.failed(_nothing_stored(first, s), evidence)
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


def _nothing_stored(res: CallResult, s: ContractSession) -> str:
    """Why a success with no effect fails, quoting the reply when it reads as a failure."""
    source = f" (the effect source: {excerpt(s.source_error, 120)})" if s.source_error else ""
    if (text := failure_text(res)) is not None:
        return (
            f"a failure reported as success: it answered OK with {excerpt(text, 120)!r} and stored "
            f"nothing{source}"
        )
    return (
        f"it answered OK and the effect source found nothing{source}: the server stored nothing, or "
        "audit.effects does not see it (validate --preflight tells which)"
    )


NO_TWINS = (
    "no key travels with a call (no {key} in workload.arguments, client.key_in: argument), so two "
    "identical calls are one intent to the server: twins need two keys"
)


@check("twins", "identical payloads under two keys: two effects")
async def twins(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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


REFUSE_REUSE = (
    "refuse a key reused for another payload (a non-retryable error such as idempotency_key_reused)"
)


@check("key_reuse", "one key, another payload: a clear non-retryable error, no second effect")
async def key_reuse(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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


@check(
    "concurrent_same_key",
    f"{CONCURRENT_CALLS} simultaneous calls with one key: one effect",
    keyless=f"{CONCURRENT_CALLS} simultaneous identical calls (no key travels): each acknowledged one stored",
)
async def concurrent_same_key(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    if not s.keyed:
        return await _concurrent_repeats(c, s, seen)
    intent = s.intent()
    results = await asyncio.gather(*(s.call(intent) for _ in range(CONCURRENT_CALLS)))
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, results, effects)
    oks = [r for r in results if r.outcome is Outcome.OK]
    refused = [r for r in results if r.outcome is not Outcome.OK]
    evidence = {"key": intent.key, "effects": effects, "answers": [shown(r) for r in results]}
    if effects > 1:
        seen.repeated[c.id] = effects
        return c.failed(
            f"{effects} effects from {CONCURRENT_CALLS} concurrent calls with one key: make the key "
            "unique in the store (a constraint in the effect's transaction) and answer the others 'in use' "
            "or the first result",
            evidence,
        )
    if (lost := lost_writes(results, effects)) is not None:
        return c.failed(lost, evidence)
    if effects == 0:
        return c.failed(
            f"{len(oks)} of {CONCURRENT_CALLS} concurrent calls answered OK and nothing was stored: the "
            "server stored nothing, or audit.effects does not see it (validate --preflight tells which)"
            if oks
            else f"every concurrent call was refused: {said(results[0])}",
            evidence,
        )
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


async def _concurrent_repeats(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    """Without a key: what the same call made twice in a row does (one effect: naturally idempotent;
    two: an insert), then the same call made concurrently must do as much, losing nothing it acknowledged."""
    probe = s.intent()
    in_a_row = [await s.call(probe), await s.call(probe)]
    baseline = (await s.effects())[probe.marker]
    intent = s.intent()
    results = await asyncio.gather(*(s.call(intent) for _ in range(CONCURRENT_CALLS)))
    effects = (await s.effects())[intent.marker]
    seen.saw(c.id, results, effects)
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
    if effects > 1:
        return c.failed(
            f"{effects} effects from {CONCURRENT_CALLS} concurrent identical calls, where the same call "
            "made twice in a row makes one: a race between concurrent writes (write under a lock or in a "
            "transaction)",
            evidence,
        )
    if (lost := lost_writes(results, effects)) is not None:
        return c.failed(lost, evidence)
    if effects == 0:
        return c.failed(
            f"{len(oks)} concurrent identical calls acknowledged, nothing stored: the server stored nothing, "
            "or audit.effects does not see it (validate --preflight tells which)",
            evidence,
        )
    return c.passed(
        f"one effect from {CONCURRENT_CALLS} concurrent identical calls ({len(oks)} acknowledged), as "
        "the same call made twice in a row makes one",
        evidence,
    )


@check(
    "restart_keeps_keys",
    "a key outlives the process: replay after a restart",
    keyless="the same call after a restart (no key travels): one effect, the same result",
)
async def restart_keeps_keys(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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
        return c.failed(_nothing_stored(first, s), evidence)
    if (lost := lost_writes([first, second], effects)) is not None:
        return c.failed(lost, evidence)
    if not same_result(first, second):
        return c.failed(
            f"one effect, but after the restart the answer differs from the first{session}: {REPLAY_IT}",
            evidence,
        )
    return c.passed(f"one effect, same result{session}", evidence)


@check(
    "crash_window",
    "a crash between the effect and the key record: the retry still makes no second effect",
)
async def crash_window(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    if not seen.crash_env:
        return c.not_applicable(
            "needs --crash-env NAME=VALUE: how the target crashes at that point (a failpoint); "
            "crash_points crashes a target there without one when its database is the harness's"
        )
    crashing = s.variant(seen.crash_env, c.id)
    async with crashing.started():
        intent = crashing.intent()
        first = await crashing.call(intent)
        retry = await crashing.retry(intent)  # while the supervisor starts it again, as a kubelet would
        effects = (await crashing.effects())[intent.marker]
    seen.note(c.id, retry)
    if first.outcome is not Outcome.OK:
        seen.repeated[c.id] = effects
    evidence = {
        "env": seen.crash_env,
        "first (crashes)": shown(first),
        "retry": shown(retry),
        "effects": effects,
    }
    if first.outcome is Outcome.OK:
        return c.not_applicable(
            f"the first call succeeded: {', '.join(seen.crash_env)} did not crash the target", evidence
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


@check(
    "crash_points",
    "a crash at every point a call commits at (no failpoint): each retry takes effect exactly once",
)
async def crash_points(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    if (why := crash_explore.unexplorable(s.scenario)) is not None:
        return c.not_applicable(why)
    planned = crash_explore.prepare(
        s.scenario, s.run_dir, repeat=seen.crash_repeat, max_points=seen.crash_max_points, run_id=c.id
    )
    found = await crash_explore.explore(planned, out=io.StringIO(), progress_interval_s=None)
    report = crash_render.write_reports(found)
    evidence: dict[str, Any] = {
        "report": str(report),
        "clean call": [p.name for p in found.clean],
        "points": {p.name: {v: n for v, n in p.verdicts.items() if n} for p in found.points},
        "proven tries": {p.name: f"{len(p.proven)}/{p.repeat}" for p in found.points},
        "tries per point": found.repeat,
        "seconds": round(found.seconds, 1),
    }
    seen.repeated[c.id] = max((found.effects[i] for p in found.points for i in p.proven), default=0)
    if found.unavailable:
        stuck = found.unavailable[0]
        return c.failed(
            f"killed at {stuck.name}, the pod never answered again: {stuck.unavailable} (see {report})",
            evidence,
        )
    if found.findings:
        first = found.findings[0]
        assert first.finding is not None
        more = f" (and {len(found.findings) - 1} more points)" if len(found.findings) > 1 else ""
        evidence["advice"] = advice(found, first)
        return c.failed(
            f"a crash at {first.name} gave {first.finding.value} in {first.verdicts[first.finding.value]} of "
            f"{len(first.proven)} proven tries{more}: {advice(found, first)} (one try's story and a "
            f"reproducer: {report})",
            evidence,
        )
    if found.inconclusive:
        evidence["not proven"] = found.inconclusive
        return CheckResult(
            c.id,
            c.title,
            CheckVerdict.ERROR,
            f"inconclusive, no finding among what was proven: {found.inconclusive[0]}"
            + (
                f" (and {len(found.inconclusive) - 1} more; see {report})"
                if len(found.inconclusive) > 1
                else ""
            ),
            evidence,
        )
    return c.passed(
        f"held and killed at {len(found.points)} points ({', '.join(p.name for p in found.points)}), "
        f"{found.repeat} proven {'try' if found.repeat == 1 else 'tries'} each: every retry took effect "
        "exactly once",
        evidence,
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


@check("mrtr", "input_required: at most two questions, then an end; requestState survives a restart")
async def mrtr(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    intent = s.intent()
    asked = await s.exchange(intent)
    evidence: dict[str, Any] = {"arguments": s.payload(intent), "asked": shown(asked)}
    if asked.outcome is not Outcome.INPUT_REQUIRED:
        return c.not_applicable(
            f"{s.tool} answered {said(asked)} without asking: nothing to test; give arguments that "
            "make it ask (workload.arguments) and what to answer (workload.answers)",
            evidence,
        )
    assert asked.result is not None
    answer = s.workload.respond(asked.result)
    if isinstance(answer, str):
        return c.not_applicable(f"{s.tool} asks, but the scenario cannot answer: {answer}", evidence)

    # Bounded: a call whose every question is declined must end, after at most two questions.
    probe = s.intent()
    loop = [await s.exchange(probe)]
    while loop[-1].outcome is Outcome.INPUT_REQUIRED and len(loop) < MRTR_GIVE_UP:
        loop.append(await s.exchange(probe, answer=declined(loop[-1].result or {})))
    questions = sum(r.outcome is Outcome.INPUT_REQUIRED for r in loop)
    evidence["every question declined"] = [shown(r) for r in loop]
    if loop[-1].outcome is Outcome.INPUT_REQUIRED:
        return c.failed(
            f"still asking after {questions} declined questions (the check gave up): an endless loop",
            evidence,
        )
    if questions > MRTR_QUESTIONS:
        return c.failed(
            f"{questions} questions before the end: at most {MRTR_QUESTIONS} round trips, then an end",
            evidence,
        )
    seen.note(c.id, loop[-1])

    # The first question answered after a restart: the state must outlive the process that sealed it.
    await s.restart(c.id)
    answered = await s.call(intent, answer=answer)  # and any question that follows
    seen.note(c.id, answered)
    effects = (await s.effects())[intent.marker]
    seen.made_effects = seen.made_effects or effects > 0
    evidence |= {"answered after a restart": shown(answered), "effects": effects}
    if answered.outcome is not Outcome.OK:
        lost = (
            ": the requestState did not outlive the process (sealed with a per-process key?)"
            if answered.outcome is Outcome.PROTOCOL_ERROR
            else ""
        )
        return c.failed(f"the answer sent after a restart got {said(answered)}{lost}", evidence)
    if effects != 1:
        return c.failed(f"{effects} effects for one intent across its rounds", evidence)
    return c.passed(
        f"declined, it ended after {questions} question(s) with {said(loop[-1])}; "
        "answered after a restart, it completed with one effect",
        evidence,
    )


HANDLE_POLL_S = 0.1


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


@check("handles", "handles: opaque and versioned; an expired one answers handle_expired with a recovery hint")
async def handles(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
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
    waited = await _expiry(s, seen, found.consumer, arguments)
    if waited is None:
        return c.not_applicable(
            f"opaque, versioned, a forged one refused; but the handle still worked after "
            f"{seen.handle_wait_s:g}s, so expiry is untested: give the target a short handle lifetime in "
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


@check("catalog", "the catalog: the same every time, keys where effects are, within its token budget")
async def catalog(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    first, again = await s.catalog(), await s.catalog()
    await s.restart(c.id)
    restarted = await s.catalog()
    tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    costs, total = catalog_tokens(tools)
    evidence: dict[str, Any] = {
        "tools": len(tools),
        "tokens": {"total": total, **costs},
        "budget": seen.token_budget,
    }
    problems = listing_problems(
        first, again, restarted, modern=s.wiring.protocol >= "2026", tokens=total, budget=seen.token_budget
    )
    if seen.snapshot is not None:
        listed = json_safe(s.wiring.redactor.data(tools))  # a server may list its token in a description
        if seen.snapshot.is_file():
            changes = snapshot_diff(json.loads(seen.snapshot.read_text(encoding="utf-8")), listed)
            problems += [f"since the snapshot {seen.snapshot}: {change}" for change in changes]
        else:
            text = json.dumps(listed, indent=2, ensure_ascii=False) + "\n"
            seen.snapshot.write_text(text, encoding="utf-8")
            evidence["snapshot"] = f"written to {seen.snapshot}"
    mine = [p for p in problems if p.startswith(f"{s.tool} ")]  # the workload's tool, first
    problems = mine + [p for p in problems if p not in mine]
    evidence["problems"] = problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return c.failed(problems[0] + more, evidence)
    return c.passed(
        f"{len(tools)} tools, {total} tokens (budget {seen.token_budget}), stable across calls and a restart",
        evidence,
    )


@check("error_contract", "errors say what happened and what to do (code, retryable, recovery)")
async def error_contract(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    provoked, stored = await _provoke(s)
    evidence: dict[str, Any] = {
        "errors seen": [{"check": by, **shown(r)} for by, r in seen.errors],
        "provoked": {what: shown(r) for what, r, _ in provoked},
        "effects of the provoked calls": stored,
    }
    # Its own calls first: an answer to them that reads as a failure, with nothing stored, is one.
    mine = [(f"its own call ({what})", r) for what, r, _ in provoked] if stored == 0 else []
    for by, res in [*mine, *seen.empty_successes]:
        if (text := failure_text(res)) is not None:
            return c.failed(
                f"failure reported as success: in {by}, {s.tool} answered OK (isError false) with "
                f"{excerpt(text, 120)!r} and stored nothing; a model reads that as done: set isError "
                "and say what to do",
                evidence,
            )
    business = [(by, res) for by, res in seen.errors] + [
        (what, r) for what, r, own in provoked if own and is_error(r)
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
    if not business and not refusals:
        return c.not_applicable(
            f"no call was refused: the checks provoked no error and {s.tool}'s schema has no required "
            "argument to leave out or mistype",
            evidence,
        )
    wrapped = [res for _, res in business if sdk_wrapped(res)]
    note = (
        "; its errors carry their JSON after the SDK's 'Error executing tool ...:' prefix, which a model "
        "reads; structuredContent (isError with the body as structured content) is cleaner"
        if wrapped
        else ""
    )
    return c.passed(
        f"{len(business)} error(s) in the server's own words keep it; {len(refusals)} call(s) its schema "
        f"refuses were clearly refused{note}",
        evidence,
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


@check("annotations", "annotations match behaviour (idempotentHint, readOnlyHint, destructiveHint)")
async def annotations_hold(c: Check, s: ContractSession, seen: Seen) -> CheckResult:
    tools = {str(t.get("name")): t for t in await s.tools()}
    tool = tools.get(s.tool)
    if tool is None:
        return c.failed(
            f"{s.tool} is not in tools/list ({', '.join(tools) or 'empty'})", {"tools": list(tools)}
        )
    ann = Annotations.of(tool)
    evidence = {
        "tool": s.tool,
        "annotations": dict(ann.declared),
        "destructiveHint": ann.declared.get("destructiveHint"),
    }
    if ann.read_only is True and seen.made_effects:
        return c.failed(
            f"{s.tool} says readOnlyHint: true, and the checks saw it make effects: a client will call it "
            "freely; declare readOnlyHint: false",
            evidence,
        )
    again = {by: n for by, n in seen.repeated.items() if n > 1}
    if ann.idempotent is True and again:
        where = ", ".join(f"{by}: {n} effects" for by, n in again.items())
        return c.failed(
            f"{s.tool} says idempotentHint: true, and one call made again made a second effect ({where}): "
            "a client retries it freely; keep its keys where they outlive the process, or drop the hint",
            evidence,
        )
    if not ann.declared:
        return c.not_applicable(f"{s.tool} declares none", evidence)
    return c.passed("what it declares holds", evidence)


CHECKS: dict[str, Check] = {
    c.id: c
    for c in (
        replay,
        twins,
        key_reuse,
        concurrent_same_key,
        restart_keeps_keys,
        crash_window,
        crash_points,
        mrtr,
        handles,
        error_contract,
        annotations_hold,
        catalog,
    )
}
"""In the order they run: error_contract and annotations judge what the others saw."""
