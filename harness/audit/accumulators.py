"""The fold's accumulators: one concern of the history each, composed into one pass by the fold.

As Jepsen composes checkers, each accumulator owns a few fields of
:class:`~harness.audit.fold.Fold` and reads only the events it needs, named in
its ``handlers()``. They do not call each other, except where one concern is
defined by another's state: a pod fault hits an intent (``PodDisruptions``
writes into ``Intents``), a proxy fault is pinned on the attempt in flight
(``StreamFaults`` reads ``Intents``), and a lost session is blamed on the last
disruption (``Sessions`` reads ``PodDisruptions``).

The four per-intent events (``intent_started``, ``attempt_started``,
``attempt_ended``, ``intent_ended``) are nearly every line of a history; the
fold handles them inline on the state of ``Intents`` and ``PodDisruptions``
instead of dispatching them, and calls an accumulator here only on their rare
branches (an error message, a resumed stream, a hit, a closed connection).
Every other event type reaches the handlers of the accumulators that name it,
in the order the fold lists them (checkpoint reads of the effect source, for
one, are ``Checkpoints``). A new concern is a new class here with its
handlers and its fields in ``Fold``; the fold's hot path does not change.
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from harness.errors import HistoryError
from harness.history import OUTCOMES, POD_FAULTS, EventType, FaultKind, Outcome, SeenEffects

CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""
MAX_MESSAGES = 100
"""Distinct error messages kept per outcome; the rest are counted together."""
OTHER_MESSAGES = "(other messages)"
MAX_UNPLANNED_INTENTS = 10_000_000
"""Intents a history without a ``run_started`` may index (one that has one may index only its plan)."""
POD_FAULT_KINDS = frozenset(k.value for k in POD_FAULTS)

Event = Mapping[str, Any]
Handler = Callable[[Event], None]

_VARIABLE = re.compile(r"[0-9a-fA-F]{8,}|\d+")


class Accumulator(Protocol):
    def handlers(self) -> Mapping[str, Handler]:
        """Event type -> what to do with one, for the event types this accumulator reads."""
        ...


def dispatch(accumulators: Iterable[Accumulator]) -> dict[str, tuple[Handler, ...]]:
    """Event type -> the handlers of every accumulator that reads it, in the accumulators' order."""
    table: dict[str, list[Handler]] = {}
    for accumulator in accumulators:
        for event_type, handler in accumulator.handlers().items():
            table.setdefault(str(event_type), []).append(handler)
    return {event_type: tuple(handlers) for event_type, handlers in table.items()}


def fault_label(ev: Event) -> str:
    """The kind a fault event is counted and blamed as.

    A ``sever_response`` the proxy cut before the server had sent its whole
    response is ``sever_mid_stream``: the handler was still running (in SSE mode
    it was cancelled), so what it left behind is a different finding.
    """
    kind: str = ev["fault"]
    if kind == FaultKind.SEVER_RESPONSE and "id" in ev and ev.get("server_done") is False:
        return FaultKind.SEVER_MID_STREAM.value
    return kind


def _millis(seconds: list[float]) -> pd.api.extensions.ExtensionArray:
    return pd.array(np.round(np.array(seconds, dtype=np.float64) * 1000), dtype="Int64")


NULLABLE_INTS = ("first_attempt_ms", "last_end_ms")
"""Integer columns of the intents that may be null: pandas' Int64 in :meth:`Intents.frame`."""


def frame_of(table: pa.Table) -> pd.DataFrame:
    """An Arrow table of intents (judged or not) as a pandas frame with :meth:`Intents.frame`'s types."""
    frame: pd.DataFrame = table.to_pandas()
    for name in NULLABLE_INTS:
        if name in frame.columns:
            frame[name] = frame[name].astype("Int64")  # from float64 with NaN where null
    return frame


