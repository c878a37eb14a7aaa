"""The hold controller: counts each attempt's points, records them, and kills the pod at a planned one.

Four places report to it, each the moment its point is reached: the fault proxy
(a call's request is at the server's door; the server's JSON-RPC answer is back),
the PostgreSQL proxy (a transaction committed), the effect sink (it recorded a
call) and the file tracer (a durable file operation is about to run:
:mod:`harness.crashpoints.fsholds`). Points are counted per attempt, between the request reaching the server
and its answer (its *window*): so ``db_commit#2`` is the same commit in every
try, and what the pod does at start-up, or a readiness probe, is never a point.
That needs one call at a time, which the scenario model enforces. A planned
point is found by what it commits (:meth:`Point.same`), not by its index alone.

At a planned point the reporter holds its reply (the commit is durable, the
sink has recorded, the answer is here; the pod waits) and the controller
SIGKILLs the pod through its supervisor, whose restart and the client's retry
follow as after any kill. Before the kill every connection the pod has through
the harness is cut off (a new *generation* starts; the proxies and the sink
drop what an older one sends or would receive), and until the next pod has
started no new connection is let in either (the *fence*): the dying pod may still
connect while the kill walks its process tree, and what it sends then must not
count. So nothing the pod does after the point reaches the database or the sink:
the crash is exactly there. At ``request`` the call is held before it is
forwarded at all: the control point, where nothing of the call can have run.

Every point passed is a ``crash_point`` event in the history (held or not), and
every change of an exploration's plan a ``crash_plan`` event, so the explorer
reads an attempt's path and what was planned from the run directory, offline,
like the auditor, and checks each try's proof there. An answer that is no answer
to the tool (a 404 for a session the restarted pod does not know, a 401, a 5xx,
a stream closed before its answer) is recorded with what it was and is never a
point. A try whose intent ended without being held along its whole path is tried
again (``ExplorePlan.unheld``); a hold whose point its intent never reached is a
``fault_missed`` when the run ends: the run is inconclusive, not silently clean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.crashpoints.pgwire import Commit, Wrote
from harness.crashpoints.plan import ExplorePlan, FixedPlan
from harness.crashpoints.points import (
    COUNTED,
    Crash,
    Point,
    PointKind,
    file_label,
    nth_with,
    path_name,
    reached,
)
from harness.history import EventType, FaultKind, HistoryWriter
from harness.scenario import CrashPoints

Plan = FixedPlan | ExplorePlan


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


def _described(path: tuple[Point, ...]) -> dict[str, Any]:
    """A planned path as the history records it: its name, and what each point commits."""
    return {"path": path_name(path), "labels": [p.label for p in path]}


class HoldPoints:
    """One run's hold points: what the fault proxy, the PostgreSQL proxy and the sink ask at each point."""

    def __init__(self, crash: CrashPoints) -> None:
        explore = crash.explore
        self.plan: Plan = (
            FixedPlan((h.at, h.intents, h.commits) for h in crash.holds)
            if explore is None
            else ExplorePlan(
                explore.repeat,
                explore.max_points,
                explore.only,
                power_loss=explore.power_loss,
                share=(explore.job, explore.jobs),
            )
        )
        self.generation = 0
        """Bumped at every kill: connections of an older generation belong to a pod that is dying."""
        self.kills = 0
        self._window: _Window | None = None
        self._done: dict[int, int] = {}
        """intent -> how many points of its path have been held, for intents that reached the server."""
        self._last: int | None = None
        """The intent whose call the window last opened for (one call at a time)."""
        self._settled = False
        self._open: set[tuple[int, int]] = set()
        """Exchanges whose request was forwarded and whose end the proxy has not seen yet."""
        self._history: HistoryWriter | None = None
        self._kill: Kill | None = None
        self._ready: Callable[[], bool] = lambda: False
        self._pid: Callable[[], int | None] = lambda: None
        self._killed_pid: int | None = None
        self._told: tuple[int, int, int] = (0, 0, 0)
        self._power_loss = False
        """The last kill at a point was planned as a power loss, and its rollback has not been taken."""

    def attach(
        self,
        history: HistoryWriter,
        kill: Kill,
        ready: Callable[[], bool],
        pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        """Where points are recorded, how the pod is killed, whether it is ready and which process it is
        now (known once the pod is supervised)."""
        self._history, self._kill, self._ready, self._pid = history, kill, ready, pid
        self._tell_plan()

    # -- connections from the pod (the PostgreSQL proxy, the sink)
    def connection(self) -> int | None:
        """A new connection from the pod: the generation it belongs to, or None while the fence stands
        (a pod killed at a point is dying and no new one has started: it can only be the dying one)."""
        if self._killed_pid is not None and self._pid() in (None, self._killed_pid):
            return None
        self._killed_pid = None
        return self.generation

    def cut(self, generation: int | None) -> bool:
        """Whether a connection of ``generation`` belongs to a pod killed at a point: nothing more of it
        gets through."""
        return generation is None or generation != self.generation

    # -- the fault proxy (harness.faults.proxy.ExchangeHooks)
    def serving(self) -> bool:
        """Calls reach the pod only once its supervisor has it ready: only then can it be killed at a
        point and restarted (a pod killed while it starts would end the run)."""
        return self._ready()

    def request(self, intent: int, attempt: int) -> bool:
        """An attempt's request is about to be forwarded: its window opens. True: the pod was killed
        there, and the request must not be forwarded."""
        if intent != self._last:
            self._settle()
            self._last, self._settled = intent, False
        self._window = _Window(intent, attempt, self.plan.path_of(intent))
        # An earlier exchange still open (its client gave up, the server is still on it): what commits
        # now may be either's, so this window's points prove nothing (the proof says so).
        overlap = {"overlap": True} if self._open else {}
        self._open.add((intent, attempt))
        held = self._reached(PointKind.REQUEST, overlap)
        self._tell_plan()
        return held

    def exhausted(self) -> bool:
        """Asked before the next intent starts: whether the plan has every try it wanted (the last
        intent's miss, if it missed, planned again first)."""
        self._settle()
        exhausted = self.plan.exhausted()
        self._tell_plan()
        return exhausted

    def _settle(self) -> None:
        """The last intent is over: if its call took another path than planned, try that path again."""
        last = self._last
        if last is None or self._settled:
            return
        self._settled = True
        if self._done.get(last, 0) < len(self.plan.path_of(last)):
            self.plan.unheld(last)

    def response(self, intent: int, attempt: int, answer: str | None = None) -> bool:
        """The server's JSON-RPC answer to the call is at the proxy (``answer`` None), or what came instead
        (``HTTP 404``, ``the stream ended without an answer``): no point then. True: the pod was killed;
        the client gets none of the answer."""
        w = self._window
        if not self._in(intent, attempt) or w is None or self._history is None:
            return False
        if answer is not None:
            self._history.emit(
                EventType.CRASH_POINT,
                intent=intent,
                attempt=attempt,
                point=PointKind.RESPONSE.value,
                held=False,
                answer=answer,
                **({"path": path_name(w.path)} if w.path else {}),
            )
            return False
        held = self._reached(PointKind.RESPONSE, {})
        self._tell_plan()
        return held

    def ended(self, intent: int, attempt: int) -> None:
        """The exchange is over (answered, or broken): later commits are not this attempt's."""
        self._open.discard((intent, attempt))
        if self._in(intent, attempt):
            self._window = None

    # -- the PostgreSQL proxy and the sink
    def db_commit(self, commit: Commit) -> bool:
        """A transaction committed; True: hold its reply (the pod has been killed)."""
        detail = {
            "statements": [str(s) for s in commit.statements],
            "wrote": commit.wrote.value,
            "autocommit": commit.autocommit,
        }
        return self._reached(PointKind.DB_COMMIT, detail, commit.label, reads=commit.wrote is Wrote.NO)

    def downstream(self, key: str | None, replayed: bool) -> bool:
        """The sink recorded a call (``replayed``: deduplicated by its key); True: hold the reply."""
        return self._reached(PointKind.DOWNSTREAM, {"key": key, "replayed": replayed})

    # -- the file tracer (harness.crashpoints.fsholds.FileHolds)
    def fs_op(self, kind: str, paths: list[str]) -> bool:
        """A durable file operation (``write``, ``fsync``, ...) on ``paths`` of the data directory is about
        to run; True: the pod was killed before it. Labelled by its paths with their random parts
        starred (a temporary file named anew each call), so the same operation is found in every call."""
        label = " -> ".join(file_label(p) for p in paths)
        return self._reached(PointKind(f"fs_{kind}"), {"paths": paths}, label)

    def take_power_loss(self) -> bool:
        """Whether the last kill at a point was planned as a power loss (once: the rollback takes it)."""
        planned, self._power_loss = self._power_loss, False
        return planned

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

    def _reached(
        self, kind: PointKind, detail: dict[str, Any], label: str | None = None, *, reads: bool = False
    ) -> bool:
        w = self._window
        if w is None or self._history is None:
            return False  # outside any call: start-up, a probe, a pod that is being killed
        w.counts[kind] += 1
        index = w.counts[kind] if kind in COUNTED else 1
        point = Point(kind, index, label, 1, reads)
        w.points.append(point)
        if label is not None:
            point = w.points[-1] = replace(
                point, nth=nth_with(label, [p for p in w.points if p.kind is kind])
            )
        path = w.path
        done = self._done.setdefault(w.intent, 0)
        held = False
        if done < len(path) and reached(path[done], w.points):
            crashed = replace(point, crash=path[done].crash)  # named as planned: a kill or a power loss
            held = self._strike(crashed)
            if held:
                point = crashed
        if held:
            self._done[w.intent] = done + 1
        elif kind is PointKind.RESPONSE:
            self.plan.answered(w.intent, tuple(w.points), done)
        if path:
            detail["path"] = path_name(path)
        if label is not None:
            detail.update(label=label, nth=point.nth)
        self._history.emit(
            EventType.CRASH_POINT, intent=w.intent, attempt=w.attempt, point=point.name, held=held, **detail
        )
        return held

    def _strike(self, point: Point) -> bool:
        """Cut the pod off from the harness's services and kill it; False if it was not running. A power
        loss is the kill, and the rollback of its data directory before the pod starts again."""
        assert self._kill is not None
        generation, pid = self.generation, self._pid()
        self.generation += 1  # before the kill: nothing the pod sends from now on gets through
        self._power_loss = point.crash is Crash.POWER_LOSS
        if not self._kill(trigger=f"crash point {point.name}", point=point.name):
            self.generation = generation
            self._power_loss = False
            return False
        self._killed_pid = pid  # the fence: until another pod has started (none where the pid is unknown)
        self.kills += 1
        self._window = None
        return True

    def _tell_plan(self) -> None:
        """A ``crash_plan`` event when the plan grew: what the explorer checks every try against."""
        plan, history = self.plan, self._history
        told = (len(plan.planned), len(plan.skipped), len(plan.deferred))
        if history is None or told == self._told:
            return
        self._told = told
        clean = plan.clean_intent
        history.emit(
            EventType.CRASH_PLAN,
            planned=[_described(p) for p in plan.planned],
            skipped=[_described(p) for p in plan.skipped],
            deferred=[_described(p) for p in plan.deferred],
            **({"clean_intent": clean} if clean else {}),
        )
