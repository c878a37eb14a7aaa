"""``mcp-chaos races``: every ordering of an intent's original and a retry beside it, each judged.

Like ``crashpoints``, the exploration is one ordinary run of the user's scenario, changed so that its
hold points race (``faults.crash_points.race``, planned by :mod:`harness.crashpoints.races`): intent 0
is a clean call whose points become the orderings; every later intent is one ordering, its original's
stream broken at a point so that the client re-issues the call at once with a new request id and the
same key. The run directory is audited by the ordinary auditor; this module reads its history back to
name each intent's ordering and what became of it, so every verdict is the auditor's.

What the exploration changes of the scenario, and why:

* one intent at a time, as many as the orderings (twice the clean call's points), no other fault, no
  gate, the budget in the run's time limit;
* the client retries a broken stream after 0.05 s, a few times, and waits for an answer long enough
  for a held point's limit: what is tested stays the client's (a new request id, the intent's key).

With ``second="timeout"`` (``races --second timeout``) no stream is broken: the client's attempt timeout
is set below the hold limit (:func:`~harness.crashpoints.races.client_timeout`), and the ordinary retry
policy retries a timeout, so the held original times out and the client re-issues it with its key.

With ``second="call"`` (``races --second call``) each ordering is two intents, a first call and a second
one beside it (two at a time, the pod's file operations traced): its row is judged by both verdicts,
the worse of the two (a lost note is the second's or the first's, whichever save came last).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import rundir
from harness.audit.auditor import AuditResult
from harness.audit.findings import SEVERITY
from harness.auditing import audit_and_report
from harness.crashpoints.races import RACE_HOLD_LIMIT_S, Made, Second, client_timeout
from harness.errors import HistoryError, PreflightError
from harness.history import CheckpointWhen, EventType, Outcome, SeenEffects, Verdict, read_history
from harness.report.junit import Case, document
from harness.report.tables import markdown_table
from harness.run.runner import execute
from harness.sanitize import json_safe
from harness.scenario import Scenario, parse_scenario

MAX_POINTS = 64
"""A clean call's points a race places its retry at, at most (twice over: sent at, held at)."""
RETRY_AFTER_S = 0.05
"""The client's wait after a broken stream: under 2026-07-28 it re-issues the call at once."""
DRAIN_S = 60.0
"""Beyond the budget: the clean call, the last ordering, the run's end."""
FIX_READ_THEN_WRITE = (
    "reads the key ({read}), then inserts ({write}), with neither a unique key nor a lock: take a unique "
    "key on the key column and on conflict return the stored result, or lock the key in the transaction"
)
FIX_ANSWERED_EARLY = (
    "the key record (with the result to return) commits before the effect, and a retry that finds it "
    "answers at once: commit the key record and the effect in one transaction"
)
ANSWERED_EARLY = "answered before the effect"
"""An observation, not a verdict: an attempt was answered ok while the store held no effect of its
intent (a read as the answer came); the audit's verdict at the end says whether the effect came."""
FIX_LOST_UPDATE = (
    "loads the file, changes it, saves it whole with no lock: hold one lock across load-modify-save, "
    "or append"
)
"""A lost note of two calls on a store whose call saves a file: the later save overwrote the other's."""
FIX_OTHER = (
    "the retry made the effect again while the original was still at work: check the key and make the "
    "effect under one unique key or one lock, and return the stored result to the one that loses"
)