class Intents:
    """Every intent's row and every attempt in flight: fills ``Fold.intents`` and ``Fold.open_attempts``.

    Per-intent counters are plain lists indexed by intent (indexing a list is far
    cheaper than a numpy scalar), sized to the run's plan from ``run_started``
    and grown when an older history has none. The fold updates them inline for
    the four per-intent events; other accumulators write a row only through
    :meth:`hit` and :meth:`add_fault`, and find an attempt's intent through
    :meth:`intent_of`.

    All the audit's per-intent and per-attempt state is here, so an audit whose
    memory is bounded by the intents in flight changes this class: a row is
    final once its intent has ended and no attempt of it is in flight, except
    for two writers that come later. A crash is blamed on attempts that ended up
    to ``CRASH_WINDOW_S`` before its ``pod_exited``, and ``balancer_retry`` is
    recorded after the run (read from the balancer's log).
    """

    def __init__(self) -> None:
        self.size = 0
        self.planned: object = None
        """``intents`` of ``run_started``: indices at or past it are a damaged history."""
        self.markers: list[str | None] = []
        self.keys: list[str | None] = []
        self.status: list[int] = []
        self.attempts: list[int] = []
        self.outcomes: dict[str, list[int]] = {name: [] for name in OUTCOMES}
        self.hits: list[int] = []
        self.first_t: list[float] = []
        self.last_t: list[float] = []
        self.faults: dict[int, set[str]] = {}
        """Sparse: intent -> kinds of the faults that hit its attempts (most intents have none)."""
        self.pods: dict[int, list[str]] = {}
        """With replicas: intent -> the pods its attempts went to, in order, each once."""
        self.replies: list[str] = []
        """Each intent's last ok reply, excerpted (``reply`` of attempt_ended), when the history has it."""
        self.codes: dict[int, str] = {}
        """Sparse: intent -> the code of its last failed attempt that carried one."""
        self.traces: dict[int, str] = {}
        """Intent -> its trace id (``trace_id`` of its first attempt), in runs with ``client.trace``."""
        self.failure_replies: set[int] = set()
        """Intents with an ok reply whose text reads as a failure (``reads_as_failure``)."""
        self.pending: dict[int, tuple[int, int, float, str | None]] = {}
        """Request id -> (intent, disruptions seen at its start, start t, pod) of each attempt in
        flight. The disruptions are those of the attempt's pod when the history names it
        (replicas), else of all pods (see PodDisruptions)."""

    def handlers(self) -> Mapping[str, Handler]:
        return {EventType.RUN_STARTED: self.plan}

    def plan(self, ev: Event) -> None:
        self.planned = ev.get("intents")
        self.grow(int(ev.get("intents", 0)))

    def grow(self, n: int) -> None:
        if n <= self.size:
            return
        extra = n - self.size
        for column in (self.markers, self.keys):
            column.extend([None] * extra)
        self.replies.extend([""] * extra)
        for counts in (self.status, self.attempts, self.hits, *self.outcomes.values()):
            counts.extend([0] * extra)
        self.first_t.extend([math.nan] * extra)
        self.last_t.extend([math.nan] * extra)
        self.size = n

    def make_room(self, ev: Event) -> None:
        """Grow the columns for an intent index beyond them, or a HistoryError if no run had that intent."""
        i = ev["intent"]
        planned = self.planned
        limit = planned if type(planned) is int and planned > 0 else MAX_UNPLANNED_INTENTS
        if type(i) is not int or not 0 <= i < limit:
            raise HistoryError(
                f"intent {i!r:.40} is not one of the run's "
                f"{limit:,} intents (0 to {limit - 1:,}); the history is damaged"
            )
        self.grow(max(i + 1, min(self.size * 2, limit)))

    def intent_of(self, request_id: int) -> int | None:
        """The intent of the attempt in flight with this request id, if one is."""
        started = self.pending.get(request_id)
        return None if started is None else started[0]

    def hit(self, i: int, kinds: Iterable[str]) -> None:
        """One more attempt of intent ``i`` was broken by these pod faults."""
        self.hits[i] += 1
        self.faults.setdefault(i, set()).update(kinds)

    def add_fault(self, i: int, kind: str) -> None:
        """A fault that names its request hit an attempt of intent ``i`` (not counted as a pod hit)."""
        self.faults.setdefault(i, set()).add(kind)

    def _fault_column(self) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, kinds in self.faults.items():
            column[i] = ";".join(sorted(kinds))
        return column

    def _sparse_column(self, values: Mapping[int, str]) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, value in values.items():
            column[i] = value
        return column

    def _flags(self, intents: Iterable[int]) -> npt.NDArray[np.bool_]:
        column = np.zeros(self.size, dtype=bool)
        column[list(intents)] = True
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
                "attempts_hit_by_pod_fault": np.array(self.hits, dtype=np.int32),
                "faults": self._fault_column(),
                # Whole milliseconds since the run started (formatting floats is a third of a
                # million-row intents.csv); nullable, as an attempt may never have ended.
                "first_attempt_ms": _millis(self.first_t),
                "last_end_ms": _millis(self.last_t),
                # Kept as Python strings: an Arrow copy of a million replies would add their size
                # again to the audit's peak memory (the CSV writer converts them chunk by chunk).
                "code": pd.Series(self._sparse_column(self.codes), dtype=object),
                "reply": pd.Series(self.replies, dtype=object),
                "reply_reads_as_failure": self._flags(self.failure_replies),
                **self._pod_columns(),
                **({"trace_id": self._sparse_column(self.traces)} if self.traces else {}),
            }
        )


