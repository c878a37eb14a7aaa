"""Stories: what happened to a few intents of each kind of finding, attempt by attempt.

A count says *that* intents were lost; a story says how one was: its attempts
(request ids, pods, span ids of traced runs, outcomes, the reply or error text, when), the faults that
landed on them, the checkpoint reads that saw its effect and the first that did
not, the final count, the cause and the fix. For each (verdict, cause) class the
first ``PER_CLASS`` intents by index are told.

They are built after judging by a second, targeted read of the history that
follows only the chosen intents and stops once every one of them has ended:
since the chosen intents are the first of their class, it usually reads a small
part of the history, and a million-intent audit pays nothing for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import CRASH_WINDOW_S, POD_FAULT_KINDS, CheckpointRead, PodFault, fault_label
from harness.faultkinds.base import Fix
from harness.history import CONNECTION_CLOSED, EventType, FaultKind, Verdict

PER_CLASS = 5
"""Intents told per (verdict, cause) class."""
ORDER = (
    Verdict.LOST,
    Verdict.APPLIED_DESPITE_ERROR,
    Verdict.DUPLICATE,
    Verdict.APPLIED_AFTER_GIVING_UP,
    Verdict.UNFINISHED,
    Verdict.REJECTED,
    Verdict.INCOMPLETE,
)
"""Classes are listed worst verdict first."""
TOLD = frozenset(ORDER) - {Verdict.INCOMPLETE}
"""Verdicts whose intents get stories (an incomplete intent's story is the run's end)."""

CLOSED = frozenset(d.value for d in CONNECTION_CLOSED)
LATE_S = 1.0
"""How far past the last chosen intent's end the history is read for points told late (``point_late``):
a commit whose reply comes after its pod's kill is told within milliseconds of it."""

History = Callable[[], Iterable[Sequence[Mapping[str, Any]]]]
"""Opens the history again, as batches of events."""


@dataclass(frozen=True, slots=True)
class Passed:
    """A hold point an attempt passed: a ``crash_point`` event of a run with ``faults.crash_points``, or
    one its ``attempt_ended`` names (every run observes the points of each attempt)."""

    point: str
    """``request``, ``db_commit#N``, ``downstream#N``, ``response``."""
    held: bool
    """The pod was SIGKILLed there."""
    statements: tuple[str, ...] = ()
    """What a commit made durable: its statements."""
    wrote: str | None = None
    """Whether the commit wrote: ``yes``, ``no`` (reads only) or ``unknown`` (a function call)."""
    answer: str | None = None
    """At ``response``: what came that was no answer to the tool (``HTTP 404``), so no point."""
    key: str | None = None
    """The idempotency key a downstream call carried."""
    replayed: bool = False
    """The sink deduplicated the downstream call by its key."""
    label: str | None = None
    """What the point commits or touches (``INSERT invoices``), as an ordinary run observes it."""
    ambiguous: bool = False
    """Observed while several attempts were open, none of which it could be told to belong to: this
    attempt may have reached it, or another."""


@dataclass(frozen=True, slots=True)
class Step:
    """One attempt of an intent, as the client saw it."""

    attempt: int
    request_id: Any
    pod: str | None
    start_t: float
    end_t: float | None
    """None: the attempt never ended (the run stopped)."""
    outcome: str | None
    detail: str | None
    code: str | None
    text: str | None
    """The reply's excerpt (ok) or the error's message."""
    reads_as_failure: bool
    faults: list[str]
    """What landed on it: pod faults while it was in flight, stream faults that named it."""
    points: list[Passed] = field(default_factory=list)
    """The hold points it passed, in order."""
    span_id: str | None = None
    """The span its ``traceparent`` named (``client.trace``): the parent of the server's own span."""
    rules: tuple[int, ...] = ()
    """The ``faults.stream`` rules (by index) that hit it: what a replay makes again."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One checkpoint read, as it concerns the intent."""

    t: float
    when: str
    pod: str
    effects: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Story:
    intent: int
    marker: str
    key: str
    verdict: str
    cause: str
    client_status: str
    effects: int
    """The final count."""
    steps: list[Step]
    reads: list[Seen]
    """The reads that saw its effect, and the first after them that saw fewer."""
    reads_total: int
    """Checkpoint reads in the run (those listed are the ones that tell)."""
    vanished_after: str
    fix: Fix | None
    pod_faults: list[tuple[float, str]] = field(default_factory=list)
    """(t, label) of the pod faults in its story: those that hit its attempts, and the one its
    effects vanished after."""
    trace_id: str | None = None
    """Its trace (``client.trace``): every attempt's ``traceparent`` named it."""
    later: str = ""
    """Where its verdict is judged before the end of the run (a crash point's, on what the reads saw
    before a later try's crash took its effects): what the end of the run shows instead, and why."""


POD_KILLS = ("kill#", "crash#", "rollout#")
"""How a story labels the pod faults that end a pod (``kill#1 pod-0 @2.72s``)."""