def racing_data(
    scenario: Scenario,
    budget_s: float,
    hold_limit_s: float = RACE_HOLD_LIMIT_S,
    *,
    only: tuple[str, ...] = (),
    repeat: int = 1,
    second: Second = Second.RETRY,
) -> dict[str, Any]:
    """The scenario as the exploration runs it (see the module's docstring), as data: with ``only``, those
    orderings alone, each ``repeat`` times; ``second``: what runs beside the first attempt."""
    data = scenario.model_dump(mode="json")
    tries = len(only) * repeat if only else 2 * MAX_POINTS * repeat
    calls = 2 if second is Second.CALL else 1
    # the clean call, each try's calls, the call closing the run (two at a time: one beside the clean)
    data["workload"].update(intents=calls + calls * tries + 1, concurrency=calls)
    data["workload"]["max_duration_s"] = max(data["workload"]["max_duration_s"], budget_s + DRAIN_S)
    client = data["client"]
    client["backoff"] = {
        "initial_s": RETRY_AFTER_S,
        "max_s": RETRY_AFTER_S,
        "multiplier": 1.0,
        "jitter": "none",
    }
    client["max_attempts"] = max(client["max_attempts"], 5)
    client["attempt_timeout_s"] = (
        client_timeout(hold_limit_s)
        if second is Second.TIMEOUT
        else max(client["attempt_timeout_s"], 3 * hold_limit_s + 5)
    )
    race: dict[str, Any] = {"budget_s": budget_s, "hold_limit_s": hold_limit_s}
    if only:
        race["only"] = list(only)
    if repeat != 1:
        race["repeat"] = repeat
    if second is not Second.RETRY:
        race["second"] = second.value
    crash = scenario.faults.crash_points
    files = second is Second.CALL and (crash is None or crash.files)
    data["faults"] = {"crash_points": {"race": race, "files": files}}
    data["gate"] = {}
    return data


def racing_scenario(
    scenario: Scenario,
    budget_s: float,
    hold_limit_s: float = RACE_HOLD_LIMIT_S,
    *,
    only: tuple[str, ...] = (),
    second: Second = Second.RETRY,
) -> Scenario:
    """The scenario as the exploration runs it (see the module's docstring)."""
    data = racing_data(scenario, budget_s, hold_limit_s, only=only, second=second)
    return parse_scenario(data, source="the races of " + scenario.name)


@dataclass(frozen=True)
class Answer:
    """An attempt of an ordering answered ok, beside what the store held as the answer came."""

    attempt: str
    """``original`` or ``retry`` (two calls: ``first`` or ``second``)."""
    reply: str
    """The answer as the history has it (an excerpt, redacted)."""
    stored_then: int | None
    """The intent's effects in the store as the answer came (a read at the answer); None: no such read,
    or it failed."""


@dataclass
class RaceRow:
    """One ordering tried: what became of it, and the auditor's verdict on its intent."""

    ordering: str
    intent: int
    id: str
    """``original:db_commit#3``: what ``races --only`` and the reproducer name it by."""
    held: str
    """Whose point was held: ``original`` (the retry sent there) or ``retry`` (held at its own)."""
    point: str
    label: str | None
    made: str
    why: str
    verdict: str
    effects: int
    ran: list[str] = field(default_factory=list)
    """The two attempts' points in the order the history has them (``o:`` the original, ``r:`` the retry)."""
    fix: str | None = None
    answers: list[Answer] = field(default_factory=list)
    """Each attempt answered ok, with what the store held then; ``effects`` is what it held at the end."""
    partner: int | None = None
    """Two calls: the second call's intent (``intent`` is the first's); ``verdict`` and ``effects`` are
    then the worse call's."""
    verdicts: dict[str, int] = field(default_factory=dict)
    """Each call's verdict, counted (one intent: its own)."""

    @property
    def finding(self) -> bool:
        return self.verdict in FINDINGS

    @property
    def answered_early(self) -> list[Answer]:
        """The answers given while the store held no effect of the intent."""
        return [a for a in self.answers if a.stored_then == 0]

    @property
    def observation(self) -> str | None:
        """:data:`ANSWERED_EARLY` where an answer came before the effect existed, else None."""
        return ANSWERED_EARLY if self.answered_early else None

    def at_answer(self) -> str:
        """The table's cell: what the store held as each answer came (``retry: 0``)."""
        return "; ".join(
            f"{a.attempt}: {'?' if a.stored_then is None else a.stored_then}" for a in self.answers
        )