@dataclass(frozen=True, slots=True)
class PodFault:
    """A kill, rollout step or crash that took a pod down: what an effect that vanished is blamed on."""

    seq: int
    t: float
    kind: str
    pod: str
    number: int
    """Its place among the run's faults of its kind, from 1 (``kill#3``)."""
    start: int
    """The pod's start it ended (its log's ``start #N`` section); the next start came up after it."""

    def label(self) -> str:
        return f"{self.kind}#{self.number} {self.pod} @{self.t:.2f}s"


class PodDisruptions:
    """Which attempts a pod fault broke; fills ``Fold.pod_exits``, ``Fold.crashes`` and ``Fold.pod_faults``.

    A disruption is a moment a pod broke what it had in flight: a SIGKILL (kill
    or rollout), the exit after a graceful stop, a crash, or a pause (twice: when
    the pod freezes and when it thaws). Each is appended to ``kinds`` (every pod)
    and to its pod's list in ``by_pod``. An attempt notes at its start the length
    of the list it watches (its pod's, when the history names it; else all pods')
    and was hit by whatever that list gained by its end.

    For a kill this is exact: the injector records the ``fault`` event before
    any attempt the kill breaks can end. A graceful stop (a kill or rollout with
    a ``signal``) disrupts at the pod's exit, not at the signal: what the pod
    drained in its grace period was not broken. A pod that dies by itself (a
    crash, a failpoint) has no fault event, and its ``pod_exited`` is recorded
    only once the supervisor reaps it, after the broken attempts have ended; so
    an attempt whose connection closed at most ``CRASH_WINDOW_S`` before an
    unannounced ``pod_exited`` of its pod counts as hit by that crash.
    """

    def __init__(self, intents: Intents) -> None:
        self.intents = intents
        self.kinds: list[str] = []
        """``kill``, ``rollout``, ``crash`` or ``pause``, one per disruption of any pod, in order."""
        self.by_pod: dict[str, list[str]] = {}
        """With replicas: pod -> the kinds of its own disruptions so far."""
        self.stopping: dict[str, str | None] = {}
        """Pods killed whose exit has not been recorded yet -> the kind of a graceful stop (its
        disruption is the exit), or None after a SIGKILL (the disruption was the fault)."""
        self.recent: deque[tuple[float, float, int, str | None]] = deque()
        """Connection-closed attempts no disruption explains, within CRASH_WINDOW_S of the last:
        (end t, start t, intent, pod)."""
        self.exits = 0
        self.crashes = 0
        self.starts: Counter[str] = Counter()
        """Pod -> how many times it was started so far."""
        self.downs: list[PodFault] = []
        """Every disruption that took a pod down (not a pause), in order."""
        self.numbers: Counter[str] = Counter()

    def handlers(self) -> Mapping[str, Handler]:
        return {
            EventType.FAULT: self.fault,
            EventType.POD_EXITED: self.exited,
            EventType.POD_RESUMED: self.thawed,
            EventType.POD_STARTED: self.started,
        }

    def _disrupt(self, pod: str, kind: str, ev: Event) -> None:
        self.kinds.append(kind)
        self.by_pod.setdefault(pod, []).append(kind)
        if kind != FaultKind.PAUSE:
            self.numbers[kind] += 1
            self.downs.append(
                PodFault(ev.get("seq", -1), ev["t"], kind, pod, self.numbers[kind], self.starts[pod])
            )

    def last_kind(self) -> str:
        """The kind of the latest disruption of any pod, or ``none``."""
        return self.kinds[-1] if self.kinds else "none"

    def closed(self, end_t: float, start_t: float, i: int, pod: str | None) -> None:
        """An attempt of intent ``i`` ended by its connection closing, with no disruption to blame yet."""
        recent = self.recent
        recent.append((end_t, start_t, i, pod))
        while recent and recent[0][0] < end_t - CRASH_WINDOW_S:
            recent.popleft()

    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        if kind == FaultKind.KILL or kind == FaultKind.ROLLOUT:
            pod = ev.get("pod", "")
            if "signal" in ev:  # a graceful stop: the pod may finish what it has
                self.stopping[pod] = kind
            else:
                self._disrupt(pod, kind, ev)
                self.stopping[pod] = None
        elif kind == FaultKind.PAUSE:
            # Attempts in flight when the pod froze; those sent while it was frozen are caught
            # by the second disruption, when it thaws (pod_resumed).
            self._disrupt(ev.get("pod", ""), kind, ev)

    def thawed(self, ev: Event) -> None:
        self._disrupt(ev.get("pod", ""), FaultKind.PAUSE.value, ev)

    def started(self, ev: Event) -> None:
        pod = ev.get("pod", "")
        self.stopping.pop(pod, None)
        self.starts[pod] += 1

    def exited(self, ev: Event) -> None:
        t = ev["t"]
        self.exits += 1
        pod = ev.get("pod", "")
        if pod in self.stopping:
            graceful = self.stopping.pop(pod)
            if graceful is not None:
                self._disrupt(pod, graceful, ev)
            return
        crash = FaultKind.CRASH.value
        self.crashes += 1
        self._disrupt(pod, crash, ev)
        others: deque[tuple[float, float, int, str | None]] = deque()
        for end_t, start_t, j, on in self.recent:
            if on is not None and on != pod:
                others.append((end_t, start_t, j, on))  # another replica's
            elif end_t >= t - CRASH_WINDOW_S and start_t <= t:
                self.intents.hit(j, (crash,))
        self.recent = others


