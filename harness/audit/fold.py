"""The fold: one pass over a history, into one row per intent and the run's fault record.

The fold keeps only what is needed per intent (counters in lists) and per
in-flight attempt; memory does not grow with the number of attempts. It is also
where the history is checked the way Jepsen checks one: an attempt that ends
without having started is an error.

Attribution: an attempt was *hit by a pod fault* when the pod died, or was
frozen or thawed (a pause), while it was in flight. For a kill this is exact:
the injector records the ``fault`` event before any attempt the kill breaks can
end, so every such attempt starts before and ends after that event. A pod that
dies by itself (a crash, a failpoint) has no such event; its ``pod_exited`` is
recorded only once the supervisor reaps it, after the broken attempts have
already ended. So an attempt that ended by its connection closing at most
``CRASH_WINDOW_S`` before an unannounced ``pod_exited`` is counted as hit by
that crash. A pause disrupts twice: when the pod freezes and when it thaws.

Faults of the fault proxy name the request id they hit, so they are pinned on
their intent exactly. Every intent carries the set of faults that hit any of
its attempts (``faults`` in intents.csv). A ``sever_response`` cut before the
server had sent its whole response is labelled ``sever_mid_stream``: the
handler was still running (in SSE mode it was cancelled), so what it left
behind is a different finding.
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from harness.audit.verdicts import STATUS_BY_NAME, ClientStatus
from harness.errors import HistoryError
from harness.history import CONNECTION_CLOSED, POD_FAULTS, EventType, FaultKind, Outcome

CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""
MAX_MESSAGES = 100
"""Distinct error messages kept per outcome; the rest are counted together."""
OTHER_MESSAGES = "(other messages)"
_VARIABLE = re.compile(r"[0-9a-fA-F]{8,}|\d+")


def message_shape(message: str) -> str:
    """An error message with its variable parts (numbers, ids, keys) blanked, to count alike ones together."""
    return _VARIABLE.sub("#", message)


@dataclass(frozen=True, slots=True)
class MissedFault:
    kind: str
    trigger: str
    reason: str


@dataclass
class ErrorTally:
    """How often one kind of error message was seen, with the first one verbatim."""

    outcome: str
    code: str | None
    example: str
    count: int = 0


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


def _millis(seconds: list[float]) -> pd.api.extensions.ExtensionArray:
    return pd.array(np.round(np.array(seconds, dtype=np.float64) * 1000), dtype="Int64")


OUTCOMES = tuple(o.value for o in Outcome)


class _Columns:
    """Per-intent counters as plain lists (indexing a list is far cheaper than a numpy scalar)."""

    def __init__(self) -> None:
        self.size = 0
        self.markers: list[str | None] = []
        self.keys: list[str | None] = []
        self.status: list[int] = []
        self.attempts: list[int] = []
        self.outcomes: dict[str, list[int]] = {name: [] for name in OUTCOMES}
        self.hit: list[int] = []
        self.first_t: list[float] = []
        self.last_t: list[float] = []
        self.faults: dict[int, set[str]] = {}
        """Sparse: intent -> kinds of the faults that hit its attempts (most intents have none)."""
        self.pods: dict[int, list[str]] = {}
        """With replicas: intent -> the pods its attempts went to, in order, each once."""

    def grow(self, n: int) -> None:
        if n <= self.size:
            return
        extra = n - self.size
        for column in (self.markers, self.keys):
            column.extend([None] * extra)
        for counts in (self.status, self.attempts, self.hit, *self.outcomes.values()):
            counts.extend([0] * extra)
        self.first_t.extend([math.nan] * extra)
        self.last_t.extend([math.nan] * extra)
        self.size = n

    def _fault_column(self) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, kinds in self.faults.items():
            column[i] = ";".join(sorted(kinds))
        return column

    def _pod_columns(self) -> dict[str, Any]:
        """``first_pod`` and ``pods`` (every replica an intent's attempts went to), with replicas only."""
        if not self.pods:
            return {}
        first = np.full(self.size, "", dtype=object)
        every = np.full(self.size, "", dtype=object)
        for i, pods in self.pods.items():
            first[i] = pods[0]
            every[i] = ";".join(pods)
        return {"first_pod": first, "pods": every}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "intent": np.arange(self.size, dtype=np.int64),
                "marker": self.markers,
                "key": self.keys,
                "client_status": np.array(self.status, dtype=np.int8),
                "attempts": np.array(self.attempts, dtype=np.int32),
                **{f"n_{name}": np.array(c, dtype=np.int32) for name, c in self.outcomes.items()},
                "attempts_hit_by_pod_fault": np.array(self.hit, dtype=np.int32),
                "faults": self._fault_column(),
                # Whole milliseconds since the run started (formatting floats is a third of a
                # million-row intents.csv); nullable, as an attempt may never have ended.
                "first_attempt_ms": _millis(self.first_t),
                "last_end_ms": _millis(self.last_t),
                **self._pod_columns(),
            }
        )