FINDINGS = frozenset({Verdict.DUPLICATE.value, Verdict.LOST.value, Verdict.APPLIED_DESPITE_ERROR.value})


def worse_of(calls: list[int], verdicts: Mapping[int, str]) -> int:
    """The call a race's row is judged by: the one with the worse verdict, in the audit's headline order
    (lost, applied despite error, duplicate), else the first."""
    ranked = [v.value for v in SEVERITY]
    return min(calls, key=lambda i: ranked.index(verdicts[i]) if verdicts.get(i) in ranked else len(ranked))


@dataclass
class Races:
    """What ``races`` found."""

    scenario: Scenario
    run_dir: Path
    clean: list[str]
    """The clean call's points, each with its label."""
    rows: list[RaceRow]
    orderings: list[str]
    """Every ordering of the clean call, tried or not."""
    ran_out: bool
    seconds: float
    hold_limit_s: float = RACE_HOLD_LIMIT_S
    second: Second = Second.RETRY

    @property
    def findings(self) -> list[RaceRow]:
        return [r for r in self.rows if r.finding]

    @property
    def untried(self) -> list[str]:
        tried = {r.ordering for r in self.rows}
        return [o for o in self.orderings if o not in tried]


async def explore_races(
    scenario: Scenario,
    results_dir: Path,
    *,
    budget_s: float,
    hold_limit_s: float = RACE_HOLD_LIMIT_S,
    only: tuple[str, ...] = (),
    second: Second = Second.RETRY,
    run_id: str | None = None,
    out: TextIO = sys.stderr,
    progress_interval_s: float | None = 1.0,
) -> Races:
    """Run the races (``only``: those orderings; ``second``: what runs beside the first attempt), audit
    the run with the auditor, and read each ordering's intents back."""
    started = time.monotonic()
    racing = racing_scenario(scenario, budget_s, hold_limit_s, only=only, second=second)
    run_dir = rundir.prepare_run_dir(results_dir, racing, run_id)
    await execute(racing, run_dir, out=out, progress_interval_s=progress_interval_s)
    audit = audit_and_report(run_dir, html=False)
    return read_races(scenario, run_dir, audit, started, hold_limit_s=hold_limit_s, second=second)