class StreamFaults:
    """Faults that name the request they hit, pinned on its intent exactly; fills ``Fold.rule_hits``.

    The fault proxy records a fault before it acts, so the attempt it names is in
    flight. The load balancer's re-sends (``balancer_retry``) name their intent:
    the client did not retry, the balancer did.
    """

    def __init__(self, intents: Intents) -> None:
        self.intents = intents
        self.rule_hits: Counter[int] = Counter()
        """Stream fault events per rule index of the scenario."""

    def handlers(self) -> Mapping[str, Handler]:
        return {EventType.FAULT: self.fault, EventType.BALANCER_RETRY: self.balancer_retry}

    def fault(self, ev: Event) -> None:
        if ev["fault"] in POD_FAULT_KINDS or "id" not in ev:
            return
        if "rule" in ev:
            self.rule_hits[ev["rule"]] += 1
        i = self.intents.intent_of(ev["id"])
        if i is not None:
            self.intents.add_fault(i, fault_label(ev))

    def balancer_retry(self, ev: Event) -> None:
        i = ev["intent"]
        if 0 <= i < self.intents.size:
            self.intents.add_fault(i, FaultKind.BALANCER_RETRY.value)


@dataclass(frozen=True, slots=True)
class MissedFault:
    kind: str
    trigger: str
    reason: str


