"""The decision router: every hold site reports the points it sees here and waits for a decision.

Six places see a target's work pass and can stop it there (*hold sites*): the fault
proxy and the stdio host (a call's request at the server's door, its answer back),
the PostgreSQL proxy (each statement the client sends, each commit), the effect
sink and the downstream proxy (each call), and the file tracer (each durable file
operation on the data directory). Each reports a :class:`Reached` the moment its
point is reached and awaits :meth:`Router.reached`, which answers with a
:class:`Decision`: go on (``PASS``), or the pod has been killed there (``KILL``,
``POWER_LOSS``: the site drops what it held, which never reaches its destination).
In between, a plan may ``HOLD`` the point: the site waits, with the work held
(a statement not yet forwarded, a commit's reply not yet relayed), until the plan
releases it, in an order of its choosing, with one of the other three.

The router owns what every plan needs and none should repeat:

* **Attribution.** A point is counted in the *window* of the attempt it serves,
  between that attempt's request reaching the server and its exchange ending: so
  ``db_commit#2`` is the same commit in every try, and a server's start-up or a
  readiness probe is never a point. The fault proxy and the stdio host know their
  attempt; a database, sink, downstream or file point is placed by the open
  windows: the only one open, else the attempts of the intent whose marker (or
  idempotency key: a key lookup carries no marker) the point carries, narrowed by
  its connection: the attempt whose transaction the
  connection is in, else the one attempt no connection is serving (a pool gives
  each call a connection of its own). A point several open attempts could own is
  recorded as ambiguous, never guessed. An attempt whose request is held at the
  server's door owns none: the server has not seen it yet. A site in a process of
  its own (the PostgreSQL relay of a run that only observes, a :class:`Feed`)
  stamps each point with the time it saw it, and the router reads it later: such a
  point is placed among the windows open *at that time*, closed ones included (the
  last :data:`KEPT_RECENT`), not those open when it is read.
* **Counting.** Points are indexed per attempt (``db_commit#2``) and labelled by
  what they commit (``INSERT invoices``, which of the attempt's commits with that
  label it is), so a plan finds the same point in another call.
* **The kill.** A plan's ``KILL`` cuts every connection the pod has through the
  harness (a new *generation*: what an older one sends is dropped), SIGKILLs the
  pod through its supervisor, and keeps a *fence* until the next pod has started,
  so nothing the dying pod sends after the point counts: the crash is exactly
  there. Every point held at that moment goes down with the pod.
* **The record.** A plan that decides records every point an attempt passes as a
  ``crash_point`` event (what the explorer proves each try from, offline); every
  plan's attempts carry the points they reached in ``attempt_ended``, bounded
  (:meth:`Router.points_of`), so a story says where each attempt was when a fault
  hit it.

Plans (:mod:`harness.crashpoints.plans`) are pure: the router turns the stream of
reports into :class:`At` events for them and carries out what they answer.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.crashpoints.decisions import KILLS, At, Connection, Decision, Plan, Reached
from harness.crashpoints.points import COUNTED, Crash, Point, PointKind, nth_with
from harness.events import CrashPlan, CrashPoint, FaultMissed, PointLate
from harness.history import HistoryWriter
from harness.workload import INTENT_SHAPE, intent_in

TOLD_POINTS = 24
"""Points an attempt's ``attempt_ended`` carries at most (the first and the last of a longer call)."""
KEPT_ENDED = 4096
"""Ended attempts whose points wait for the driver, at most."""
KEPT_RECENT = 1024
"""Closed windows a point seen earlier than it is read may still be placed in, at most."""


class Kill(Protocol):
    def __call__(self, *, trigger: str, point: str) -> bool:
        """SIGKILL the pod now (recorded as a kill fault); False when it was not running."""
        ...


