"""Plans: pure schedulers from the points a run's attempts reach to the router's decisions.

A plan is told each point as it is reached, placed in its attempt (:class:`~.router.At`),
and answers pass, hold, kill or power loss; it is told what was done (a kill the pod
was not there for passes), when an exchange ends, and is asked which held points to
release, so that it can order two attempts' steps. It does no I/O and reads no time but
through the clock it is given (an exploration's budget): the same stream of points in
the same time gives the same decisions, which is what lets a run be read back from its
history and a plan be tested with a scripted stream and a clock of the test's.

* :class:`ObservePlan`: passes everything; every run has it, so each attempt's
  ``attempt_ended`` says which points it reached.
* :class:`PathPlan`: the crash points' plan, holding each intent along a path of points
  (:mod:`.paths`: fixed by a reproducer, or explored from a clean call) and killing the
  pod at each. It needs one call at a time (the scenario's rule says so only for it):
  a try is one intent's, and nothing else kills the pod.
* :class:`OrderPlan`: holds the first attempts to reach one point, and once all of
  them are there releases them in a given order: two attempts of one intent held at
  the same statement, let go in either order (``faults.crash_points.order``). The
  first step of the interleavings that ``races`` explores.
* :class:`~.races.RacePlan` (its own module): an intent's retry sent beside its original at each of
  the original's points, and held at each of its own while the original runs (``races``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.crashpoints import decisions
from harness.crashpoints.decisions import HOLD_LIMIT_S, At, Decision, Missed, crash_decision
from harness.crashpoints.paths import ExplorePlan, FixedPlan, Path
from harness.crashpoints.points import (
    CRASH_KINDS,
    OBSERVED,
    Point,
    PointKind,
    parse_point,
    path_name,
    reached,
)
from harness.crashpoints.races import RacePlan, Second
from harness.scenario import CrashPoints

EVERY_KIND = frozenset(PointKind)


class Plan:
    """The do-nothing answers every plan starts from (see :class:`~.router.Plan`)."""

    decides = True
    kinds: frozenset[PointKind] = EVERY_KIND
    hold_limit_s = HOLD_LIMIT_S

    def decide(self, at: At) -> Decision:
        return Decision.PASS

    def applied(self, at: At, decision: Decision) -> None:
        return None

    def limit(self, at: At) -> float:
        return self.hold_limit_s

    def releases(self) -> list[tuple[int, Decision]]:
        return []

    def severs(self) -> list[tuple[int, int]]:
        return []

    def blocked(self, ticket: int) -> None:
        return None

    def ended(self, intent: int, attempt: int) -> None:
        return None

    def looked(self, intent: int) -> None:
        return None

    def exhausted(self) -> bool:
        return False

    def missed(self) -> list[Missed]:
        return []

    def annotate(self, intent: int) -> Mapping[str, Any]:
        return {}

    def told(self) -> Mapping[str, Any] | None:
        return None


class ObservePlan(Plan):
    """Every point passes, unrecorded but for the attempt's own ``attempt_ended``; the kinds whose facts
    say they are observed (statements are not)."""

    decides = False
    kinds = OBSERVED


def _described(path: Path, same: tuple[Point, ...] = ()) -> dict[str, Any]:
    """A planned path as the history records it: its name, what each point commits, and the points whose
    crash state it shares (one try stands for them)."""
    return {
        "path": path_name(path),
        "labels": [p.label for p in path],
        **({"same": [p.name for p in same]} if same else {}),
    }


class PathPlan(Plan):
    """Each intent held along its path of points, the pod killed (or its power cut) at each."""

    kinds = CRASH_KINDS

    def __init__(self, paths: FixedPlan | ExplorePlan) -> None:
        self.paths = paths
        self._done: dict[int, int] = {}
        """intent -> how many points of its path have been held, for intents that reached a point."""
        self._last: int | None = None
        """The intent whose call last reached the server (one call at a time)."""
        self._settled = False
        self._told: tuple[int, bool] = (0, False)

    def decide(self, at: At) -> Decision:
        if at.point.kind is PointKind.REQUEST and at.intent != self._last:
            self._settle()
            self._last, self._settled = at.intent, False
        path = self.paths.path_of(at.intent)
        done = self._done.setdefault(at.intent, 0)
        if done < len(path) and reached(path[done], at.window):
            return crash_decision(path[done].crash)  # named as planned: a kill or a power loss
        return Decision.PASS

    def applied(self, at: At, decision: Decision) -> None:
        done = self._done.setdefault(at.intent, 0)
        if decision is not Decision.PASS:
            self._done[at.intent] = done + 1
        elif at.point.kind is PointKind.RESPONSE:
            self.paths.answered(at.intent, at.window, done)

    def exhausted(self) -> bool:
        """The last intent's miss, if it missed, planned again first."""
        self._settle()
        return self.paths.exhausted()

    def _settle(self) -> None:
        """The last intent is over: if its call took another path than planned, try that path again."""
        last = self._last
        if last is None or self._settled:
            return
        self._settled = True
        if self._done.get(last, 0) < len(self.paths.path_of(last)):
            self.paths.unheld(last)

    def missed(self) -> list[Missed]:
        """A missed kill for every intent that reached the server but not every point of its path."""
        found = []
        for intent, done in sorted(self._done.items()):
            path = self.paths.path_of(intent)
            if done < len(path):
                reason = f"intent {intent} never reached {path[done].name} (its calls took another path)"
                found.append(Missed("kill", f"crash point {path_name(path)}", reason))
        return found

    def annotate(self, intent: int) -> Mapping[str, Any]:
        path = self.paths.path_of(intent)
        return {"path": path_name(path)} if path else {}

    def told(self) -> Mapping[str, Any] | None:
        """A ``crash_plan`` event when the plan grew or its budget ran out: what the explorer checks every
        try against."""
        paths = self.paths
        told = (len(paths.planned), paths.ran_out)
        if told == self._told:
            return None
        self._told = told
        clean = paths.clean_intent
        return {
            "planned": [_described(p, paths.same.get(p, ())) for p in paths.planned],
            **({"points": paths.points} if paths.points else {}),
            **({"ran_out": True} if paths.ran_out else {}),
            **({"clean_intent": clean} if clean else {}),
        }