def lost_to_another_call(story: Story) -> bool:
    """Whether ``story`` is a lost intent whose effect vanished after a pod fault none of its own attempts
    saw: acknowledged, then lost with a store a kill of some later call tore or emptied (a replay makes it
    again so: :mod:`harness.wiped`)."""
    if story.verdict != Verdict.LOST or not story.vanished_after.startswith(POD_KILLS):
        return False
    return not any(f.startswith(POD_KILLS) for step in story.steps for f in step.faults)


@dataclass(frozen=True, slots=True)
class FindingClass:
    """One (verdict, cause) class: how many, what it means, the fix, and a few stories."""

    verdict: Verdict
    cause: str
    count: int
    fix: Fix | None
    stories: list[Story] = field(default_factory=list)


def classes(
    counts: Mapping[tuple[str, str], int], firsts: Mapping[tuple[str, str], list[int]]
) -> list[tuple[Verdict, str, int, list[int]]]:
    """(verdict, cause, count, the first intents by index) of every class, worst verdict first.

    ``counts`` and ``firsts`` are by (verdict, cause), as :class:`harness.audit.tally.Tally` adds them up.
    """
    rank = {v.value: n for n, v in enumerate(ORDER)}
    rows = [(Verdict(v), c, n, sorted(firsts.get((v, c), []))) for (v, c), n in counts.items()]
    return sorted(rows, key=lambda r: (rank.get(r[0].value, len(rank)), -r[2], r[1]))