def _tally_error(fold: Fold, ev: Mapping[str, Any], outcome: str) -> None:
    message = ev.get("message")
    if message is None:
        return
    code = ev.get("code")
    code = None if code is None else str(code)
    key = (outcome, code, message_shape(str(message)))
    tally = fold.errors.get(key)
    if tally is None:
        if sum(1 for k in fold.errors if k[0] == outcome) >= MAX_MESSAGES:
            key = (outcome, None, OTHER_MESSAGES)
            tally = fold.errors.setdefault(key, ErrorTally(outcome, None, OTHER_MESSAGES))
        else:
            tally = fold.errors[key] = ErrorTally(outcome, code, str(message))
    tally.count += 1


MAX_UNPLANNED_INTENTS = 10_000_000
"""Intents a history without a ``run_started`` may index (one that has one may index only its plan)."""


def _make_room(cols: _Columns, fold: Fold, ev: Mapping[str, Any]) -> None:
    """Grow the columns for an intent index beyond them, or a HistoryError if no run had that intent."""
    i = ev["intent"]
    planned = fold.run.get("intents")
    limit = planned if type(planned) is int and planned > 0 else MAX_UNPLANNED_INTENTS
    if type(i) is not int or not 0 <= i < limit:
        raise HistoryError(
            f"history event seq {ev.get('seq')}: intent {i!r} is not one of the run's "
            f"{limit:,} intents (0 to {limit - 1:,}); the history is damaged"
        )
    cols.grow(max(i + 1, min(cols.size * 2, limit)))