def read_races(
    scenario: Scenario,
    run_dir: Path,
    audit: AuditResult,
    started: float,
    *,
    hold_limit_s: float = RACE_HOLD_LIMIT_S,
    second: Second = Second.RETRY,
) -> Races:
    """Each ordering the plan told of (its last ``crash_plan`` event), with its intents' verdicts."""
    table = audit.intents
    judged = "verdict" in table.columns
    verdicts = dict(zip(table["intent"].tolist(), table["verdict"].tolist(), strict=True)) if judged else {}
    effects = dict(zip(table["intent"].tolist(), table["effects"].tolist(), strict=True)) if judged else {}
    plan: dict[str, Any] = {}
    order: list[tuple[int, int, str]] = []
    """(intent, attempt, point) of every point an attempt reached, in the history's order."""
    firsts: dict[int, list[str]] = {}
    replies: dict[int, list[tuple[int, str]]] = {}
    then: dict[tuple[int, int], int | None] = {}
    for ev in read_history(run_dir / rundir.HISTORY):
        kind = ev.get("type")
        if kind == EventType.CRASH_PLAN and "races" in ev:
            plan = ev
        elif (
            kind == EventType.ATTEMPT_ENDED
            and ev.get("outcome") == Outcome.OK
            and ev.get("attempt") in (1, 2)
        ):
            replies.setdefault(int(ev["intent"]), []).append((int(ev["attempt"]), str(ev.get("reply") or "")))
        elif kind == EventType.EFFECTS_CHECKPOINT and ev.get("when") == CheckpointWhen.AT_ANSWER:
            then[int(ev["intent"]), int(ev["attempt"])] = _stored(ev, int(ev["intent"]))
        elif ev.get("type") == EventType.CRASH_POINT and ev.get("attempt") in (1, 2):
            intent, point, label = int(ev["intent"]), str(ev["point"]), ev.get("label")
            order.append((intent, int(ev["attempt"]), point))
            if ev["attempt"] == 1:
                firsts.setdefault(intent, []).append(f"{point} ({label})" if label else point)
    clean_intent = int(plan.get("clean_intent", 0))
    clean = firsts.get(clean_intent, [])
    clean_verdict = verdicts.get(clean_intent) or "never made"
    if clean_verdict != Verdict.EXACTLY_ONCE.value:
        raise PreflightError(
            f"races: the clean call (intent {clean_intent}, nothing held) was {clean_verdict}, with "
            f"{effects.get(clean_intent, 0)} effects; it must succeed and be counted once before races can "
            f"be judged (see {run_dir / rundir.REPORT_MD})"
        )
    partners = {int(r["partner"]): int(r["intent"]) for r in plan.get("races", ()) if "partner" in r}
    ran: dict[int, list[str]] = {}
    for intent, attempt, point in order:  # o: the original, r: its retry; 1: the first call, 2: the second
        first = partners.get(intent)
        who = ("2" if first is not None else "1") if second is Second.CALL else ("o" if attempt == 1 else "r")
        ran.setdefault(intent if first is None else first, []).append(f"{who}:{point}")
    rows = []
    for race in plan.get("races", ()):
        intent = int(race["intent"])
        partner = int(race["partner"]) if "partner" in race else None
        calls = [intent] if partner is None else [intent, partner]
        judged_by = worse_of(calls, verdicts)
        row = RaceRow(
            ordering=str(race["ordering"]),
            intent=intent,
            id=str(race.get("id") or ""),
            held=str(race.get("held") or ""),
            point=str(race.get("at") or ""),
            label=race.get("label"),
            made=str(race.get("made") or "unfinished"),
            why=str(race.get("why") or ""),
            verdict=str(verdicts.get(judged_by, "not judged")),
            effects=int(effects.get(judged_by, 0)),
            ran=ran.get(intent, []),
            partner=partner,
            verdicts=dict(Counter(str(verdicts.get(i, "not judged")) for i in calls)),
            answers=[
                Answer(_who(second, i == intent, attempt), reply, then.get((i, attempt)))
                for i in calls
                for attempt, reply in replies.get(i, [])
            ],
        )
        if row.verdict == Verdict.DUPLICATE.value:
            row.fix = fix_of(clean)
        elif row.verdict == Verdict.LOST.value and partner is not None and saves_a_file(clean):
            row.fix = FIX_LOST_UPDATE
        elif row.observation is not None:
            row.fix = FIX_ANSWERED_EARLY
        rows.append(row)
    return Races(
        scenario=scenario,
        run_dir=run_dir,
        clean=clean,
        rows=rows,
        orderings=[str(o) for o in plan.get("orderings", ())],
        ran_out=plan.get("ran_out") is True,
        seconds=time.monotonic() - started,
        hold_limit_s=hold_limit_s,
        second=second,
    )


WHO = {1: "original", 2: "retry"}


def _who(second: Second, first: bool, attempt: int) -> str:
    """Who answered: the original or the retry, or (two calls) the first call or the second."""
    if second is Second.CALL:
        return "first" if first else "second"
    return WHO[attempt]


def saves_a_file(clean: list[str]) -> bool:
    """Whether the clean call wrote a file of the data directory (the file tracer saw it)."""
    return any(p.startswith("fs_write") for p in clean)


def _stored(ev: dict[str, Any], intent: int) -> int | None:
    """The intent's effects a read at an answer saw; None where it failed or cannot be read."""
    try:
        seen = SeenEffects.from_event(ev)
    except HistoryError:
        return None
    return None if seen is None else seen.count(intent)