def _scan(history: History, chosen: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The attempts of the chosen intents, read again from the history, as (mutable) step records."""
    steps: dict[int, list[dict[str, Any]]] = {i: [] for i in chosen}
    open_attempts: dict[Any, dict[str, Any]] = {}
    attempts: dict[tuple[int, int], dict[str, Any]] = {}
    """(intent, attempt) -> its step: a hold point's event names its attempt, not its request id."""
    remaining = set(chosen)
    until: float | None = None
    """Once every chosen intent has ended: read on to here for points told late (``point_late``)."""
    to_the_end = False
    """The run placed its observed points after its calls (``points_placed``): read on to its end."""
    run_started, started, ended, fault, intent_ended, crash_point, late, placed = (
        EventType.RUN_STARTED.value,
        EventType.ATTEMPT_STARTED.value,
        EventType.ATTEMPT_ENDED.value,
        EventType.FAULT.value,
        EventType.INTENT_ENDED.value,
        EventType.CRASH_POINT.value,
        EventType.POINT_LATE.value,
        EventType.POINTS_PLACED.value,
    )
    for batch in history():
        for ev in batch:
            typ = ev.get("type")
            if typ == run_started:
                to_the_end = ev.get("points_placed_after") is True
            elif typ == started and ev.get("intent") in remaining:
                step = {
                    "attempt": ev.get("attempt", 0),
                    "id": ev.get("id"),
                    "pod": ev.get("pod"),
                    "start": ev["t"],
                    "start_seq": ev.get("seq", -1),
                    "faults": [],
                    "rules": [],
                    "points": [],
                    "trace": ev.get("trace_id"),
                    "span": ev.get("span_id"),
                }
                steps[ev["intent"]].append(step)
                open_attempts[ev.get("id")] = step
                attempts[(ev["intent"], step["attempt"])] = step
            elif typ == ended and ev.get("id") in open_attempts:
                step = open_attempts.pop(ev["id"])
                step.update(
                    end=ev["t"],
                    end_seq=ev.get("seq", -1),
                    outcome=ev.get("outcome"),
                    detail=ev.get("detail"),
                    code=None if ev.get("code") is None else str(ev["code"]),
                    text=ev.get("reply") if ev.get("outcome") == "ok" else ev.get("message"),
                    failure=bool(ev.get("reads_as_failure")),
                )
                if not step["points"]:  # observed (a crash point run has them as events of their own)
                    step["points"] = observed(ev.get("points"))
            elif typ == fault and ev.get("id") in open_attempts and ev.get("fault") not in POD_FAULT_KINDS:
                open_attempts[ev["id"]]["faults"].append(fault_label(ev))
                if isinstance(ev.get("rule"), int):
                    open_attempts[ev["id"]]["rules"].append(ev["rule"])
            elif typ == crash_point and (ev.get("intent"), ev.get("attempt")) in attempts:
                attempts[(ev["intent"], ev["attempt"])]["points"].append(
                    Passed(
                        point=str(ev.get("point")),
                        held=ev.get("held") is True,
                        # "writes": what histories written before every commit was a point called them
                        statements=tuple(str(w) for w in ev.get("statements") or ev.get("writes") or ()),
                        wrote=None if ev.get("wrote") is None else str(ev["wrote"]),
                        answer=None if ev.get("answer") is None else str(ev["answer"]),
                        key=None if ev.get("key") is None else str(ev["key"]),
                        replayed=ev.get("replayed") is True,
                    )
                )
            elif typ == late and (ev.get("intent"), ev.get("attempt")) in attempts:
                # told after its attempt_ended (a commit whose reply came after the kill): the attempt's last
                step = attempts[(ev["intent"], ev["attempt"])]
                step["points"] += observed([[ev.get("point"), ev.get("label")]])
            elif typ == placed:
                for entry in ev.get("attempts") or ():
                    placed_in = attempts.get((entry.get("intent"), entry.get("attempt")))
                    if placed_in is not None:
                        placed_in["points"] += observed(entry.get("points"))
            elif typ == intent_ended and ev.get("intent") in remaining:
                remaining.discard(ev["intent"])
                if not remaining and not open_attempts:
                    until = ev["t"] + LATE_S
            if until is not None and not to_the_end and ev.get("t", 0.0) > until:
                return steps
    return steps


def observed(points: object) -> list[Passed]:
    """An ``attempt_ended``'s points ([name, label], or [name, label, "ambiguous"]) as points passed."""
    if not isinstance(points, list):
        return []
    return [
        Passed(
            point=str(p[0]),
            held=False,
            label=None if p[1] is None else str(p[1]),
            ambiguous=len(p) > 2,
        )
        for p in points
        if isinstance(p, list) and len(p) >= 2
    ]


def _pod_faults_during(step: Mapping[str, Any], pod_faults: Sequence[PodFault]) -> list[PodFault]:
    """The pod faults that broke an attempt, as the fold judged them: those between its start and end
    in history order, and a crash recorded (when reaped) up to ``CRASH_WINDOW_S`` after its connection
    closed; on its own pod when it names one."""
    pod, start, end = step.get("pod"), step["start_seq"], step.get("end_seq", math.inf)
    closed = step.get("detail") in CLOSED
    landed = []
    for f in pod_faults:
        if f.seq <= start or (pod is not None and f.pod != pod):
            continue
        if f.seq < end or (
            f.kind == FaultKind.CRASH and closed and f.t - CRASH_WINDOW_S <= step.get("end", math.inf) <= f.t
        ):
            landed.append(f)
    return landed


def _reads(intent: int, reads: Sequence[CheckpointRead]) -> list[Seen]:
    """The reads that first saw each count of the intent's effects, and where they fell: the last read
    that still saw them all, then the first that saw fewer (reads that saw the same again tell nothing,
    and a run that restarts its pod often reads a great many)."""
    told: list[Seen] = []
    most = 0
    again: Seen | None = None
    """The last read that saw ``most`` again, told only if a drop follows it."""
    for read in reads:
        n = read.count(intent) if read.ok else 0
        if n and n > most:
            told.append(Seen(read.t, read.when, read.pod, n))
            most, again = n, None
        elif most and n == most:
            again = Seen(read.t, read.when, read.pod, n)
        elif most and n < most:
            if again is not None:
                told.append(again)
            told.append(Seen(read.t, read.when, read.pod, n, read.error))
            if read.ok:
                break
            again = None
    return told


def tell(
    table: pa.Table,
    intents: Sequence[int],
    history: History,
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    fixes: Callable[[str, str], Fix | None],
) -> dict[int, Story]:
    """The stories of these intents (rows of the judged ``table``), from one targeted read of the history."""
    if not intents:
        return {}
    scanned = _scan(history, set(intents))
    wanted = pc.is_in(table.column("intent"), pa.array(list(intents), pa.int64()))
    rows = table.filter(wanted).to_pylist()  # a few rows, not a copy of all
    by_label = {f.label(): f for f in pod_faults}
    stories = {}
    for row in rows:
        intent = int(row["intent"])
        steps = []
        moments: dict[str, float] = {}
        for s in scanned.get(intent, []):
            end_t = s.get("end")
            landed = _pod_faults_during(s, pod_faults)
            moments.update((f.label(), f.t) for f in landed)
            steps.append(
                Step(
                    attempt=int(s["attempt"]),
                    request_id=s["id"],
                    pod=s["pod"],
                    start_t=float(s["start"]),
                    end_t=None if end_t is None else float(end_t),
                    outcome=s.get("outcome"),
                    detail=s.get("detail"),
                    code=s.get("code"),
                    text=s.get("text"),
                    reads_as_failure=bool(s.get("failure")),
                    faults=[*(f.label() for f in landed), *s["faults"]],
                    points=s["points"],
                    span_id=s["span"],
                    rules=tuple(s["rules"]),
                )
            )
        verdict, cause = str(row["verdict"]), str(row["cause"])
        vanished_after = str(row.get("vanished_after") or "")
        if vanished_after in by_label:
            moments[vanished_after] = by_label[vanished_after].t
        stories[intent] = Story(
            intent=intent,
            marker=str(row["marker"]),
            key=str(row["key"]),
            verdict=verdict,
            cause=cause,
            client_status=str(row["client_status"]),
            effects=int(row["effects"]),
            steps=steps,
            reads=_reads(intent, reads),
            reads_total=len(reads),
            vanished_after=vanished_after,
            fix=fixes(verdict, cause),
            pod_faults=sorted((t, label) for label, t in moments.items()),
            trace_id=next((s["trace"] for s in scanned.get(intent, []) if s["trace"]), None),
        )
    return stories
