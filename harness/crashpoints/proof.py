"""What an exploration's history proves of each try: held where planned, killed there, answer withheld.

A crash point's verdict is only as good as the crash it stands on. A try counts
only when its history shows, for every point of its path:

1. **held at the planned point**: a ``crash_point`` event with ``held`` for the
   point's kind (the controller matched it by what it commits, its label);
2. **killed while held**: a kill fault at that point while the held attempt was in
   flight (the kill is recorded as it is made, right before the hold's own event);
3. **the client got nothing of the answer**: the held attempt ended without one
   (a dropped connection or a timeout), not ``ok``, a tool error or a question;
4. **one attempt at a time**: no attempt of the try began while an earlier exchange was
   still open on the server (a client that gave up on a slow call retries while the
   server is still on it: a commit then may be either's);
5. **a power loss rolled back**: a point crashed as a power loss shows the data
   directory rolled back after its kill, before the try ended;
6. **the held attempt reached the tool**: the point lies in the call's window (a
   commit, a downstream call, a file operation, the server's own answer). An answer that was none
   (a 404 for a session the restarted pod does not know, a 401, a 5xx, a stream
   that ended without an answer) is recorded with what it was and never held, so
   it can prove nothing; ``request`` is the control, where nothing ran by design.

A try without that proof is *unproven*, with the reason; the explorer judges a
point by its proven tries only, and a point with fewer than it planned is
inconclusive. Jepsen's checkers answer ``:unknown`` rather than ``true`` when they
cannot decide; this is that rule for crash points. Pure: a function of the events.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.crashpoints.paths import labelled
from harness.crashpoints.points import Crash, Point, parse_path
from harness.history import EventType, FaultKind, Outcome, excerpt

WITHHELD = frozenset({Outcome.TRANSPORT_ERROR.value, Outcome.TIMEOUT.value})
"""How an attempt whose answer was held ends: its connection dropped, or its client gave up."""


@dataclass(frozen=True, slots=True)
class Held:
    """One hold of a try: the ``crash_point`` event it was, and the kill that followed."""

    attempt: int
    point: Point
    seq: int
    detail: Mapping[str, Any]
    """The event's own fields: statements, wrote, label (a commit), key (a downstream call)."""


@dataclass(slots=True)
class Try:
    """One intent of an exploration held along a path, and whether its history proves the crash."""

    intent: int
    path: tuple[Point, ...]
    path_name: str
    held: list[Held] = field(default_factory=list)
    why: str | None = None
    """Why it is unproven; None: proven."""
    overlapped: int | None = None
    """An attempt that began while an earlier exchange was still open on the server, if one did."""
    kills: list[int] = field(default_factory=list)
    """The run's kill numbers (``kill#N``, as the auditor blames vanished effects on them) of the kills
    found at its holds."""

    @property
    def proven(self) -> bool:
        return self.why is None


@dataclass(frozen=True, slots=True)
class PlanSeen:
    """The exploration's plan as its last ``crash_plan`` event recorded it."""

    planned: list[tuple[str, list[str | None], list[str]]]
    """Each path planned: its name, what each point commits, the points whose crash state it shares."""
    points: int = 0
    """The clean call's crash points (each point, each way), which the states stand for."""
    ran_out: bool = False
    """The budget was spent with tries left to make."""
    clean_intent: int = 0
    untraced: str | None = None
    """Why the pod's file operations were not traced (ptrace refused), if they were not."""
    """The clean call (intent 1 where intent 0 warmed a fresh file store up)."""


@dataclass(slots=True)
class Evidence:
    """What one pass over an exploration's history found."""

    tries: dict[int, Try]
    plan: PlanSeen | None
    windows: dict[int, list[Mapping[str, Any]]]
    """The clean call's crash_point events, per attempt."""
    status: str | None
    """The run's end (``completed``, ``deadline``, ...); None: the harness died."""
    reason: str | None
    clean_intent: int = 0
    untraced: str | None = None
    """Why the pod's file operations were not traced (ptrace refused), if they were not."""


def _point(ev: Mapping[str, Any]) -> Point:
    point = parse_path(str(ev["point"]))[0]
    label = ev.get("label")
    if isinstance(label, str):
        return Point(point.kind, point.index, label, int(ev.get("nth") or 1), crash=point.crash)
    return point


