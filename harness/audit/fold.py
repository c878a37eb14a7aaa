"""The fold: one pass over a history, into one row per intent and the run's fault record.

The pass is the fusion of small accumulators (``harness.audit.accumulators``),
one per concern, as Jepsen composes its checkers:

- ``Intents``: every intent's row (attempts, outcomes, hits, faults, pods, times)
  and every attempt in flight;
- ``PodDisruptions``: which attempts a kill, crash, pause, graceful stop or
  rollout broke, per replica when the history names the attempt's pod;
- ``StreamFaults``: faults that name their request (the fault proxy's, the
  balancer's re-sends), pinned on that intent exactly;
- ``FaultPlan``: planned vs injected faults, and the missed ones;
- ``Sessions``, ``ErrorTallies``, ``FailureReplies`` (ok replies that read as
  failures), ``CheckpointReads`` (reads of the effect source during the run),
  ``PodTimeline`` (what report.html draws) and ``RunBounds`` (start, end,
  duration, the final read's error).

The four per-intent events are nearly all of a history (four or five lines per
intent) and this loop is the audit's hot path, so they are folded inline below
on the state of ``Intents`` and ``PodDisruptions``, with one call to an
accumulator only on a rare branch; every other event is dispatched by type to
the handlers of the accumulators that read it. The fold also checks the
history the way Jepsen checks one: an attempt that ends without having started
is an error. Memory grows with intents (a few counters each), not attempts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.audit.accumulators import (
    CRASH_WINDOW_S,
    Accumulator,
    CheckpointRead,
    CheckpointReads,
    ErrorTallies,
    ErrorTally,
    FailureReplies,
    FaultPlan,
    Handler,
    Intents,
    MissedFault,
    PodDisruptions,
    PodFault,
    PodTimeline,
    RunBounds,
    Sessions,
    StreamFaults,
    Unavailability,
    Unavailable,
    dispatch,
)
from harness.audit.verdicts import STATUS_BY_NAME, ClientStatus
from harness.errors import HistoryError
from harness.history import CODE_LIMIT, CONNECTION_CLOSED, EventType, Outcome, excerpt

MALFORMED = (KeyError, TypeError, AttributeError, ValueError, OverflowError)
"""What reading an event that is not an event object, or lacks a field its type needs, raises: the
history is damaged (any other exception is a bug of the fold)."""

__all__ = [
    "CRASH_WINDOW_S",
    "CheckpointRead",
    "ErrorTally",
    "Fold",
    "MissedFault",
    "PodFault",
    "fold_history",
]


@dataclass
class Fold:
    """What one pass over a history yields, before effects are joined."""

    run: dict[str, Any] = field(default_factory=dict)
    ended: dict[str, Any] | None = None
    intents: pd.DataFrame = field(default_factory=pd.DataFrame)
    faults: Counter[str] = field(default_factory=Counter)
    """Fault events by kind (what was injected); sever_response split by whether the server had
    finished (sever_response) or not (sever_mid_stream)."""
    faults_planned: Counter[str] = field(default_factory=Counter)
    """Pod faults planned: the counted ones from run_started, plus timed ones that came due."""
    missed: list[MissedFault] = field(default_factory=list)
    unfinished: list[MissedFault] = field(default_factory=list)
    """Pod faults begun that did not finish (``fault_unfinished``), not counted in ``faults``."""
    paced: list[tuple[float | None, int]] = field(default_factory=list)
    """(held_s or None, attempts in flight) of each pod fault event that says how it was paced."""
    rule_hits: Counter[int] = field(default_factory=Counter)
    """Stream fault events per rule index of the scenario."""
    pod_exits: int = 0
    crashes: int = 0
    """Pod exits that no kill explains: the target died by itself."""
    protocol: str | None = None
    """The protocol the pod answered in (from pod_ready), or None in histories without it."""
    resumed: Counter[bool] = field(default_factory=Counter)
    """Broken event streams a 2025 client tried to resume: True resumed, False failed (re-issued)."""
    sessions_opened: int = 0
    sessions_lost: Counter[str] = field(default_factory=Counter)
    """2025 sessions the server forgot, by the pod fault (kill, crash, pause) last before the loss."""
    errors: dict[tuple[str, str | None, str], ErrorTally] = field(default_factory=dict)
    """(outcome, code, message shape) -> tally, for attempts that ended with an error message."""
    collect_error: str | None = None
    """Why the final read of a live effect source failed, if it did (effects_collected)."""
    duration_s: float = 0.0
    open_attempts: int = 0
    pod_events: list[tuple[float, str]] = field(default_factory=list)
    """(t, what) of every pod fault (its kind) and pod exit and readiness, in order: the timeline
    that report.html draws (a few per run, so collecting them costs the fold nothing)."""
    pod_faults: list[PodFault] = field(default_factory=list)
    """Every kill, rollout step and crash that took a pod down, in order, with its seq and the pod's
    start it ended: what vanished effects are blamed on, and where the pod log tells of it."""
    checkpoints: list[CheckpointRead] = field(default_factory=list)
    """Reads of the effect source during the run (``effects_checkpoint``), in order."""
    failure_replies: dict[str, ErrorTally] = field(default_factory=dict)
    """Reply shape -> tally, of ok replies whose text reads as a failure."""
    unavailable: list[Unavailable] = field(default_factory=list)
    """Pods that came back from a fault and answered no call (``pod_unavailable``): the run stopped."""


class Record:
    """The accumulators of the run's record (all but the intents' rows), which both folds share: the
    Python fold here, the columnar one (:mod:`harness.audit.columnar`) for what is not per intent."""

    def __init__(self, intents: Intents, disruptions: PodDisruptions) -> None:
        self.disruptions = disruptions
        self.plan = FaultPlan()
        self.sessions = Sessions(disruptions)
        self.errors = ErrorTallies()
        self.timeline = PodTimeline()
        self.bounds = RunBounds()
        self.failing = FailureReplies(intents)
        self.checkpoints = CheckpointReads()
        self.unavailability = Unavailability()

    def handlers(
        self, *, first: tuple[Accumulator, ...] = (), after_disruptions: tuple[Accumulator, ...] = ()
    ) -> dict[str, tuple[Handler, ...]]:
        """Event type -> the handlers that read it, in the order they run (run_started: the run,
        then its size): ``first`` after the run's bounds, ``after_disruptions`` after those."""
        return dispatch(
            (
                self.bounds,
                *first,
                self.plan,
                self.timeline,
                self.disruptions,
                *after_disruptions,
                self.sessions,
                self.errors,
                self.failing,
                self.checkpoints,
                self.unavailability,
            )
        )

    def fold(
        self, intents: pd.DataFrame, *, rule_hits: Counter[int], last_t: float, open_attempts: int
    ) -> Fold:
        """The run's record, with ``intents`` as its rows."""
        return Fold(
            run=self.bounds.run,
            ended=self.bounds.ended,
            intents=intents,
            faults=self.plan.injected,
            faults_planned=self.plan.planned,
            missed=self.plan.missed,
            unfinished=self.plan.unfinished,
            paced=self.plan.paced,
            rule_hits=rule_hits,
            pod_exits=self.disruptions.exits,
            crashes=self.disruptions.crashes,
            protocol=self.timeline.protocol,
            resumed=self.sessions.resumed,
            sessions_opened=self.sessions.opened,
            sessions_lost=self.sessions.lost,
            errors=self.errors.tallies,
            collect_error=self.bounds.collect_error,
            duration_s=self.bounds.duration_s(last_t),
            open_attempts=open_attempts,
            pod_events=self.timeline.events,
            pod_faults=self.disruptions.downs,
            checkpoints=self.checkpoints.reads,
            failure_replies=self.failing.tallies,
            unavailable=self.unavailability.found,
        )