def fix_of(clean: list[str]) -> str:
    """A duplicate's fix in the server's terms: where its clean call read before it wrote, say so."""
    read = next((p for p in clean if p.startswith("db_statement") and "(SELECT " in p), None)
    write = next((p for p in clean if p.startswith("db_commit") and "(INSERT " in p), None)
    if read is None or write is None:
        return FIX_OTHER
    return FIX_READ_THEN_WRITE.format(read=_label(read), write=_label(write))


def _label(point: str) -> str:
    return point.partition(" (")[2].removesuffix(")")


def race_reproducer_name(row: RaceRow) -> str:
    """``race-original-db_commit-3.yaml`` for the ordering ``original:db_commit#3`` (``races --emit``)."""
    return "race-" + row.id.replace(":", "-").replace("#", "-") + ".yaml"


def conclusion(races: Races) -> str:
    """The exploration in one sentence, as ``crashpoints``' JSON gives it."""
    found = races.findings
    if found:
        return f"{len(found)} of {len(races.rows)} orderings tried have a finding"
    if races.untried:
        return f"no finding among the {len(races.rows)} orderings tried; {len(races.untried)} not tried"
    return f"no finding: every one of the {len(races.rows)} orderings tried and judged"


def coverage_line(races: Races) -> str:
    made = Counter(r.made for r in races.rows)
    parts = [f"{made[m.value]} {m.value}" for m in Made if made[m.value]]
    tried = f"{len(races.rows)} of {len(races.orderings)} orderings tried ({', '.join(parts) or 'none'})"
    left = f"; the budget ran out: {len(races.untried)} not tried" if races.ran_out else ""
    found = len(races.findings)
    verdict = f"{found} with a finding" if found else "no finding"
    return f"races: {tried}{left}; {verdict}; clean call: {len(races.clean)} points; {races.seconds:.1f} s"


def render_terminal(races: Races, again: str | None = None) -> str:
    """The table, each blocked ordering's reason, each finding's order and fix (and, given ``again``, the
    command that ran the races, the line that tries that ordering alone), then the coverage."""
    rows = [[r.intent, r.ordering, r.made, r.verdict, r.effects, r.at_answer()] for r in races.rows]
    head = ["intent", "ordering", "made", "verdict", "effects", "stored at the answer"]
    lines = [header(races)] if races.second is Second.TIMEOUT else []
    lines.append(markdown_table(head, rows, "rlllrl"))
    whys = sorted({r.why for r in races.rows if r.made != Made.MADE.value and r.why})
    lines += [f"  {why}" for why in whys]
    for row in races.findings:
        lines += ["", f"{row.ordering}: {row.verdict} ({row.effects} effects)", *side_by_side(row)]
        if row.fix is not None:
            lines.append(f"  fix: {row.fix}")
        if again is not None:
            lines.append(f"  reproduce with: {again} --only {row.id}")
    for row in races.rows:
        if row.observation is not None and not row.finding:
            lines += ["", f"{row.ordering}: {row.observation} ({row.verdict} at the end)", *side_by_side(row)]
            lines.append(f"  fix: {row.fix}")
    lines += ["", coverage_line(races), f"run: {races.run_dir}"]
    return "\n".join(lines)


def header(races: Races) -> str:
    """A timeout retry's table says what made the retry: the client's timeout, not a broken stream."""
    timeout = client_timeout(races.hold_limit_s)
    return (
        f"the retry is the client's own: each attempt times out after {timeout:.2f} s "
        f"(below the hold limit, {races.hold_limit_s:g} s), and the retry policy retries a timeout with the "
        "intent's key; no stream is broken"
    )


def side_by_side(row: RaceRow) -> list[str]:
    """An early answer's story: the answer, the store as it came, the store at the end, the order."""
    lines = []
    for answer in row.answered_early:
        lines.append(f"  the {answer.attempt} was answered: {answer.reply}")
        lines.append(
            f"  the store then: {answer.stored_then} effects; at the end: {row.effects} ({row.verdict})"
        )
    lines.append(f"  ran: {' '.join(row.ran)}")
    return lines