class FaultPlan:
    """Planned vs injected faults; fills ``Fold.faults``, ``Fold.faults_planned``, ``Fold.missed``
    and ``Fold.paced``.

    Planned: the counted pod faults of ``run_started``, plus timed ones (``counted``
    false) that came due, injected or missed. Injected: every fault event by
    :func:`fault_label`, and every ``balancer_retry``.
    """

    def __init__(self) -> None:
        self.injected: Counter[str] = Counter()
        self.planned: Counter[str] = Counter()
        self.missed: list[MissedFault] = []
        self.paced: list[tuple[float | None, int]] = []
        """(held_s or None, attempts in flight) of each pod fault event that says how it was paced."""

    def handlers(self) -> Mapping[str, Handler]:
        return {
            EventType.RUN_STARTED: self.run_started,
            EventType.FAULT: self.fault,
            EventType.FAULT_MISSED: self.fault_missed,
            EventType.BALANCER_RETRY: self.balancer_retry,
        }

    def run_started(self, ev: Event) -> None:
        self.planned.update(ev.get("faults_planned") or {})

    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        if kind in POD_FAULT_KINDS and ev.get("counted") is False:
            self.planned[kind] += 1  # a timed fault that came due
        if "in_flight" in ev:
            self.paced.append((ev.get("held_s"), ev["in_flight"]))
        self.injected[fault_label(ev)] += 1

    def fault_missed(self, ev: Event) -> None:
        self.missed.append(MissedFault(ev["fault"], ev.get("trigger", ""), ev.get("reason", "")))
        if ev.get("counted") is False:
            self.planned[ev["fault"]] += 1

    def balancer_retry(self, ev: Event) -> None:
        self.injected[FaultKind.BALANCER_RETRY.value] += 1


class Sessions:
    """2025 sessions and resumed streams; fills ``Fold.sessions_opened``, ``sessions_lost``, ``resumed``.

    A session the server forgot is blamed on the last pod disruption before the
    loss (``none`` if there was none: the server forgot it by itself).
    """

    def __init__(self, disruptions: PodDisruptions) -> None:
        self.disruptions = disruptions
        self.opened = 0
        self.lost: Counter[str] = Counter()
        self.resumed: Counter[bool] = Counter()
        """Broken event streams a 2025 client tried to resume: True resumed, False failed (re-issued)."""

    def handlers(self) -> Mapping[str, Handler]:
        return {EventType.SESSION_OPENED: self.session_opened, EventType.SESSION_LOST: self.session_lost}

    def session_opened(self, ev: Event) -> None:
        self.opened += 1

    def session_lost(self, ev: Event) -> None:
        self.lost[self.disruptions.last_kind()] += 1

    def attempt_resumed(self, ev: Event) -> None:
        """An ``attempt_ended`` with ``resumed`` (the fold calls this from its hot path)."""
        self.resumed[ev["resumed"]] += 1


def message_shape(message: str) -> str:
    """An error message with its variable parts (numbers, ids, keys) blanked, to count alike ones together."""
    return _VARIABLE.sub("#", message)


@dataclass
class ErrorTally:
    """How often one kind of error message was seen, with the first one verbatim."""

    outcome: str
    code: str | None
    example: str
    count: int = 0


class ErrorTallies:
    """Error messages of attempts, counted by shape; fills ``Fold.errors``.

    At most ``MAX_MESSAGES`` shapes per outcome; the rest are counted together
    under ``OTHER_MESSAGES``, so a server that puts a fresh id in every message
    cannot grow the audit.
    """

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str | None, str], ErrorTally] = {}
        """(outcome, code, message shape) -> tally."""
        self._shapes: Counter[str] = Counter()
        """Outcome -> the shapes kept for it."""

    def handlers(self) -> Mapping[str, Handler]:
        return {}

    def tally(self, ev: Event, outcome: str) -> None:
        """An ``attempt_ended`` whose outcome is not ok (the fold calls this from its hot path)."""
        message = ev.get("message")
        if message is None:
            return
        code = ev.get("code")
        code = None if code is None else str(code)
        key = (outcome, code, message_shape(str(message)))
        tally = self.tallies.get(key)
        if tally is None:
            if self._shapes[outcome] >= MAX_MESSAGES:
                key = (outcome, None, OTHER_MESSAGES)
                tally = self.tallies.setdefault(key, ErrorTally(outcome, None, OTHER_MESSAGES))
            else:
                self._shapes[outcome] += 1
                tally = self.tallies[key] = ErrorTally(outcome, code, str(message))
        tally.count += 1