TIMES = (float, int)
"""What an event's ``t`` may be (orjson reads ``1`` as an int)."""


class _Damaged(Exception):
    """An event the fold cannot take; turned into a HistoryError that names its line."""


def fold_history(batches: Iterable[Sequence[Mapping[str, Any]]], source: str = "history") -> Fold:
    """One pass over the events; returns per-intent columns (index = intent index).

    ``batches`` are the history's lines in order, one item per line (as
    :func:`~harness.history.read_batches` reads them); ``source`` names the file in errors.
    """
    intents = Intents()
    disruptions = PodDisruptions(intents)
    streams = StreamFaults(intents)
    record = Record(intents, disruptions)
    others = record.handlers(first=(intents,), after_disruptions=(streams,))
    sessions, errors, failing = record.sessions, record.errors, record.failing

    # Local names for everything the hot path touches (a local is far cheaper than an attribute).
    status, attempts, first_t, last_t = intents.status, intents.attempts, intents.first_t, intents.last_t
    markers, keys, outcomes, pending = intents.markers, intents.keys, intents.outcomes, intents.pending
    intent_pods, make_room, hit = intents.pods, intents.make_room, intents.hit
    replies, codes, failure_reply, traces = intents.replies, intents.codes, failing.reply, intents.traces
    all_kinds, pod_kinds, closed_attempt = disruptions.kinds, disruptions.by_pod, disruptions.closed
    tally, resumed = errors.tally, sessions.attempt_resumed
    in_progress, not_started = int(ClientStatus.IN_PROGRESS), int(ClientStatus.NOT_STARTED)
    status_codes = {name: int(code) for name, code in STATUS_BY_NAME.items()}
    gave_up = int(ClientStatus.GAVE_UP)
    closed = {d.value for d in CONNECTION_CLOSED}
    ok = Outcome.OK.value
    attempt_started, attempt_ended, intent_started, intent_ended = (
        EventType.ATTEMPT_STARTED.value,
        EventType.ATTEMPT_ENDED.value,
        EventType.INTENT_STARTED.value,
        EventType.INTENT_ENDED.value,
    )
    t = 0.0
    line = 1
    """The line of the current batch's first event."""
    batch: Sequence[Mapping[str, Any]] = ()
    ev: Mapping[str, Any] | None = None

    try:
        for batch in batches:
            for ev in batch:
                typ = ev["type"]
                if typ == attempt_started:
                    i = ev["intent"]
                    if not 0 <= i < intents.size:
                        make_room(ev)
                    t = ev["t"]
                    if t.__class__ not in TIMES:
                        raise _Damaged(f"t {t!r:.40} is not a time in seconds")
                    pod = ev.get("pod")
                    if pod is None:
                        pending[ev["id"]] = (i, len(all_kinds), t, None)
                    else:  # replicas: the attempt watches its own pod's disruptions
                        pending[ev["id"]] = (i, len(pod_kinds.setdefault(pod, [])), t, pod)
                        seen = intent_pods.setdefault(i, [])
                        if pod not in seen:
                            seen.append(pod)
                    n = attempts[i] + 1
                    attempts[i] = n
                    if n == 1:
                        first_t[i] = t
                        if "trace_id" in ev:
                            traces[i] = ev["trace_id"]
                elif typ == attempt_ended:
                    started = pending.pop(ev["id"], None)
                    if started is None:
                        raise HistoryError(
                            f"attempt_ended for request id {ev['id']!r:.40} without its attempt_started"
                        )
                    i = started[0]
                    t = ev["t"]
                    if t.__class__ not in TIMES:
                        raise _Damaged(f"t {t!r:.40} is not a time in seconds")
                    outcome = ev["outcome"]
                    counts = outcomes.get(outcome)
                    if counts is None:
                        raise _Damaged(f"outcome {outcome!r:.40} is not one of {', '.join(outcomes)}")
                    counts[i] += 1
                    if outcome != ok:
                        tally(ev, outcome)
                        if "code" in ev:
                            codes[i] = excerpt(str(ev["code"]), CODE_LIMIT)
                    elif "reply" in ev:
                        replies[i] = ev["reply"]
                        if ev.get("reads_as_failure"):
                            failure_reply(ev, i)
                    if "resumed" in ev:
                        resumed(ev)
                    kinds = all_kinds if started[3] is None else pod_kinds[started[3]]
                    if len(kinds) > started[1]:
                        hit(i, kinds[started[1] :])
                    elif ev.get("detail") in closed:
                        closed_attempt(t, started[2], i, started[3])
                    last_t[i] = t
                elif typ == intent_started:
                    i = ev["intent"]
                    if not 0 <= i < intents.size:
                        make_room(ev)
                    markers[i] = ev["marker"]
                    keys[i] = ev["key"]
                    status[i] = in_progress
                elif typ == intent_ended:
                    i = ev["intent"]
                    if not 0 <= i < intents.size or status[i] == not_started:
                        raise HistoryError(f"intent_ended for intent {i!r:.40} without its intent_started")
                    status[i] = status_codes.get(ev["status"], gave_up)
                else:
                    when = ev.get("t")
                    if when.__class__ not in TIMES:
                        raise _Damaged(f"t {when!r:.40} is not a time in seconds")
                    for handle in others.get(typ, ()):
                        handle(ev)
            line += len(batch)
            ev = None  # between batches: an error now is the reader's, which names its line
    except _Damaged as exc:
        raise HistoryError(f"{_where(source, line, batch, ev)}: {exc}; the history is damaged") from None
    except HistoryError as exc:
        if ev is None:
            raise
        raise HistoryError(f"{_where(source, line, batch, ev)}: {exc.message}") from None
    except MALFORMED as exc:
        # Not an event object, or one missing a field its type needs: not a history this harness wrote.
        raise HistoryError(
            f"{_where(source, line, batch, ev)}: malformed history event ({type(exc).__name__}: {exc})"
        ) from None

    return record.fold(intents.frame(), rule_hits=streams.rule_hits, last_t=t, open_attempts=len(pending))


def _where(source: str, line: int, batch: Sequence[Mapping[str, Any]], ev: Mapping[str, Any] | None) -> str:
    """``FILE:LINE`` of the event the fold stopped at (found by identity: only on the error path)."""
    for offset, item in enumerate(batch):
        if item is ev:
            return f"{source}:{line + offset}"
    return source