class Feed(Protocol):
    """A site in a process of its own that only tells (the PostgreSQL relay of a run that observes): its
    points come over a pipe, each stamped with when it was seen (``Reached.at``), and reach the router
    some time after."""

    def drain(self) -> None:
        """Hand the router every point already written to the pipe, now: an attempt about to end may have
        reached them (the site tells a point before it lets the work go on)."""
        ...


@dataclass(slots=True)
class _Window:
    intent: int
    attempt: int
    opened_at: float = 0.0
    """When its request reached the server (``time.monotonic()``)."""
    closed_at: float | None = None
    """When its exchange ended; None while it is open."""
    counts: dict[PointKind, int] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    told: list[list[Any]] = field(default_factory=list)
    """[name, label] of each point, and [name, label, "ambiguous"] of one it may own."""
    more: int = 0
    """Points beyond ``TOLD_POINTS``."""
    taken: bool = False
    """The driver has taken its points (its ``attempt_ended`` is written), maybe before its exchange ended."""
    sever: Callable[[], None] | None = None
    """Breaks the client's stream of this exchange, the server's side left running (the fault proxy's)."""

    def tell(self, entry: list[Any]) -> None:
        if len(self.told) < TOLD_POINTS:
            self.told.append(entry)
        else:  # keep the last: where the attempt was when it ended is what a story needs
            self.told[-1] = entry
            self.more += 1