def read_evidence(events: Iterable[Mapping[str, Any]]) -> Evidence:
    """One pass: each held try with its proof (or why it has none), the plan, the clean call's points."""
    tries: dict[int, Try] = {}
    unheld: defaultdict[int, defaultdict[int, list[Mapping[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    """The crash_point events of intents held nowhere (the clean call among them), per attempt."""
    kills: list[tuple[int, str, int]] = []
    """(seq, point, its number among the run's kills)."""
    numbered = 0
    started: dict[tuple[int, int], int] = {}
    ended: dict[tuple[int, int], tuple[int, str]] = {}
    refused: dict[int, str] = {}
    """Per intent whose last answer was a tool error, that error: why a try may never reach its point."""
    intents_ended: dict[int, int] = {}
    rollbacks: list[int] = []
    plan: PlanSeen | None = None
    untraced: str | None = None
    status: str | None = None
    reason: str | None = None
    for ev in events:
        typ = ev.get("type")
        if typ == EventType.CRASH_POINT:
            intent = int(ev["intent"])
            name = ev.get("path")
            if not isinstance(name, str):
                if intent <= 1:  # the clean call is one of the first two
                    unheld[intent][int(ev["attempt"])].append(ev)
                continue
            one = tries.get(intent)
            if one is None:
                one = tries[intent] = Try(intent, parse_path(name), name)
            if ev.get("held") is True:
                one.held.append(Held(int(ev["attempt"]), _point(ev), int(ev["seq"]), ev))
            if ev.get("overlap") is True and one.overlapped is None:
                one.overlapped = int(ev["attempt"])
        elif typ == EventType.FAULT and ev.get("fault") == FaultKind.KILL:
            numbered += 1
            if "point" in ev:
                kills.append((int(ev["seq"]), str(ev["point"]), numbered))
        elif typ == EventType.ATTEMPT_STARTED and "intent" in ev:
            started[(int(ev["intent"]), int(ev["attempt"]))] = int(ev["seq"])
        elif typ == EventType.ATTEMPT_ENDED and "intent" in ev:
            ended[(int(ev["intent"]), int(ev["attempt"]))] = (int(ev["seq"]), str(ev.get("outcome")))
            if ev.get("outcome") == Outcome.TOOL_ERROR:
                refused[int(ev["intent"])] = str(ev.get("message") or "")
            else:
                refused.pop(int(ev["intent"]), None)
        elif typ == EventType.INTENT_ENDED:
            intents_ended[int(ev["intent"])] = int(ev["seq"])
        elif typ == EventType.DATA_ROLLED_BACK:
            rollbacks.append(int(ev["seq"]))
        elif typ == EventType.CRASH_PLAN:
            plan = PlanSeen(
                planned=[
                    (str(p["path"]), list(p.get("labels") or []), [str(n) for n in p.get("same") or ()])
                    for p in ev.get("planned") or ()
                ],
                points=int(ev.get("points") or 0),
                ran_out=ev.get("ran_out") is True,
                clean_intent=int(ev.get("clean_intent") or 0),
            )
        elif typ == EventType.RUN_ENDED:
            status, reason = str(ev.get("status")), ev.get("reason")
        elif typ == EventType.SERVICE_STARTED and ev.get("service") == "file_tracer" and not ev.get("traced"):
            untraced = str(ev.get("reason") or "ptrace refused")
    labels = {name: labelled for name, labelled, _ in plan.planned} if plan is not None else {}
    for one in tries.values():
        one.path = labelled(one.path, labels.get(one.path_name))
        one.why = _unproven(
            one, kills, started, ended, intents_ended.get(one.intent), rollbacks, refused.get(one.intent)
        )
    clean = plan.clean_intent if plan is not None else 0
    return Evidence(tries, plan, dict(unheld.get(clean, {})), status, reason, clean, untraced)


def _unproven(
    one: Try,
    kills: list[tuple[int, str, int]],
    started: Mapping[tuple[int, int], int],
    ended: Mapping[tuple[int, int], tuple[int, str]],
    over: int | None,
    rollbacks: list[int],
    refusal: str | None = None,
) -> str | None:
    """Why the try's history does not prove its crash, or None when it does (``over``: the seq of the
    try's end, None if it never ended; ``rollbacks``: the seqs of the power losses' rollbacks;
    ``refusal``: the tool error the try's intent was last answered with, if it was)."""
    if over is None:
        return "the run stopped before the try ended"
    if one.overlapped is not None:
        return (
            f"attempt {one.overlapped} began while an earlier one was still running on the server: "
            "what committed may have been either's"
        )
    for at, planned in enumerate(one.path):
        if at >= len(one.held):
            what = f" ({planned.label})" if planned.label else ""
            if refusal is not None:
                # A store an earlier crash left unusable (a stale lock file, a half-made record) refuses
                # every call at its first step: not another path, and worth reading.
                return (
                    f"never reached {planned.name}{what}: the server refused the call "
                    f"({excerpt(refusal, 120)!r}); an earlier crash may have left the store unable to "
                    "take it"
                )
            return f"never reached {planned.name}{what} (the call took another path)"
        held = one.held[at]
        if held.point.kind is not planned.kind or held.point.crash is not planned.crash:
            return f"held at {held.point.name}, not at {planned.name}"
        end = ended.get((one.intent, held.attempt))
        if end is None:
            return f"attempt {held.attempt}, held at {held.point.name}, never ended"
        start = started.get((one.intent, held.attempt), -1)
        # The kill is recorded as it is made, so just before the hold's own event (held: it succeeded).
        found = next(
            ((seq, n) for seq, point, n in kills if start < seq < end[0] and point == held.point.name), None
        )
        if found is None:
            return f"no kill while attempt {held.attempt} was held at {held.point.name}"
        kill, number = found
        one.kills.append(number)
        if planned.crash is Crash.POWER_LOSS and not any(kill < seq < over for seq in rollbacks):
            return f"no rollback of the data directory after the power loss at {held.point.name}"
        if end[1] not in WITHHELD:
            return (
                f"the client got an answer though attempt {held.attempt} was held at {held.point.name} "
                f"(it ended {end[1]}): the hold leaked"
            )
    return None


def clean_call(windows: Mapping[int, list[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """The clean call's points: those of intent 0's attempt that got the server's own answer (its last
    point ``response`` and no ``answer`` saying it was none); empty if none did."""
    for events in windows.values():
        if events and events[-1]["point"] == "response" and "answer" not in events[-1]:
            return events
    return []


def clean_points(events: Iterable[Mapping[str, Any]]) -> tuple[Point, ...]:
    return tuple(_point(ev) for ev in events)
