"""Pod faults and what they break: a disruption hits intents, a stream fault its attempt; the timeline."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from harness.audit.accumulators.base import (
    CRASH_WINDOW_S,
    POD_FAULT_KINDS,
    Accumulator,
    Event,
    fault_label,
    reads,
)
from harness.audit.accumulators.intents import Intents
from harness.faultkinds.registry import ENDS_POD, HEALED
from harness.history import EventType, FaultKind


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


class PodDisruptions(Accumulator):
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

    def _disrupt(self, pod: str, kind: str, ev: Event) -> None:
        self.kinds.append(kind)
        self.by_pod.setdefault(pod, []).append(kind)
        if kind not in HEALED:
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

    @reads(EventType.FAULT)
    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        if kind in ENDS_POD:
            pod = ev.get("pod", "")
            if "signal" in ev:  # a graceful stop: the pod may finish what it has
                self.stopping[pod] = kind
            else:
                self._disrupt(pod, kind, ev)
                self.stopping[pod] = None
        elif kind in HEALED:
            # Attempts in flight when the pod froze; those sent while it was frozen are caught
            # by the second disruption, when it thaws (pod_resumed).
            self._disrupt(ev.get("pod", ""), kind, ev)

    @reads(EventType.POD_RESUMED)
    def thawed(self, ev: Event) -> None:
        self._disrupt(ev.get("pod", ""), FaultKind.PAUSE.value, ev)

    @reads(EventType.POD_STARTED)
    def started(self, ev: Event) -> None:
        pod = ev.get("pod", "")
        self.stopping.pop(pod, None)
        self.starts[pod] += 1

    @reads(EventType.POD_EXITED)
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


class StreamFaults(Accumulator):
    """Faults that name the request they hit, pinned on its intent exactly; fills ``Fold.rule_hits``.

    The fault proxy records a fault before it acts, so the attempt it names is in
    flight. The load balancer's re-sends (``balancer_retry``) name their intent:
    the client did not retry, the balancer did.
    """

    def __init__(self, intents: Intents) -> None:
        self.intents = intents
        self.rule_hits: Counter[int] = Counter()
        """Stream fault events per rule index of the scenario."""

    @reads(EventType.FAULT)
    def fault(self, ev: Event) -> None:
        if ev["fault"] in POD_FAULT_KINDS or "id" not in ev:
            return
        if "rule" in ev:
            self.rule_hits[ev["rule"]] += 1
        i = self.intents.intent_of(ev["id"])
        if i is not None:
            self.intents.add_fault(i, fault_label(ev))

    @reads(EventType.BALANCER_RETRY)
    def balancer_retry(self, ev: Event) -> None:
        i = ev["intent"]
        if 0 <= i < self.intents.size:
            self.intents.add_fault(i, FaultKind.BALANCER_RETRY.value)


class PodTimeline(Accumulator):
    """What report.html draws of the pods; fills ``Fold.pod_events`` and ``Fold.protocol``.

    (t, what) of every fault (its kind as written), pod exit and readiness, in
    order: a few per run, so collecting them here costs the audit nothing and
    the report never reads the history again.
    """

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.protocol: str | None = None
        """The protocol the pod answered in (from pod_ready), or None in histories without it."""

    @reads(EventType.FAULT)
    def fault(self, ev: Event) -> None:
        kind = ev["fault"]
        self.events.append((ev["t"], kind))

    @reads(EventType.POD_EXITED)
    def exited(self, ev: Event) -> None:
        self.events.append((ev["t"], EventType.POD_EXITED.value))

    @reads(EventType.POD_READY)
    def ready(self, ev: Event) -> None:
        self.protocol = ev.get("protocol", self.protocol)
        self.events.append((ev["t"], EventType.POD_READY.value))