class OrderPlan(Plan):
    """The first ``len(order)`` attempts to reach ``at`` are held there; once all are, they are released
    in ``order`` (1 is the first to arrive), each once the one before it has gone on to its next point
    or ended. What cannot be held together (the target serializes its work: the second never arrives
    while the first is held) is released as it came, and the run says the order was not made."""

    def __init__(self, at: Point, order: Sequence[int], *, hold_limit_s: float = HOLD_LIMIT_S) -> None:
        self.at = at
        self.order = list(order)
        self.hold_limit_s = hold_limit_s
        self._arrived: list[At] = []
        """Attempts held at the point, in the order they reached it."""
        self._released: list[int] = []
        """Positions (1-based, by arrival) released, in the order they were."""
        self._waiting: At | None = None
        """The point last released: the next goes once its attempt has reached another or ended."""
        self.blocked_at: list[int] = []
        """Positions held past the router's limit with the others not yet there."""
        self._together = 0
        """How many were held at once when the first was found blocked."""

    def decide(self, at: At) -> Decision:
        if len(self._arrived) < len(self.order) and at.point.same(self.at) and not self._seen(at):
            self._arrived.append(at)
            return Decision.HOLD
        return Decision.PASS

    def _seen(self, at: At) -> bool:
        return any((a.intent, a.attempt) == (at.intent, at.attempt) for a in self._arrived)

    def applied(self, at: At, decision: Decision) -> None:
        w = self._waiting
        if w is not None and (w.intent, w.attempt) == (at.intent, at.attempt) and w.ticket != at.ticket:
            self._waiting = None  # the one released has gone on to its next point: the next may go

    def ended(self, intent: int, attempt: int) -> None:
        w = self._waiting
        if w is not None and (w.intent, w.attempt) == (intent, attempt):
            self._waiting = None

    def releases(self) -> list[tuple[int, Decision]]:
        if len(self._arrived) < len(self.order) and not self.blocked_at:
            return []
        if self._waiting is not None or len(self._released) == len(self._arrived):
            return []
        order = [p for p in self.order if p <= len(self._arrived)] if self.blocked_at else self.order
        position = next(p for p in order if p not in self._released)
        released = self._arrived[position - 1]
        self._released.append(position)
        self._waiting = released
        return [(released.ticket, Decision.PASS)]

    def blocked(self, ticket: int) -> None:
        position = next((i for i, a in enumerate(self._arrived, 1) if a.ticket == ticket), None)
        if position is not None and position not in self._released:
            if not self.blocked_at:
                self._together = len(self._arrived)
            self.blocked_at.append(position)
            self._waiting = None

    def missed(self) -> list[Missed]:
        trigger, wanted = f"order {self.at.name}", len(self.order)
        if self.blocked_at:
            came = self._together
            reason = (
                f"only {came} of {wanted} attempts reached {self.at.name} while the first was held there "
                "(the target does not run them side by side at that point): released as they came"
            )
            return [Missed("hold", trigger, reason)]
        if len(self._arrived) < wanted:
            return [
                Missed("hold", trigger, f"{len(self._arrived)} of {wanted} attempts reached {self.at.name}")
            ]
        return []

    @property
    def released_order(self) -> list[tuple[int, int]]:
        """(intent, attempt) in the order they were let go: what the run made."""
        return [(self._arrived[p - 1].intent, self._arrived[p - 1].attempt) for p in self._released]


def plan_for(
    crash: CrashPoints | None, *, clock: Callable[[], float] = time.monotonic, looks: bool = False
) -> decisions.Plan:
    """The plan of a run's ``faults.crash_points``: observe where there is none. ``clock``: what an
    exploration's budget is counted on, from now; ``looks``: the run reads the store as a race's retry is
    answered (its checkpoint reads are on), and a race holds the original meanwhile."""
    if crash is None:
        return ObservePlan()
    if crash.race is not None:
        race = crash.race
        return RacePlan(
            budget_s=race.budget_s,
            hold_limit_s=race.hold_limit_s,
            only=tuple(race.only),
            repeat=race.repeat,
            clock=clock,
            looks=looks,
            second=Second(race.second),
        )
    if crash.order is not None:
        order = crash.order
        return OrderPlan(parse_point(order.at), order.order, hold_limit_s=order.hold_limit_s)
    explore = crash.explore
    if explore is None:
        return PathPlan(FixedPlan((h.at, h.intents, h.commits) for h in crash.holds))
    return PathPlan(
        ExplorePlan(
            explore.repeat,
            explore.only,
            power_loss=explore.power_loss,
            share=(explore.job, explore.jobs),
            budget_s=explore.budget_s,
            clock=clock,
            store=explore.store,
        )
    )