def fold_history(batches: Iterable[Sequence[Mapping[str, Any]]]) -> Fold:
    """One pass over the events; returns per-intent columns (index = intent index).

    The loop is the audit's hot path (four events per intent), hence the local
    names and the most frequent event types first.
    """
    fold = Fold()
    cols = _Columns()
    status, attempts, hit, first_t, last_t = cols.status, cols.attempts, cols.hit, cols.first_t, cols.last_t
    markers, keys, outcomes = cols.markers, cols.keys, cols.outcomes
    protocol_errors = outcomes[Outcome.PROTOCOL_ERROR.value]
    in_progress, not_started = int(ClientStatus.IN_PROGRESS), int(ClientStatus.NOT_STARTED)
    status_codes = {name: int(code) for name, code in STATUS_BY_NAME.items()}
    # request id -> (intent, disruptions seen at start, start t, pod): of the attempt's pod when the
    # history names it (replicas), else of all pods.
    pending: dict[int, tuple[int, int, float, str | None]] = {}
    recent: deque[tuple[float, float, int, str | None]] = (
        deque()
    )  # connection-closed attempts: (end t, start t, intent, pod)
    pod_kinds: dict[str, list[str]] = {}  # with replicas: pod -> kinds of its disruptions so far
    intent_pods = cols.pods
    # Pods killed whose exit has not been recorded yet -> the kind of a graceful stop (its
    # disruption is the exit: what drained before it was not broken), or None after a SIGKILL.
    killed_pods: dict[str, str | None] = {}
    faults = cols.faults
    death_kinds: list[str] = []  # "kill", "crash" or "pause", one per pod disruption so far
    deaths = exits = crashes = 0
    t = 0.0
    closed = {d.value for d in CONNECTION_CLOSED}
    ok = Outcome.OK.value
    pod_fault_kinds = {k.value for k in POD_FAULTS}
    kill, crash, pause = FaultKind.KILL.value, FaultKind.CRASH.value, FaultKind.PAUSE.value
    rollout = FaultKind.ROLLOUT.value
    # Locals, not module globals, for the comparisons made per event.
    attempt_started, attempt_ended, intent_started, intent_ended = (
        EventType.ATTEMPT_STARTED.value,
        EventType.ATTEMPT_ENDED.value,
        EventType.INTENT_STARTED.value,
        EventType.INTENT_ENDED.value,
    )

    try:
        for batch in batches:
            for ev in batch:
                typ = ev["type"]
                if typ == attempt_started:
                    i = ev["intent"]
                    if not 0 <= i < cols.size:
                        _make_room(cols, fold, ev)
                    t = ev["t"]
                    pod = ev.get("pod")
                    if pod is None:
                        pending[ev["id"]] = (i, deaths, t, None)
                    else:
                        pending[ev["id"]] = (i, len(pod_kinds.setdefault(pod, [])), t, pod)
                        seen = intent_pods.setdefault(i, [])
                        if pod not in seen:
                            seen.append(pod)
                    attempts[i] += 1
                    if attempts[i] == 1:
                        first_t[i] = t
                elif typ == attempt_ended:
                    started = pending.pop(ev["id"], None)
                    if started is None:
                        raise HistoryError(
                            f"history event seq {ev.get('seq')}: attempt_ended for request id {ev['id']} "
                            "without its attempt_started"
                        )
                    i = started[0]
                    t = ev["t"]
                    outcome = ev["outcome"]
                    outcomes.get(outcome, protocol_errors)[i] += 1
                    if outcome != ok:
                        _tally_error(fold, ev, outcome)
                    if "resumed" in ev:
                        fold.resumed[ev["resumed"]] += 1
                    kinds = death_kinds if started[3] is None else pod_kinds[started[3]]
                    if len(kinds) > started[1]:
                        hit[i] += 1
                        faults.setdefault(i, set()).update(kinds[started[1] :])
                    elif ev.get("detail") in closed:
                        recent.append((t, started[2], i, started[3]))
                        while recent and recent[0][0] < t - CRASH_WINDOW_S:
                            recent.popleft()
                    last_t[i] = t
                elif typ == intent_started:
                    i = ev["intent"]
                    if not 0 <= i < cols.size:
                        _make_room(cols, fold, ev)
                    markers[i] = ev["marker"]
                    keys[i] = ev["key"]
                    status[i] = in_progress
                elif typ == intent_ended:
                    i = ev["intent"]
                    if not 0 <= i < cols.size or status[i] == not_started:
                        raise HistoryError(
                            f"history event seq {ev.get('seq')}: intent_ended for intent {i} "
                            "without its intent_started"
                        )
                    status[i] = status_codes.get(ev["status"], int(ClientStatus.GAVE_UP))
                elif typ == EventType.POD_EXITED:
                    t = ev["t"]
                    fold.pod_events.append((t, "pod_exited"))
                    exits += 1
                    pod = ev.get("pod", "")
                    if pod in killed_pods:
                        graceful = killed_pods.pop(pod)
                        if graceful is not None:
                            deaths += 1
                            death_kinds.append(graceful)
                            pod_kinds.setdefault(pod, []).append(graceful)
                    else:
                        crashes += 1
                        deaths += 1
                        death_kinds.append(crash)
                        pod_kinds.setdefault(pod, []).append(crash)
                        others: deque[tuple[float, float, int, str | None]] = deque()
                        while recent:
                            end_t, start_t, j, on = recent.popleft()
                            if on is not None and on != pod:
                                others.append((end_t, start_t, j, on))  # another replica's
                            elif end_t >= t - CRASH_WINDOW_S and start_t <= t:
                                hit[j] += 1
                                faults.setdefault(j, set()).add(crash)
                        recent = others
                elif typ == EventType.POD_RESUMED:
                    deaths += 1
                    death_kinds.append(pause)
                    pod_kinds.setdefault(ev.get("pod", ""), []).append(pause)
                elif typ == EventType.POD_STARTED:
                    killed_pods.pop(ev.get("pod", ""), None)
                elif typ == EventType.POD_READY:
                    fold.protocol = ev.get("protocol", fold.protocol)
                    fold.pod_events.append((ev["t"], "pod_ready"))
                elif typ == EventType.SESSION_OPENED:
                    fold.sessions_opened += 1
                elif typ == EventType.SESSION_LOST:
                    fold.sessions_lost[death_kinds[-1] if death_kinds else "none"] += 1
                elif typ == EventType.FAULT:
                    kind = ev["fault"]
                    fold.pod_events.append((ev["t"], kind))
                    if kind in pod_fault_kinds and ev.get("counted") is False:
                        fold.faults_planned[kind] += 1  # a timed fault that came due
                    if "in_flight" in ev:
                        fold.paced.append((ev.get("held_s"), ev["in_flight"]))
                    if kind in (kill, rollout):
                        pod = ev.get("pod", "")
                        if "signal" in ev:  # a graceful stop: the pod may finish what it has
                            killed_pods[pod] = kind
                        else:
                            deaths += 1
                            death_kinds.append(kind)
                            pod_kinds.setdefault(pod, []).append(kind)
                            killed_pods[pod] = None
                    elif kind == pause:
                        # Attempts in flight when the pod froze; those sent while it was frozen are
                        # caught by the second disruption, when it thaws (pod_resumed).
                        deaths += 1
                        death_kinds.append(pause)
                        pod_kinds.setdefault(ev.get("pod", ""), []).append(pause)
                    elif "id" in ev:
                        if kind == FaultKind.SEVER_RESPONSE and ev.get("server_done") is False:
                            kind = FaultKind.SEVER_MID_STREAM.value
                        if "rule" in ev:
                            fold.rule_hits[ev["rule"]] += 1
                        # A proxy fault names the request it hit; the attempt is in flight
                        # (the proxy records a fault before it acts).
                        target = pending.get(ev["id"])
                        if target is not None:
                            faults.setdefault(target[0], set()).add(kind)
                    fold.faults[kind] += 1
                elif typ == EventType.BALANCER_RETRY:
                    i = ev["intent"]
                    if 0 <= i < cols.size:
                        faults.setdefault(i, set()).add(FaultKind.BALANCER_RETRY.value)
                    fold.faults[FaultKind.BALANCER_RETRY.value] += 1
                elif typ == EventType.FAULT_MISSED:
                    fold.missed.append(MissedFault(ev["fault"], ev.get("trigger", ""), ev.get("reason", "")))
                    if ev.get("counted") is False:
                        fold.faults_planned[ev["fault"]] += 1
                elif typ == EventType.EFFECTS_COLLECTED:
                    fold.collect_error = ev.get("error")
                elif typ == EventType.RUN_STARTED:
                    fold.run = dict(ev)
                    cols.grow(int(ev.get("intents", 0)))
                    fold.faults_planned.update(ev.get("faults_planned") or {})
                elif typ == EventType.RUN_ENDED:
                    fold.ended = dict(ev)
                    t = ev["t"]
    except (KeyError, TypeError, AttributeError) as exc:
        # Not an event object, or one missing a field its type needs: not a history this harness wrote.
        raise HistoryError(f"malformed history event ({type(exc).__name__}: {exc})") from None

    fold.pod_exits = exits
    fold.crashes = crashes
    fold.duration_s = float(t)
    fold.open_attempts = len(pending)
    fold.intents = cols.frame()
    return fold
