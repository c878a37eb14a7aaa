"""The hold controller: counts each attempt's points, records them, and kills the pod at a planned one.

Three places report to it, each the moment its point is reached: the fault proxy
(a request reached the server; the server's whole answer is back), the PostgreSQL
proxy (a transaction that wrote has committed) and the effect sink (it recorded a
call). Points are counted per attempt, between the request reaching the server
and its answer (its *window*): so ``db_commit#2`` is the same commit in every
try, and what the pod does at start-up, or a readiness probe, is never a point.
That needs one call at a time, which the scenario model enforces.

At a planned point the reporter holds its reply (the commit is durable, the
sink has recorded, the answer is written; the pod waits) and the controller
SIGKILLs the pod through its supervisor, whose restart and the client's retry
follow as after any kill. Before the kill every connection the pod has through
the harness is cut off (a new *generation* starts; the proxies and the sink
drop what an older one sends or would receive), so nothing the dying pod does
after the point reaches the database or the sink: the crash is exactly there.

Every point passed is a ``crash_point`` event in the history (held or not), so
the explorer reads an attempt's path from the run directory, offline, like the
auditor. A hold whose point its intent never reached is a ``fault_missed`` when
the run ends: the run is inconclusive, not silently clean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.crashpoints.pgwire import Commit
from harness.crashpoints.plan import ExplorePlan, FixedPlan
from harness.crashpoints.points import COUNTED, Point, PointKind, path_name
from harness.history import EventType, FaultKind, HistoryWriter
from harness.scenario import CrashPoints


class Kill(Protocol):
    def __call__(self, *, trigger: str, point: str) -> bool:
        """SIGKILL the pod now (recorded as a kill fault); False when it was not running."""
        ...


@dataclass(slots=True)
class _Window:
    intent: int
    attempt: int
    path: tuple[Point, ...]
    """The intent's path of holds."""
    counts: Counter[PointKind] = field(default_factory=Counter)
    points: list[Point] = field(default_factory=list)


class HoldPoints:
    """One run's hold points: what the fault proxy, the PostgreSQL proxy and the sink ask at each point."""

    def __init__(self, crash: CrashPoints) -> None:
        explore = crash.explore
        self.plan: FixedPlan | ExplorePlan = (
            FixedPlan((h.at, h.intents) for h in crash.holds)
            if explore is None
            else ExplorePlan(explore.repeat, explore.max_points, explore.only)
        )
        self.generation = 0
        """Bumped at every kill: connections of an older generation belong to a pod that is dying."""
        self.kills = 0
        self._window: _Window | None = None
        self._done: dict[int, int] = {}
        """intent -> how many points of its path have been held, for intents that reached the server."""
        self._history: HistoryWriter | None = None
        self._kill: Kill | None = None
        self._ready: Callable[[], bool] = lambda: False

    def attach(self, history: HistoryWriter, kill: Kill, ready: Callable[[], bool]) -> None:
        """Where points are recorded, how the pod is killed and whether it is ready (known once the pod
        is supervised)."""
        self._history, self._kill, self._ready = history, kill, ready

    # -- the fault proxy (harness.faults.proxy.ExchangeHooks)
    def serving(self) -> bool:
        """Calls reach the pod only once its supervisor has it ready: only then can it be killed at a
        point and restarted (a pod killed while it starts would end the run)."""
        return self._ready()

    def request(self, intent: int, attempt: int) -> bool:
        """An attempt's request was written to the server: its window opens. True: killed there."""
        self._window = _Window(intent, attempt, self.plan.path_of(intent))
        return self._reached(PointKind.REQUEST, {})

    def response(self, intent: int, attempt: int) -> bool:
        """The server's whole answer is at the proxy. True: the pod was killed; the client gets none of it."""
        if not self._in(intent, attempt):
            return False
        return self._reached(PointKind.RESPONSE, {})

    def ended(self, intent: int, attempt: int) -> None:
        """The exchange is over (answered, or broken): later commits are not this attempt's."""
        if self._in(intent, attempt):
            self._window = None

    # -- the PostgreSQL proxy and the sink
    def db_commit(self, commit: Commit) -> bool:
        """A transaction that wrote committed; True: hold its reply (the pod has been killed)."""
        writes = [w.statement or w.tag for w in commit.writes]
        return self._reached(PointKind.DB_COMMIT, {"writes": writes, "autocommit": commit.autocommit})

    def downstream(self, key: str | None, replayed: bool) -> bool:
        """The sink recorded a call (``replayed``: deduplicated by its key); True: hold the reply."""
        return self._reached(PointKind.DOWNSTREAM, {"key": key, "replayed": replayed})

    # -- the run's end
    def record_missed(self) -> None:
        """A ``fault_missed`` for every intent that reached the server but not every point of its path."""
        if self._history is None:
            return
        for intent, done in sorted(self._done.items()):
            path = self.plan.path_of(intent)
            if done < len(path):
                self._history.emit(
                    EventType.FAULT_MISSED,
                    fault=FaultKind.KILL,
                    trigger=f"crash point {path_name(path)}",
                    counted=False,
                    reason=f"intent {intent} never reached {path[done].name} (its calls took another path)",
                )

    # -- internals
    def _in(self, intent: int, attempt: int) -> bool:
        w = self._window
        return w is not None and (w.intent, w.attempt) == (intent, attempt)

    def _reached(self, kind: PointKind, detail: dict[str, Any]) -> bool:
        w = self._window
        if w is None or self._history is None:
            return False  # outside any call: start-up, a probe, a pod that is being killed
        w.counts[kind] += 1
        point = Point(kind, w.counts[kind] if kind in COUNTED else 1)
        w.points.append(point)
        path = w.path
        done = self._done.setdefault(w.intent, 0)
        held = done < len(path) and path[done] == point and self._strike(point)
        if held:
            self._done[w.intent] = done + 1
        elif kind is PointKind.RESPONSE:
            self.plan.answered(w.intent, tuple(w.points), done)
        if path:
            detail["path"] = path_name(path)
        self._history.emit(
            EventType.CRASH_POINT, intent=w.intent, attempt=w.attempt, point=point.name, held=held, **detail
        )
        return held

    def _strike(self, point: Point) -> bool:
        """Cut the pod off from the harness's services and kill it; False if it was not running."""
        assert self._kill is not None
        generation = self.generation
        self.generation += 1  # before the kill: nothing the pod sends from now on gets through
        if not self._kill(trigger=f"crash point {point.name}", point=point.name):
            self.generation = generation
            return False
        self.kills += 1
        self._window = None
        return True