class FailureReplies:
    """Ok replies whose text reads as a failure, counted by shape; fills ``Fold.failure_replies``.

    The client flags them (``reads_as_failure`` on an ok ``attempt_ended``, judged by
    :func:`harness.replies.reads_as_failure`); a lost intent with one is blamed on
    ``error_as_success``. Bounded like the error tallies: ``MAX_MESSAGES`` shapes.
    """

    def __init__(self, intents: Intents) -> None:
        self.intents = intents
        self.tallies: dict[str, ErrorTally] = {}
        """Reply shape -> tally (outcome ``ok``, the first reply of the shape verbatim)."""

    def handlers(self) -> Mapping[str, Handler]:
        return {}

    def reply(self, ev: Event, i: int) -> None:
        """An ok ``attempt_ended`` of intent ``i`` flagged ``reads_as_failure`` (from the fold's hot path)."""
        self.intents.failure_replies.add(i)
        text = str(ev.get("reply", ""))
        shape = message_shape(text)
        tally = self.tallies.get(shape)
        if tally is None:
            if len(self.tallies) >= MAX_MESSAGES:
                shape = OTHER_MESSAGES
                tally = self.tallies.setdefault(shape, ErrorTally(Outcome.OK.value, None, OTHER_MESSAGES))
            else:
                tally = self.tallies[shape] = ErrorTally(Outcome.OK.value, None, text)
        tally.count += 1


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A pod back from a fault that answered no call (``pod_unavailable``): the run stopped on it."""

    seq: int
    t: float
    pod: str
    ready_seq: int
    """Its restart's ``pod_ready``: the pod fault before it is what it did not recover from."""
    for_s: float
    failed: int
    locks: list[str]
    log: str
    """The pod log's last lines when it was found (redacted, cut)."""


class Unavailability:
    """Pods found unavailable after a fault (``harness.liveness``); fills ``Fold.unavailable``."""

    def __init__(self) -> None:
        self.found: list[Unavailable] = []

    def handlers(self) -> Mapping[str, Handler]:
        return {EventType.POD_UNAVAILABLE: self.unavailable}

    def unavailable(self, ev: Event) -> None:
        locks = ev.get("locks")
        self.found.append(
            Unavailable(
                seq=int(ev.get("seq", -1)),
                t=float(ev["t"]),
                pod=str(ev.get("pod", "")),
                ready_seq=int(ev.get("ready_seq", -1)),
                for_s=float(ev.get("for_s", 0.0)),
                failed=int(ev.get("failed", 0)),
                locks=[str(x) for x in locks] if isinstance(locks, list) else [],
                log=str(ev.get("message") or ""),
            )
        )


