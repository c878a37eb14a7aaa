"""Replay a run's findings: each kill made again, at the point its attempt had reached, on a fresh target.

A random run finds a rare window (the article's keyed duplicate, about 1 in 2,700)
by luck, and luck does not come twice. What the run recorded does: every attempt's
``attempt_ended`` names the points it reached (the decision router observes every
run), so a finding's story says where the kill caught it ("after db_commit#2
(INSERT invoices), before its answer"). ``replay`` turns that into a crash point:
a scenario derived from the run's own, which kills the pod at that point in each of
``times`` intents, one call at a time, and retries as the run's client did. The
ordinary audit judges each try:

* ``STILL FAILING``: every try ended with the finding's verdict: the window is
  there, and now it is found every time.
* ``FIXED``: every try reached the point, was killed there, and took effect
  exactly once (after a fix, or against another build given with ``--set``).
* ``COULD NOT REPRODUCE``: anything else, with why: tries that differ, a point the
  call no longer reaches, or a finding no pod kill made (a stream fault, no fault
  at all), which this replay does not make again.

Where the run observed no point of the call (a target with no database or file
points the harness sees: the embedded SQLite target, a stdio server), the replay
kills the pod when the attempt's answer reaches the harness (``response``): after
everything the call did, before the client learns of it, which is where a kill that
broke an answer must have landed. Findings at the same point with the same verdict
are replayed together: one run of ``times`` intents.

A lost intent whose effect vanished after a kill of *another* call (a file store
torn mid-rewrite: :mod:`harness.wiped`) is replayed from that fault: each try is two
intents, one stored and the next killed where the fault caught the call it cut short
(its last observed point, else the first point where an exploration of the run's
build lost intents stored before its try), and the stored ones are judged.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import rundir
from harness.audit.auditor import AuditResult, audit_run, stories_of
from harness.audit.stories import POD_KILLS, Story, lost_to_another_call
from harness.crashpoints.explore import retry_quickly
from harness.errors import ScenarioError, UsageError
from harness.history import EventType, Verdict, read_history
from harness.report.tables import markdown_table
from harness.scenario import Scenario, load_scenario, parse_scenario
from harness.wiped import Wiped, wiped_of

REPLAYED = (Verdict.DUPLICATE, Verdict.LOST, Verdict.APPLIED_DESPITE_ERROR)
"""The findings a replay makes again (those the default gate fails on)."""
MAX_FINDINGS = 100
"""Findings replayed at most in one call (name intents to choose others)."""


class Result(enum.StrEnum):
    FIXED = "FIXED"
    STILL_FAILING = "STILL FAILING"
    COULD_NOT_REPRODUCE = "COULD NOT REPRODUCE"


@dataclass(frozen=True, slots=True)
class Finding:
    """A finding of the run, and where the kill that made it caught its attempt."""

    intent: int
    verdict: str
    cause: str
    point: str | None
    """Where the replay kills the pod (``db_commit#2``, ``response``), or None: no pod kill made it."""
    where: str
    """As the story says it: ``after db_commit#2 (INSERT invoices), before its answer``, or why not."""
    guessed: bool = False
    """No point of the attempt was observed: ``response`` is where its kill must have landed at the latest."""
    namespace: str | None = None
    """The run's namespace (its markers' and keys' prefix): the replay's tries are made in it."""
    wiped: Wiped | None = None
    """Lost by a pod fault that hit another call (a store torn mid-rewrite): ``point`` is that call's, and
    each try stores an intent and kills the next call there (None for ``point``: explored)."""


@dataclass(slots=True)
class Replayed:
    """One point and verdict's replay: the findings it stands for and what the tries did."""

    point: str | None
    verdict: str
    findings: list[Finding]
    result: Result
    why: str
    tries: list[str] = field(default_factory=list)
    """The verdict of each try."""
    run_dir: Path | None = None
    guessed: bool = False
    window: str | None = None
    """Where inside the call an exploration of the build that made it found its window, where the guessed
    point (``response``) did not make it: the point the tries were then killed at."""
    wiped: bool = False
    """Its findings were lost by a fault on another call: each try stores an intent, then kills the next."""


def findings_of(audit: AuditResult, intents: Sequence[int] = ()) -> list[Finding]:
    """The run's findings (or the ``intents`` named), each with the point its kill caught it at."""
    table = audit.intents
    if intents:
        known = set(table["intent"].tolist())
        missing = [i for i in intents if i not in known]
        if missing:
            raise UsageError(f"intent {missing[0]} never started in {audit.run_dir}")
        chosen = table[table["intent"].isin(list(intents))]
    else:
        chosen = table[table["verdict"].isin([v.value for v in REPLAYED])].head(MAX_FINDINGS)
    wanted = [int(i) for i in chosen["intent"].tolist()]
    stories = stories_of(audit, wanted)
    namespace = namespace_of(audit.run_dir)
    wiped = wiped_of(audit, list(stories.values()))
    return [dataclasses.replace(_finding(stories[i], wiped), namespace=namespace) for i in wanted]


def namespace_of(run_dir: Path) -> str | None:
    """The namespace a run made its markers and keys in (its ``run_started``), or None."""
    for e in read_history(run_dir / rundir.HISTORY):  # near the top: a few events of the wiring come first
        if e.get("type") == EventType.RUN_STARTED:
            return str(e["namespace"]) if isinstance(e.get("namespace"), str) else None
    return None


def _finding(story: Story, wiped: Mapping[str, Wiped]) -> Finding:
    base = (story.intent, story.verdict, story.cause)
    if story.verdict not in REPLAYED:
        return Finding(*base, None, f"{story.verdict}: no finding to replay")
    if lost_to_another_call(story) and (lost := wiped[story.vanished_after]).intent is not None:
        return Finding(*base, lost.point, lost.sentence(), wiped=lost)
    hit = next((s for s in story.steps if any(f.startswith(POD_KILLS) for f in s.faults)), None)
    if hit is None:
        severed = next((s for s in story.steps if s.rules), None)
        if severed is not None:  # a rule of faults.stream hit it: made again on the same attempt
            rule, kind = severed.rules[0], next(f for f in severed.faults if not f.startswith(POD_KILLS))
            where = f"attempt {severed.attempt}: {kind} (faults.stream rule {rule})"
            return Finding(*base, stream_point(rule, severed.attempt), where)
        faults = sorted({f.split("#")[0].split(" ")[0] for s in story.steps for f in s.faults})
        made = f"made by {', '.join(faults)}" if faults else "made with no fault"
        return Finding(*base, None, f"{made}: replay makes pod kills and stream faults again, not this")
    mine = [p for p in hit.points if not p.ambiguous]
    if not mine or hit.outcome == "ok":
        return Finding(
            *base,
            "response",
            f"attempt {hit.attempt}: before its answer (no point of it observed)",
            guessed=True,
        )
    last = mine[-1]
    label = f" ({last.label})" if last.label else ""
    return Finding(*base, last.point, f"attempt {hit.attempt}: after {last.point}{label}, before its answer")


STREAM_POINT = re.compile(r"stream:(\d+)@(\d+)")
"""Where a stream fault's replay strikes, as a point is named: rule R of ``faults.stream``, attempt A."""


def stream_point(rule: int, attempt: int) -> str:
    return f"stream:{rule}@{attempt}"


def replay_scenario(scenario: Scenario, point: str, times: int, *, wiped: bool = False) -> Scenario:
    """The run's scenario, its faults replaced by a kill at ``point`` in each of ``times`` intents (or,
    for a stream fault's point, by the rule that hit, on the same attempt of each); ``wiped``: each try is
    two intents, one stored and the next killed at ``point`` (:func:`tried`)."""
    stream = STREAM_POINT.fullmatch(point)
    if stream is not None:
        return _stream_scenario(scenario, int(stream[1]), int(stream[2]), times)
    data = retry_quickly(scenario, kills=times)
    data["name"] = f"{scenario.name}-replay"
    data["workload"].update(intents=times, concurrency=1)
    data["description"] = f"mcp-chaos replay: the pod SIGKILLed at {point} in each intent, then retried."
    hold: dict[str, Any] = {"at": point}
    if wiped:
        data["description"] = (
            f"mcp-chaos replay: an intent stored, then the pod SIGKILLed at {point} of the next, "
            f"{times} times: is the stored one lost?"
        )
        data["workload"]["intents"] = 2 * times
        hold["intents"] = [2 * t + 1 for t in range(times)]
    data["faults"] = {"crash_points": {"holds": [hold]}}
    data["gate"] = {"fail_on": [v.value for v in REPLAYED]}
    return parse_scenario(data, source="the replay of " + scenario.name)


def _stream_scenario(scenario: Scenario, rule: int, attempt: int, times: int) -> Scenario:
    """The run's scenario, its faults replaced by its stream rule ``rule``, made on attempt ``attempt`` of
    each of ``times`` intents (an explicit plan: every time), one call at a time."""
    rules = scenario.faults.stream
    if rule >= len(rules):
        raise ScenarioError(f"faults.stream has no rule {rule} any more ({len(rules)} rules)")
    data = scenario.model_dump(mode="json")
    made = {**data["faults"]["stream"][rule], "intent": None, "attempt": attempt, "probability": None}
    data["name"] = f"{scenario.name}-replay"
    data["description"] = f"mcp-chaos replay: {made['fault']} on attempt {attempt} of each intent."
    data["workload"].update(intents=times, concurrency=1)
    data["faults"] = {"stream": [made]}
    data["gate"] = {"fail_on": [v.value for v in REPLAYED]}
    return parse_scenario(data, source="the replay of " + scenario.name)


def struck(point: str | None, *, wiped: bool = False) -> str:
    """How a replay's fault is told: ``killed at db_commit#2``, ``struck by faults.stream rule 0 on
    attempt 1``, ``the next call killed at fs_write#1`` (``wiped``: each try's stored intent is judged)."""
    stream = STREAM_POINT.fullmatch(point or "")
    if stream is not None:
        return f"struck by faults.stream rule {stream[1]} on attempt {stream[2]}"
    return f"the next call killed at {point}" if wiped else f"killed at {point}"


def _struck(e: dict[str, Any]) -> bool:
    """Whether a history event is a replay's fault made: a kill at its point, or its stream rule's hit."""
    kind = e.get("type")
    return (kind == EventType.CRASH_POINT and e.get("held") is True) or (
        kind == EventType.FAULT and "rule" in e
    )


def tried(replayed: Replayed, audit: AuditResult) -> list[str]:
    """The verdict of each try: each intent's, or where a fault on another call lost the finding, each
    stored intent's (the even ones: the odd ones after them are the calls killed, which the next try's
    kill may take too)."""
    table = audit.intents.sort_values("intent")
    if replayed.wiped:
        table = table[table["intent"] % 2 == 0]
    return [str(v) for v in table["verdict"].tolist()]


def judge(replayed: Replayed, audit: AuditResult) -> None:
    """What the tries of ``replayed`` say (see the module's docstring)."""
    tries = tried(replayed, audit)
    replayed.tries = tries
    missed: list[str] = []
    killed = set()
    for e in read_history(audit.run_dir / rundir.HISTORY):
        if e.get("type") == EventType.FAULT_MISSED:
            missed.append(str(e.get("reason", "")))
        elif _struck(e):
            killed.add(e.get("intent"))
    n = len(tries)
    fault = struck(replayed.point, wiped=replayed.wiped)
    if tries and all(t == replayed.verdict for t in tries):
        replayed.result, replayed.why = Result.STILL_FAILING, f"{replayed.verdict} in {n} of {n} tries"
        if replayed.wiped:
            replayed.why += f" (each stored, then {fault})"
    elif missed or len(killed) < n:
        replayed.result = Result.COULD_NOT_REPRODUCE
        why = missed[0] if missed else f"made in {len(killed)} of {n} tries"
        replayed.why = f"not {fault}: {why}"
    elif tries and all(t == Verdict.EXACTLY_ONCE for t in tries):
        replayed.result = Result.FIXED
        replayed.why = f"{fault}, exactly once in {n} of {n} tries"
    else:
        counts = ", ".join(f"{v} {tries.count(v)}" for v in sorted(set(tries)))
        replayed.result, replayed.why = Result.COULD_NOT_REPRODUCE, f"the tries differ: {counts}"


def group(findings: Sequence[Finding]) -> list[Replayed]:
    """One replay per point and verdict (and whether a fault on another call made them); findings no pod
    kill made are their own, not replayed."""
    groups: dict[tuple[str | None, str, bool, bool], Replayed] = {}
    alone = []
    for finding in findings:
        wiped = finding.wiped is not None
        if finding.point is None and not wiped:
            alone.append(
                Replayed(None, finding.verdict, [finding], Result.COULD_NOT_REPRODUCE, finding.where)
            )
            continue
        key = (finding.point, finding.verdict, finding.guessed, wiped)
        if key not in groups:
            groups[key] = Replayed(
                finding.point,
                finding.verdict,
                [],
                Result.COULD_NOT_REPRODUCE,
                "",
                guessed=finding.guessed,
                wiped=wiped,
            )
        groups[key].findings.append(finding)
    return [*groups.values(), *alone]


async def replay(
    run_dir: Path,
    intents: Sequence[int],
    *,
    times: int,
    overrides: Sequence[str],
    results: Path,
    out: TextIO | None = None,
) -> list[Replayed]:
    """Replay the findings of ``run_dir`` (or the ``intents`` named), ``times`` tries each."""
    from harness.run.runner import check_environment

    rundir.require_run_dir(run_dir)
    scenario = load_scenario(run_dir / rundir.SCENARIO, overrides)
    check_environment(scenario)
    audit = audit_run(run_dir)
    # Without overrides the replay runs the run's own build: a FIXED at a guessed point has nothing to be
    # confirmed against.
    own = load_scenario(run_dir / rundir.SCENARIO) if overrides else None
    return await replay_findings(
        findings_of(audit, intents), scenario, times=times, results=results, own=own, out=out
    )


async def replay_findings(
    findings: Sequence[Finding],
    scenario: Scenario,
    *,
    times: int,
    results: Path,
    own: Scenario | None,
    out: TextIO | None = None,
) -> list[Replayed]:
    """Replay ``findings`` against ``scenario``, ``times`` tries each; ``own``: the build that made them,
    where it differs from ``scenario`` (what a FIXED at a guessed point is confirmed against)."""
    replays = group(findings)
    for replayed in replays:
        if replayed.wiped and replayed.point is None:
            # No point of the call the fault cut short was seen (a file store's writes): its window is
            # found where crash points find it, among that call's file operations.
            where = f"{replayed.findings[0].where}, at a point of that call this run did not see"
            await _inside(replayed, scenario, own or scenario, times, results, out, where)
            continue
        if replayed.point is None:
            continue
        if out is not None:
            fault = struck(replayed.point, wiped=replayed.wiped)
            out.write(f"replay: {len(replayed.findings)} finding(s) {fault}, {times} tries\n")
            out.flush()
        replayed.run_dir = await _tries(replayed, scenario, times, results)
        if replayed.guessed and replayed.result is Result.FIXED:
            await _confirm(replayed, scenario, own, times, results, out)
    return replays


async def _tries(replayed: Replayed, scenario: Scenario, times: int, results: Path) -> Path | None:
    """One run of ``times`` intents killed at the replay's point, judged into ``replayed``; its directory
    (None: the target has no crash point to kill it at)."""
    from harness.run.runner import run_and_audit

    assert replayed.point is not None
    try:
        made = replay_scenario(scenario, replayed.point, times, wiped=replayed.wiped)
    except ScenarioError as exc:  # a target crash points cannot hold (a URL, Kubernetes, replicas)
        replayed.result, replayed.why = Result.COULD_NOT_REPRODUCE, f"no crash point can be held here: {exc}"
        return None
    target = rundir.prepare_run_dir(results, made)
    # The run's own namespace, so the tries' markers and keys are made as the run's were; not where the
    # store outlives the run (a server the harness does not start): the run's records are there.
    fresh = scenario.target.url is None and scenario.target.kubernetes is None
    namespace = replayed.findings[0].namespace if fresh and replayed.findings else None
    done = await run_and_audit(
        made, target, out=io.StringIO(), progress_interval_s=None, html=False, namespace=namespace
    )
    judge(replayed, done)
    return target


async def _confirm(
    replayed: Replayed,
    scenario: Scenario,
    own: Scenario | None,
    times: int,
    results: Path,
    out: TextIO | None,
) -> None:
    """A FIXED at a guessed point (``response``: no point of the call was seen) holds only if the run's own
    build still fails there: else the kill is not where the window is (a keyed design's rare duplicate
    falls between its two commits, which a kill before the answer never reaches), and the window is
    looked for inside the call."""
    if own is not None:
        check = Replayed(
            replayed.point, replayed.verdict, replayed.findings, Result.COULD_NOT_REPRODUCE, "", guessed=True
        )
        await _tries(check, own, times, results)
        if check.result is Result.STILL_FAILING:
            replayed.why += f"; the run's own build, killed there: {check.why}"
            return
        once = f"the run's own build too took effect once ({check.why})"
    else:
        once = replayed.why.split(", ", 1)[1]
    inside = f"killed before its answer, {once}: the window is inside the call, where this run saw no point"
    await _inside(replayed, scenario, own or scenario, times, results, out, inside)


WINDOW_BUDGET_S = 120.0
"""The exploration that looks for a window inside the call (``crashpoints``' default budget)."""


async def _inside(
    replayed: Replayed,
    scenario: Scenario,
    build: Scenario,
    times: int,
    results: Path,
    out: TextIO | None,
    inside: str,
) -> None:
    """Find the window inside the call, where an exploration of ``build`` (the one that made the finding)
    kills the pod at each of its points: the first whose try made the finding's verdict (for findings a
    fault on another call made, the first whose kill made intents stored before it so: the exploration's
    ``wiped``). Then the tries are made there, against ``scenario``. A power loss is not a kill: those
    states are not explored."""
    from harness.crashpoints.explore import explore, prepare, unexplorable
    from harness.crashpoints.options import ExploreOptions

    why_not = unexplorable(build)
    if why_not is not None:
        replayed.result, replayed.why = (
            Result.COULD_NOT_REPRODUCE,
            f"{inside}, and it cannot be explored: {why_not}",
        )
        return
    verdict = replayed.verdict
    what = f"a kill that makes intents stored before it {verdict}" if replayed.wiped else f"the {verdict}"
    if out is not None:
        out.write(f"replay: looking for {what} inside the call (an exploration of its points)\n")
        out.flush()
    planned = prepare(build, results, ExploreOptions(budget_s=WINDOW_BUDGET_S, power_loss=False, jobs=1))
    found = await explore(planned, out=io.StringIO(), progress_interval_s=None)
    window = next(
        (
            r.name
            for r in found.points
            if len(r.path) == 1 and (r.wiped.get(verdict) if replayed.wiped else r.verdicts[verdict])
        ),
        None,
    )
    if window is None:
        replayed.result = Result.COULD_NOT_REPRODUCE
        replayed.why = (
            f"{inside}; an exploration of its {len(found.clean)} points made no {verdict} either "
            f"({planned.run_dir})"
        )
        return
    replayed.window = window
    at = Replayed(
        window, replayed.verdict, replayed.findings, Result.COULD_NOT_REPRODUCE, "", wiped=replayed.wiped
    )
    replayed.run_dir = await _tries(at, scenario, times, results)
    replayed.result, replayed.tries = at.result, at.tries
    replayed.why = f"the window is at {window} (an exploration of the run's build found it there): {at.why}"


def exit_code(replays: Sequence[Replayed]) -> int:
    """0 every finding FIXED, 1 one STILL FAILING, 2 otherwise (none left to say either)."""
    results = {r.result for r in replays}
    if Result.STILL_FAILING in results:
        return 1
    if results == {Result.FIXED}:
        return 0
    return 2


def render(replays: Sequence[Replayed]) -> str:
    """The table: a row per finding, its replay's result and why."""
    rows = [
        [str(f.intent), f.verdict, f.cause or "-", f.where, r.result.value, r.why]
        for r in replays
        for f in r.findings
    ]
    head = ["intent", "verdict", "cause", "the kill caught it", "replay", "why"]
    table = markdown_table(head, rows, "rlllll")
    counts = {res: sum(len(r.findings) for r in replays if r.result is res) for res in Result}
    told = ", ".join(f"{n} {res.value}" for res, n in counts.items() if n)
    runs = [str(r.run_dir) for r in replays if r.run_dir is not None]
    return table + f"\n\nreplay: {told}" + (f"\nruns: {', '.join(runs)}" if runs else "")


def as_json(replays: Sequence[Replayed]) -> list[Mapping[str, Any]]:
    return [
        {
            "intent": f.intent,
            "verdict": f.verdict,
            "cause": f.cause,
            "point": f.point if f.point is not None else r.window,
            "where": f.where,
            "result": r.result.value,
            "why": r.why,
            "tries": r.tries,
            "run_dir": str(r.run_dir) if r.run_dir else None,
        }
        for r in replays
        for f in r.findings
    ]