class Router:
    """One run's hold sites, their decisions, the pod's kills at points and what is recorded of them."""

    def __init__(
        self,
        plan: Plan,
        clock: Callable[[], float] = time.monotonic,
        late: Callable[[PointLate], None] | None = None,
    ) -> None:
        self.plan = plan
        self.clock = clock
        """When windows open and close: the clock a feed stamps its points with (a test scripts it)."""
        self._late = late
        """Where a point placed in an attempt whose points were taken goes: the history's ``point_late``,
        unless the placement after a run keeps it with the attempt's other points, not yet written."""
        self.generation = 0
        """Bumped at every kill at a point: connections of an older generation belong to a dying pod."""
        self.kills = 0
        self._windows: dict[tuple[int, int], _Window] = {}
        """Open exchanges, in the order their requests reached the server."""
        self._closed: dict[tuple[int, int], _Window] = {}
        """Exchanges that ended and whose points the driver has not taken yet."""
        self._recent: deque[_Window] = deque(maxlen=KEPT_RECENT)
        """Exchanges that ended, in the order they did: where a point seen before it is read may belong."""
        self._of_intent: dict[int, list[_Window]] = {}
        """Intent -> its windows open or in ``_recent``: a point that names its intent (a marker, a key) is
        placed without looking at every other call at work (observe mode places every commit of a run)."""
        self._feeds: list[Feed] = []
        self._serving: dict[int, tuple[int, int]] = {}
        """Connection id -> the attempt its open transaction serves (set by its points, cleared by
        :meth:`idle`)."""
        self._held: dict[int, tuple[asyncio.Future[Decision], At]] = {}
        self._at_door: set[tuple[int, int]] = set()
        """Attempts whose request is held at the server's door: no point at the server is theirs."""
        self._tickets = itertools.count(1)
        self._connections = itertools.count(1)
        self._history: HistoryWriter | None = None
        self._kill: Kill | None = None
        self._ready: Callable[[], bool] = lambda: True
        self._pid: Callable[[], int | None] = lambda: None
        self._killed_pid: int | None = None
        self._power_loss = False
        """The last kill at a point was a power loss, and its rollback has not been taken."""
        self.deferred = False
        """The run's observed points are placed after it (:meth:`defer`): no window is kept while it runs."""

    def attach(
        self,
        history: HistoryWriter,
        kill: Kill | None,
        ready: Callable[[], bool],
        pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        """Where points are recorded, how the pod is killed (None: it is never killed at a point), whether
        it is ready and which process it is now (known once the pod is supervised)."""
        self._history, self._kill, self._ready, self._pid = history, kill, ready, pid
        self._tell_plan()

    def defer(self) -> None:
        """Place this run's observed points after it: its plan only observes and its only observing site
        is a feed that spools its reports (the PostgreSQL relay), so the driver opens, closes and fills no
        window while it runs; :mod:`harness.crashpoints.placement` replays the windows from the history
        and places the spooled points in them once the run's calls are over (decision 0092)."""
        assert not self.plan.decides, "a plan that decides places its points as they are reached"
        self.deferred = True

    def follow(self, feed: Feed) -> None:
        """A site in a process of its own tells its points here: drained before an attempt ends (unless the
        run's points are placed after it, :meth:`defer`)."""
        self._feeds.append(feed)

    # -- connections from the pod (the PostgreSQL proxy, the sink, the downstream proxy)
    def connection(self) -> Connection | None:
        """A new connection from the pod, or None while the fence stands (a pod killed at a point is dying
        and no new one has started: it can only be the dying one)."""
        if self._killed_pid is not None and self._pid() in (None, self._killed_pid):
            return None
        self._killed_pid = None
        return self.new_connection()

    def new_connection(self) -> Connection:
        """A connection from the pod, past no fence: a site's where nothing is killed at a point (the
        relay of a run that only observes)."""
        return Connection(next(self._connections), self.generation)

    def cut(self, connection: Connection | None) -> bool:
        """Whether ``connection`` belongs to a pod killed at a point: nothing more of it gets through."""
        return connection is None or connection.generation != self.generation

    # -- exchanges (the fault proxy or the stdio host where a run has one reporting, else the driver)
    def serving(self) -> bool:
        """Calls reach the pod only once its supervisor has it ready: only then can it be killed at a point
        and restarted (a pod killed while it starts would end the run)."""
        return self._ready()

    def opened(self, intent: int, attempt: int, sever: Callable[[], None] | None = None) -> None:
        """An attempt's request is about to reach the server: its window opens. ``sever``: how the site
        breaks the client's stream of it while the server goes on, where it can (the fault proxy)."""
        window = self._windows[(intent, attempt)] = _Window(intent, attempt, self.clock(), sever=sever)
        self._of_intent.setdefault(intent, []).append(window)

    def closed(self, intent: int, attempt: int) -> None:
        """The exchange is over (answered, or broken): later points are not this attempt's."""
        window = self._windows.pop((intent, attempt), None)
        if window is not None:
            self._end(window, self.clock())
        for connection in [c for c, served in self._serving.items() if served == (intent, attempt)]:
            del self._serving[connection]
        self.plan.ended(intent, attempt)
        if self.plan.decides:
            self._release()  # an attempt's end may be what a held one waits for

    def _end(self, window: _Window, now: float) -> None:
        """A window closes: its points are kept for the driver, and it stays where a point seen while it
        was open, and read later, is placed."""
        window.closed_at = now
        if len(self._recent) == KEPT_RECENT:  # the oldest leaves the recent ones, and the index with them
            self._unindex(self._recent[0])
        self._recent.append(window)
        if not window.taken:
            self._keep(window)

    def _unindex(self, window: _Window) -> None:
        windows = self._of_intent.get(window.intent, [])
        kept = [w for w in windows if w is not window]
        if kept:
            self._of_intent[window.intent] = kept
        else:
            self._of_intent.pop(window.intent, None)

    def _keep(self, window: _Window) -> None:
        """Keep an ended attempt's points until the driver takes them (bounded: those never taken go)."""
        self._closed[(window.intent, window.attempt)] = window
        if len(self._closed) > KEPT_ENDED:
            del self._closed[next(iter(self._closed))]

    # -- the driver: every attempt as the client makes it
    def started(self, intent: int, attempt: int) -> None:
        """An attempt is sent. Its window opens here where no hold site reports exchanges (a run whose plan
        only observes); the fault proxy or the stdio host opens it at the server's door otherwise."""
        if not self.plan.decides and not self.deferred:
            self.opened(intent, attempt)

    def ended(self, intent: int, attempt: int) -> dict[str, Any]:
        """The attempt ended for the client: what its ``attempt_ended`` says of the points it reached (those
        a feed saw before its answer came included; none where they are placed after the run)."""
        if self.deferred:
            return {}
        for feed in self._feeds:
            feed.drain()
        if not self.plan.decides:
            self.closed(intent, attempt)
        return self.points_of(intent, attempt)

    def looked(self, intent: int) -> None:
        """The run read the store as an attempt of ``intent`` was answered: what the plan held meanwhile
        may go on."""
        self.plan.looked(intent)
        if self.plan.decides:
            self._release()

    def points_of(self, intent: int, attempt: int) -> dict[str, Any]:
        """What ``attempt_ended`` says of the points the attempt reached (taken once, when it ends)."""
        window = self._closed.pop((intent, attempt), None)
        if window is None:
            window = self._windows.get((intent, attempt))
            if window is None:
                return {}
        window.taken = True  # a point placed in it from now on is told on its own (``point_late``)
        if not window.told:
            return {}
        return {"points": window.told, **({"points_more": window.more} if window.more else {})}

    def exhausted(self) -> bool:
        exhausted = self.plan.exhausted()
        self._tell_plan()
        return exhausted

    def take_power_loss(self) -> bool:
        """Whether the last kill at a point was planned as a power loss (once: the rollback takes it)."""
        planned, self._power_loss = self._power_loss, False
        return planned

    def record_missed(self) -> None:
        """At the run's end, once no call can reach a point: every fault the plan never made."""
        if self._history is None:
            return
        for missed in self.plan.missed():
            # A missed kill counts as planned (the run is then inconclusive for it); a hold is no pod fault.
            self._history.emit(
                FaultMissed(
                    fault=missed.fault,
                    trigger=missed.trigger,
                    counted=missed.fault != "kill",
                    reason=missed.reason,
                )
            )

    # -- points
    def seen(self, r: Reached) -> None:
        """A point told by a feed, which does not wait (the plan only observes): counted in the attempt it
        served, for that attempt's ``attempt_ended``; recorded as a ``point_late`` event where that was
        written already (a commit whose reply came after its pod was killed, its attempt over)."""
        if r.kind in self.plan.kinds and not self.plan.decides:
            window = self._window_for(r)
            if window is not None:
                self._tally(window, r)
                if window.taken:
                    name, label = window.told[-1][:2]
                    late = PointLate(intent=window.intent, attempt=window.attempt, point=name, label=label)
                    if self._late is not None:
                        self._late(late)
                    elif self._history is not None:
                        self._history.emit(late)

    async def reached(self, r: Reached) -> Decision:
        """The decision for a point reached: ``PASS`` (go on), or the pod was killed there (``KILL``,
        ``POWER_LOSS``: nothing after the point may pass). A point held waits here for its release."""
        plan = self.plan
        if r.kind not in plan.kinds:
            return Decision.PASS
        window = self._window_for(r)
        if window is None:
            return Decision.PASS  # outside any call: start-up, a probe, a pod being killed
        if r.answer is not None:  # what came instead of an answer: recorded, never a point
            if plan.decides:
                self._record(window, Point(r.kind), r, Decision.PASS)
            return Decision.PASS
        if not plan.decides:
            self._tally(window, r)
            return Decision.PASS
        point = self._count(window, r)
        if r.kind is PointKind.REQUEST and len(self._windows) > 1:
            # An earlier exchange still open (its client gave up, the server is still on it): what commits
            # now may be either's, so this window's points prove nothing (the proof says so).
            r = replace(r, detail={**r.detail, "overlap": True})
        at = At(window.intent, window.attempt, point, tuple(window.points), r.site, next(self._tickets))
        decision = plan.decide(at)
        if decision is Decision.HOLD:
            return await self._hold(at, r)
        done = self._carry_out(at, decision)
        self._record(window, point, r, done)
        plan.applied(at, done)
        self._release()
        self._tell_plan()
        return done

    def _window_for(self, r: Reached) -> _Window | None:
        """The open attempt a point belongs to (see the module's docstring), or None: outside any call, or
        one of several it cannot tell apart (each of those is told it may own it)."""
        if r.attempt is not None:
            return self._windows.get(r.attempt)
        named = self._named(r)
        if len(named) == 1:  # what the rules below come to where one attempt of its intent was at work
            return self._placed(r, named[0])
        windows = list(self._windows.values()) if r.at is None else self._open_at(r.at)
        if self._at_door:  # a request held at the server's door has not reached it: nothing there is its
            windows = [w for w in windows if (w.intent, w.attempt) not in self._at_door]
        if len(windows) <= 1:
            return next((self._placed(r, w) for w in windows), None)
        candidates = self._by_marker(r, windows) or windows
        if len(candidates) > 1 and r.connection is not None:
            candidates = self._by_connection(r.connection, candidates)
        if len(candidates) == 1:
            return self._placed(r, candidates[0])
        for window in candidates:
            window.tell([r.kind.value, r.label, "ambiguous"])
        return None

    def _named(self, r: Reached) -> list[_Window]:
        """The windows at work when ``r`` was seen (open now, where it has no time) of the intents whose
        markers or keys it carries, none held at the door: found by intent, not among every window."""
        if not r.payload:
            return []
        at, door = r.at, self._at_door
        found = []
        for intent in {intent_in(m) for m in INTENT_SHAPE.findall(r.payload)}:
            for w in self._of_intent.get(intent, ()):
                if at is None:
                    if w.closed_at is not None:
                        continue
                elif w.opened_at > at or (w.closed_at is not None and w.closed_at < at):
                    continue
                if not door or (w.intent, w.attempt) not in door:
                    found.append(w)
        return found

    def _open_at(self, at: float) -> list[_Window]:
        """The windows open at ``at`` (a feed's point, read after it was seen): of those open now, the ones
        opened by then, and the closed ones that were still open then."""
        found = [w for w in self._windows.values() if w.opened_at <= at]
        for window in reversed(self._recent):  # in the order they closed: the newest first
            if window.closed_at is not None and window.closed_at < at:
                break  # every older one had closed by then too
            if window.opened_at <= at:
                found.append(window)
        return found

    def _by_marker(self, r: Reached, windows: list[_Window]) -> list[_Window]:
        """Of ``windows``, the attempts of the intents whose markers or keys the point carries."""
        if not r.payload:
            return []
        intents = {intent_in(m) for m in INTENT_SHAPE.findall(r.payload)}
        return [w for w in windows if w.intent in intents]

    def _by_connection(self, connection: Connection, candidates: list[_Window]) -> list[_Window]:
        """Of the candidates, the attempt the connection is serving (its transaction is open), else the
        only one no connection is serving: a pool hands each call a connection of its own."""
        serving = self._serving.get(connection.id)
        if serving is not None:
            mine = [w for w in candidates if (w.intent, w.attempt) == serving]
            if mine:
                return mine
        busy = set(self._serving.values())
        free = [w for w in candidates if (w.intent, w.attempt) not in busy]
        return free or candidates

    def _placed(self, r: Reached, window: _Window) -> _Window:
        if r.connection is not None:
            self._serving[r.connection.id] = (window.intent, window.attempt)
        return window

    def idle(self, connection: Connection) -> None:
        """The connection's transaction ended: its next statement may serve another attempt."""
        self._serving.pop(connection.id, None)

    def _tally(self, window: _Window, r: Reached) -> None:
        """A point of a plan that only observes: its name and label for the attempt's ``attempt_ended``,
        nothing a plan would decide on (no :class:`Point`: observe mode runs at every call of every run)."""
        kind, counts = r.kind, window.counts
        n = counts[kind] = counts.get(kind, 0) + 1
        window.tell([f"{kind.value}#{n}" if kind in COUNTED else kind.value, r.label])

    def _count(self, window: _Window, r: Reached) -> Point:
        kind, counts = r.kind, window.counts
        n = counts[kind] = counts.get(kind, 0) + 1
        point = Point(kind, n if kind in COUNTED else 1, r.label, 1, r.reads, op=r.op)
        if r.label is not None:
            point = replace(
                point, nth=nth_with(r.label, [*(p for p in window.points if p.kind is kind), point])
            )
        window.points.append(point)
        window.tell([point.name, point.label])
        return point

    async def _hold(self, at: At, r: Reached) -> Decision:
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._held[at.ticket] = (future, at)
        door = (at.intent, at.attempt) if at.point.kind is PointKind.REQUEST else None
        if door is not None:
            self._at_door.add(door)
        self._release()  # holding this one may be what lets another go
        try:
            done = await asyncio.wait_for(asyncio.shield(future), self.plan.limit(at))
        except TimeoutError:
            self.plan.blocked(at.ticket)
            self._release()
            done = future.result() if future.done() else Decision.PASS
        self._held.pop(at.ticket, None)
        if door is not None:
            self._at_door.discard(door)
        window = self._windows.get((at.intent, at.attempt)) or _Window(at.intent, at.attempt)
        self._record(window, at.point, r, done, held_for=True)
        self.plan.applied(at, done)
        self._release()
        self._tell_plan()
        return done

    def _release(self) -> None:
        """Let go of what the plan releases now, and break the client streams it breaks (a release may be
        what starts a hold whose stream it breaks)."""
        for ticket, decision in self.plan.releases():
            held = self._held.get(ticket)
            if held is None or held[0].done():
                continue
            future, at = held
            future.set_result(self._carry_out(at, decision))
        for key in self.plan.severs():
            window = self._windows.get(key)
            if window is not None and window.sever is not None:
                window.sever()

    def _carry_out(self, at: At, decision: Decision) -> Decision:
        if decision in KILLS and not self._strike(at, KILLS[decision]):
            return Decision.PASS  # the pod was not there to kill
        return decision

    def _strike(self, at: At, crash: Crash) -> bool:
        """Cut the pod off from the harness's services and kill it; False if it was not running. A power
        loss is the kill, and the rollback of its data directory before the pod starts again."""
        if self._kill is None:
            return False
        generation, pid = self.generation, self._pid()
        self.generation += 1  # before the kill: nothing the pod sends from now on gets through
        self._power_loss = crash is Crash.POWER_LOSS
        name = replace(at.point, crash=crash).name
        if not self._kill(trigger=f"crash point {name}", point=name):
            self.generation = generation
            self._power_loss = False
            return False
        self._killed_pid = pid  # the fence: until another pod has started (none where the pid is unknown)
        self.kills += 1
        now = self.clock()
        for window in self._windows.values():  # the kill breaks every exchange: later points are none
            self._end(window, now)
        self._windows.clear()
        for future, _ in self._held.values():  # what the dying pod held goes down with it
            if not future.done():
                future.set_result(Decision.KILL)
        return True

    def _record(
        self, window: _Window, point: Point, r: Reached, done: Decision, *, held_for: bool = False
    ) -> None:
        """A ``crash_point`` event: what the explorer proves each try from."""
        if self._history is None:
            return
        killed = done in KILLS
        named = replace(point, crash=KILLS[done]) if killed else point
        detail = dict(r.detail)
        if r.answer is not None:
            detail["answer"] = r.answer
        detail.update(self.plan.annotate(window.intent))
        if r.label is not None:
            detail.update(label=r.label, nth=point.nth)
        if held_for:
            detail["released"] = done.value
        self._history.emit(
            CrashPoint(intent=window.intent, attempt=window.attempt, point=named.name, held=killed, **detail)
        )

    def _tell_plan(self) -> None:
        told = self.plan.told()
        if told is not None and self._history is not None:
            self._history.emit(CrashPlan(**told))