@dataclass(frozen=True, slots=True)
class CheckpointRead:
    """One read of the effect source during the run (``effects_checkpoint``), kept compact.

    ``seen`` is the bitmap the run wrote (:class:`harness.history.SeenEffects`, the one codec):
    bit ``i`` (least significant bit first in each byte) set when intent ``i`` had at least one
    effect; ``counts`` has the intents with two or more. :mod:`harness.audit.vanished` reads them.
    """

    seq: int
    t: float
    when: str
    """``before_fault`` (the pod still up, just before a kill or rollout step) or ``after_restart``."""
    pod: str
    fault_seq: int | None
    """The seq of the fault (or pod_ready) event this read belongs to."""
    seen: bytes
    counts: dict[int, int]
    foreign: int
    """Effects whose marker is not one of this run's intents."""
    error: str | None
    """Why the read failed (or was abandoned); it saw nothing then."""
    took_s: float | None
    unstable: bool = False
    """Its re-reads never agreed (a store caught mid-rewrite): what it saw is evidence of nothing."""
    torn: bool = False
    """Lines of the store did not parse (a rewrite in progress): what it saw was there, what it did not
    see may have been in the part being written."""
    began: float = 0.0
    """When the read began (its ``read_at``; older histories: ``t`` less ``took_s``), on the run's clock."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def reliable(self) -> bool:
        """What it saw can be judged by: it succeeded, and it agreed with its re-read where it had one."""
        return self.error is None and not self.unstable

    @property
    def witness(self) -> bool:
        """What it did not see can be judged by too: reliable, and of a store that was whole."""
        return self.reliable and not self.torn

    def count(self, i: int) -> int:
        """Effects of intent ``i`` this read saw."""
        if not self.ok:
            return 0
        if i in self.counts:
            return self.counts[i]
        byte = i >> 3
        return (self.seen[byte] >> (i & 7)) & 1 if byte < len(self.seen) else 0


class Checkpoints:
    """The run's checkpoint reads of the effect source, in order; fills ``Fold.checkpoints``.

    A read whose ``seen`` cannot be decoded is kept as a failed read (the audit
    goes on without it, as it would without that read), not as a damaged history.
    """

    def __init__(self) -> None:
        self.reads: list[CheckpointRead] = []

    def handlers(self) -> Mapping[str, Handler]:
        return {EventType.EFFECTS_CHECKPOINT: self.checkpoint}

    def checkpoint(self, ev: Event) -> None:
        error = ev.get("error")
        found = None
        if error is None:
            try:
                found = SeenEffects.from_event(ev)
            except HistoryError:
                error = "its record cannot be read (a damaged seen or counts)"
        fault_seq = ev.get("fault_seq")
        took = ev.get("took_s")
        self.reads.append(
            CheckpointRead(
                seq=ev.get("seq", -1),
                t=ev["t"],
                when=str(ev.get("when", "")),
                pod=str(ev.get("pod", "")),
                fault_seq=fault_seq if type(fault_seq) is int else None,
                seen=found.bitmap if found else b"",
                counts=found.counts if found else {},
                foreign=found.foreign if found else 0,
                error=None if error is None else str(error),
                took_s=float(took) if isinstance(took, int | float) else None,
                unstable=ev.get("unstable") is True,
                torn=ev.get("torn") is True,
                began=float(ev["read_at"])
                if isinstance(ev.get("read_at"), int | float)
                else ev["t"] - (float(took) if isinstance(took, int | float) else 0.0),
            )
        )


class PodTimeline:
    """What report.html draws of the pods; fills ``Fold.pod_events`` and ``Fold.protocol``.

    (t, what) of every fault (its kind as written), pod exit and readiness, in
    order: a few per run, so collecting them here costs the audit nothing and
    the report never reads the history again.
    """

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.protocol: str | None = None
        """The protocol the pod answered in (from pod_ready), or None in histories without it."""

    def handlers(self) -> Mapping[str, Handler]:
        return {
            EventType.FAULT: self.fault,
            EventType.POD_EXITED: self.exited,
            EventType.POD_READY: self.ready,
        }

    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        self.events.append((ev["t"], kind))

    def exited(self, ev: Event) -> None:
        self.events.append((ev["t"], EventType.POD_EXITED.value))

    def ready(self, ev: Event) -> None:
        self.protocol = ev.get("protocol", self.protocol)
        self.events.append((ev["t"], EventType.POD_READY.value))


class RunBounds:
    """The run's start and end; fills ``Fold.run``, ``ended``, ``collect_error`` and ``duration_s``.

    The duration is the time of the last attempt event, pod exit or run end
    (the fold passes the last attempt's time to :meth:`duration_s`).
    """

    def __init__(self) -> None:
        self.run: dict[str, Any] = {}
        self.ended: dict[str, Any] | None = None
        self.collect_error: str | None = None
        """Why the final read of a live effect source failed, if it did (effects_collected)."""
        self.t = 0.0
        """Time of the last pod exit or run end."""

    def handlers(self) -> Mapping[str, Handler]:
        return {
            EventType.RUN_STARTED: self.run_started,
            EventType.POD_EXITED: self.exited,
            EventType.EFFECTS_COLLECTED: self.effects_collected,
            EventType.RUN_ENDED: self.run_ended,
        }

    def run_started(self, ev: Event) -> None:
        self.run = dict(ev)

    def exited(self, ev: Event) -> None:
        self.t = ev["t"]

    def effects_collected(self, ev: Event) -> None:
        self.collect_error = ev.get("error")

    def run_ended(self, ev: Event) -> None:
        self.ended = dict(ev)
        self.t = ev["t"]

    def duration_s(self, last_attempt_t: float) -> float:
        return float(max(self.t, last_attempt_t))