def as_json(races: Races, again: str | None = None) -> dict[str, Any]:
    """The table as data, in the shape of ``crashpoints``' JSON where it can (``finding``, ``verdicts``,
    ``fix``, ``reproducer``, ``clean_call``, ``untried``, ``conclusion``); with ``again``, the command
    that ran the races, each finding's line to try it alone."""
    orderings = []
    for r in races.rows:
        entry: dict[str, Any] = {
            "ordering": r.ordering,
            "id": r.id,
            "held": r.held,
            "point": r.point,
            "label": r.label,
            "intent": r.intent,
            "made": r.made,
            "why": r.why,
            "verdict": r.verdict,
            "verdicts": r.verdicts or {r.verdict: 1},
            **({"intents": [r.intent, r.partner]} if r.partner is not None else {}),
            "effects": r.effects,
            "ran": r.ran,
            "finding": r.verdict if r.finding else None,
            "answers": [
                {"attempt": a.attempt, "reply": a.reply, "stored_then": a.stored_then} for a in r.answers
            ],
            "stored_at_end": r.effects,
            "observation": r.observation,
        }
        if r.fix:
            entry["fix"] = r.fix
        if r.finding:
            entry["reproducer"] = race_reproducer_name(r)
            if again is not None:
                entry["reproduce"] = f"{again} --only {r.id}"
        orderings.append(entry)
    return {
        "scenario": races.scenario.name,
        "run_dir": str(races.run_dir),
        "hold_limit_s": races.hold_limit_s,
        "second": races.second.value,
        **(
            {"client_timeout_s": round(client_timeout(races.hold_limit_s), 3)}
            if races.second is Second.TIMEOUT
            else {}
        ),
        "clean": races.clean,
        "clean_call": [p.partition(" (")[0] for p in races.clean],
        "clean_call_labels": [_label(p) or None for p in races.clean],
        "orderings": orderings,
        "findings": len(races.findings),
        "untried": races.untried,
        "ran_out": races.ran_out,
        "conclusion": conclusion(races),
        "seconds": round(races.seconds, 1),
    }


def json_text(races: Races, again: str | None = None) -> str:
    return json.dumps(json_safe(as_json(races, again)), indent=2, ensure_ascii=False) + "\n"


def junit_cases(races: Races, again: str | None = None) -> list[Case]:
    """A case per ordering: failed with its verdict where it has a finding (its order, fix and
    reproduce line as details), passed with what became of it, skipped where it was not reached or
    not tried."""
    cases = []
    for r in races.rows:
        name = f"{r.id} {r.ordering}"
        told = [f"{r.made}{': ' + r.why if r.why else ''}", f"verdict: {r.verdict} ({r.effects} effects)"]
        if r.ran:
            told.append("ran: " + " ".join(r.ran))
        told += [line.strip() for line in side_by_side(r)[:-1]]
        if r.finding:
            if r.fix is not None:
                told.append("fix: " + r.fix)
            if again is not None:
                told.append(f"reproduce with: {again} --only {r.id}")
            cases.append(Case(name, f"{r.verdict} ({r.effects} effects)", details="\n".join(told)))
        elif r.made == Made.NOT_REACHED.value:
            cases.append(Case(name, skipped=r.why or "not reached", details="\n".join(told)))
        else:
            cases.append(Case(name, details="\n".join(told)))
    left = "the budget ran out" if races.ran_out else "not tried"
    cases += [Case(o, skipped=left) for o in races.untried]
    return cases


def junit_text(races: Races, again: str | None = None) -> str:
    """JUnit XML: a case per ordering (:func:`junit_cases`)."""
    name = races.scenario.name
    return document(
        f"mcp-chaos races {name}", f"mcp-chaos.races.{name}", junit_cases(races, again), races.seconds
    )
