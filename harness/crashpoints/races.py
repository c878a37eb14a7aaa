"""Races: an intent's original attempt and its retry (same key, new request id) run side by side, the
retry placed at each point of the original in turn. Pure: the plan that ``mcp-chaos races`` runs.

Under 2026-07-28 a broken response stream loses the call for the client, which re-issues it at once,
while the server may still be running the first: the commonest retry is beside its original, not after
a crash. A read-then-write key check then races itself. This plan makes those races one at a time,
in an order it chooses, from what a clean first call showed (as the crash explorer learns its points):

* **The retry sent at point k of the original** (``retry sent at db_commit#1 (INSERT invoices) of the
  original``): the original is held at k, its client stream is broken (the router asks the fault
  proxy, :meth:`RacePlan.severs`), the client re-issues the call, and the retry runs until it ends or
  the hold limit passes; then the original goes on.
* **The retry held at its point k while the original runs** (the reverse): the original is held at the
  server's door and its stream broken; the retry runs to its point k and is held there; the original
  goes on until it ends or the hold limit passes; then the retry goes on.

Each try is one intent, one call at a time, so the router places every point by its attempt. A try is
*made* when the other attempt ended while the point was held; *blocked* when it did not: either it
reached nothing at the server meanwhile (the server serializes its work there: one connection, a
synchronous driver on its event loop), or it reached some points and then waited (a lock the held one
has, or the server's own order). Blocked is an answer, not a hang: the held point goes on at the hold
limit, and the server's own scheduling decides the rest (its verdict is judged all the same). A try
whose attempt took another path and never reached its point is *not reached*.

The run reads the store as the retry is answered (``looks``, :meth:`RacePlan.looked`): from the retry's
answer until that read is done, the original is held at its next point, so that what the read finds is
what the store held as the answer came, whatever the original does next (an answer given before its
effect was stored, when the key record commits first).

A race between **two calls** (``second`` is :attr:`Second.CALL`, ``races --second call``) puts a
second intent where the retry was: a fresh call of its own (its own marker and key, no stream broken),
the first two arrivals after the clean call a pair. A file store that loads, changes and saves its file
whole loses one of two concurrent changes; an original and its retry cannot show it (the retry's save
overwrites its own original's: one note, exactly once). Its orderings:

* **The second sent at point k of the first**: the second waits at the server's door until the first is
  held at k, then goes in; the first goes on once the second is at the server (k is the first's
  request: the two then run as the server schedules them), or has reached a point there or ended (k is a
  point at the server); else it is blocked, as a retry is.
* **The second held at its point k while the first runs**: as the retry held at its point.

The file tracer's points are among those placed (:data:`CALL_KINDS`); while both calls are at the
server, the router places a file operation by the only window open, else by the markers its bytes
carry (a save of the whole file names every note in it), else not at all (ambiguous, never guessed).

A **timeout retry** (``second`` is :attr:`Second.TIMEOUT`, ``races --second timeout``) is the retry's
race with no stream broken: the client gives up on the held original by its own attempt timeout and
re-issues the call with the same key, while the server still runs the first. Its orderings and ids are
the retry's. The run sets the client's timeout to :data:`TIMEOUT_SHARE` of the hold limit: the
original, held at its point for the hold limit, times out first; a blocked retry, sent at that timeout,
outlives the original's release by a third of the hold limit, so it is answered, not timed out again.
For the same reason the retry held at its own point waits :data:`RETRY_HOLD_SHARE` of the hold limit,
not all of it: past its own timeout a third attempt would come, and the race would be three.

The plan reads no time but its clock's (the budget); the same stream of points gives the same
decisions, so the same target gives the same table.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.crashpoints.decisions import HOLD_LIMIT_S, At, Decision, Missed
from harness.crashpoints.points import FILE_KINDS, Point, PointKind, parse_ordering, reached

RACE_KINDS = frozenset(PointKind) - FILE_KINDS
"""What a retry's race is placed at: every statement and commit, every downstream call, the call's
request and answer. Its run traces no files (a retry's save overwrites its own original's)."""
CALL_KINDS = frozenset(PointKind)
"""What a race of two calls is placed at: those, and every watched file operation."""
RACE_HOLD_LIMIT_S = 2.0
"""How long a held point waits for the other attempt to end: a call of the reference targets takes
tens of milliseconds, so two seconds is ample, and a serializing server costs two seconds a try."""
WAIT_LIMIT_S = 30.0
"""How long a try's original waits at the door for the last try's calls to be done at the server: they
are not held, only slow (a server that renders an error's traceback takes seconds)."""
AT_SERVER = CALL_KINDS - {PointKind.REQUEST}
"""Points that show an attempt was at work in the server (its request at the door shows nothing)."""
SERIALIZES = "the server serializes here"
ORIGINAL = 1
"""The original attempt's number; the retry is the next."""
RETRY = 2
TIMEOUT_SHARE = 2 / 3
"""A timeout retry's client attempt timeout, as a share of the hold limit (see the module)."""
RETRY_HOLD_SHARE = 1 / 3
"""How long a timeout retry's own held point waits, as a share of the hold limit: well inside its own
attempt timeout, so that a blocked ordering releases it before the client gives up on it too."""


def client_timeout(hold_limit_s: float) -> float:
    """The client's attempt timeout a timeout retry's race sets (:data:`TIMEOUT_SHARE`)."""
    return hold_limit_s * TIMEOUT_SHARE


class Second(enum.StrEnum):
    """What runs beside the first attempt."""

    RETRY = "retry"
    """Its retry: the same intent, its client stream broken (2026-07-28's re-issue)."""
    CALL = "call"
    """A second call: another intent, its own marker and key, sent fresh (a second client)."""
    TIMEOUT = "timeout"
    """Its retry by the client's own attempt timeout: the same intent, no stream broken."""

    @property
    def severs(self) -> bool:
        """Whether the original's client stream is broken so that the retry comes."""
        return self is Second.RETRY

    @property
    def retries(self) -> bool:
        """Whether the second attempt is the same intent's retry (its key, the original's marker)."""
        return self is not Second.CALL


class Held(enum.StrEnum):
    """Whose point an ordering holds."""

    ORIGINAL = "original"
    """The retry is sent while the original is held at the point."""
    RETRY = "retry"
    """The retry is held at its point while the original runs."""


class Made(enum.StrEnum):
    """What became of an ordering's try."""

    MADE = "made"
    BLOCKED = "blocked"
    NOT_REACHED = "not reached"


@dataclass(frozen=True, slots=True)
class Ordering:
    """One ordering to try: whose point is held, and which."""

    held: Held
    at: Point
    second: Second = Second.RETRY

    @property
    def where(self) -> str:
        return f"{self.at.name} ({self.at.label})" if self.at.label else self.at.name

    @property
    def id(self) -> str:
        """``original:db_commit#3`` (the retry sent there), ``retry:db_commit#3`` (the retry held there),
        ``first:``/``second:`` for two calls: what ``races --only`` and a reproducer name it by, found
        again by index in the call's points."""
        if self.second is Second.CALL:
            return f"{'first' if self.held is Held.ORIGINAL else 'second'}:{self.at.name}"
        return f"{self.held.value}:{self.at.name}"

    @property
    def name(self) -> str:
        if self.second is Second.CALL:
            if self.held is Held.ORIGINAL:
                return f"second call sent at {self.where} of the first"
            return f"second call held at {self.where} while the first runs"
        if self.held is Held.ORIGINAL:
            return f"retry sent at {self.where} of the original"
        return f"retry held at {self.where} while the original runs"


HELD_BY_ID = {"original": Held.ORIGINAL, "retry": Held.RETRY, "first": Held.ORIGINAL, "second": Held.RETRY}
"""An ordering id's first word: whose point it holds (``first``/``second`` of two calls)."""


def orderings_of(
    clean: tuple[Point, ...], only: tuple[str, ...] = (), repeat: int = 1, second: Second = Second.RETRY
) -> list[Ordering]:
    """Every ordering of a call whose clean run passed ``clean``: the retry (or second call) sent at each
    of its points, then held at each while the original runs. With ``only``, those orderings in that
    order, each at the clean call's point of that name (a point it did not pass is kept, and is never
    reached); each ordering ``repeat`` times in a row."""
    if only:
        by_name = {p.name: p for p in clean}
        chosen = []
        for text in only:
            held, point = parse_ordering(text)
            chosen.append(Ordering(HELD_BY_ID[held], by_name.get(point.name, point), second))
    else:
        chosen = [Ordering(held, point, second) for held in Held for point in clean]
    return [o for o in chosen for _ in range(repeat)]


@dataclass(slots=True)
class _Try:
    intent: int
    ordering: Ordering
    gate: At | None = None
    """The original at the server's door, held there while an earlier try's calls are still at work."""
    door: At | None = None
    """The reverse: the original held at the server's door until the retry is held at its point."""
    held: At | None = None
    """The point the ordering holds, once reached."""
    released: set[int] = field(default_factory=set)
    """Tickets let go of."""
    ended: set[int] = field(default_factory=set)
    """Attempts whose exchange ended."""
    blocked: set[int] = field(default_factory=set)
    """Tickets held past the hold limit."""
    meanwhile: list[str] = field(default_factory=list)
    """Points the other attempt reached at the server while ``held`` was held."""
    made: Made | None = None
    why: str = ""
    looking: bool = False
    """The retry was answered while the original is at work: the run reads the store now."""
    looks: list[At] = field(default_factory=list)
    """The original's points held while ``looking``."""
    partner: int | None = None
    """Two calls: the second call's intent (``intent`` is the first's)."""
    call_door: At | None = None
    """Two calls, the second sent at the first's point: the second at the server's door until then."""
    sent: bool = False
    """Two calls: the second went in through the door."""

    @property
    def other(self) -> int:
        """The attempt that runs while ``held`` is held."""
        return RETRY if self.ordering.held is Held.ORIGINAL else ORIGINAL

    def told(self) -> dict[str, Any]:
        ordering = self.ordering
        return {
            "intent": self.intent,
            "id": ordering.id,
            "ordering": ordering.name,
            "held": ordering.held.value,
            "at": ordering.at.name,
            "label": ordering.at.label,
            "made": self.made.value if self.made is not None else None,
            "why": self.why,
            "meanwhile": self.meanwhile,
            **({"partner": self.partner} if self.partner is not None else {}),
        }


class RacePlan:
    """A clean call, then one intent per ordering of its original and a retry (see the module). A plan
    of the router's (:class:`~.decisions.Plan`) beside those of :mod:`.plans`, which builds it."""

    decides = True

    def __init__(
        self,
        *,
        budget_s: float,
        hold_limit_s: float = RACE_HOLD_LIMIT_S,
        only: tuple[str, ...] = (),
        repeat: int = 1,
        clock: Callable[[], float] = time.monotonic,
        looks: bool = False,
        second: Second = Second.RETRY,
    ) -> None:
        self.hold_limit_s = min(hold_limit_s, HOLD_LIMIT_S)
        self.second = second
        self.kinds = CALL_KINDS if second is Second.CALL else RACE_KINDS
        self.looks = looks and second.retries
        """The run reads the store as a retry is answered, and says when it has (:meth:`looked`)."""
        self.only, self.repeat = only, repeat
        self._clock = clock
        self._deadline = clock() + budget_s
        self.clean_intent: int | None = None
        self._clean_window: tuple[Point, ...] = ()
        self.clean: tuple[Point, ...] | None = None
        """The clean call's points, once its exchange ended: what the orderings are placed at."""
        self.orderings: list[Ordering] = []
        self.tries: dict[int, _Try] = {}
        self.ran_out = False
        """The budget was spent with orderings left to try."""
        self._sever: list[tuple[int, int]] = []
        self._closing: dict[int, At] = {}
        """Intents past the last ordering, held at the door while a try's call is still at work."""
        self._running: set[tuple[int, int]] = set()
        """Attempts whose request reached the server and whose exchange has not ended."""
        self._pairing: _Try | None = None
        """Two calls: the try whose first call came and whose second has not yet."""
        self._first_of: dict[int, int] = {}
        """Two calls: each second call's intent -> its first's (the try's key)."""
        self._closers = 0
        """Two calls: calls that came past the last ordering (each waits at the door for the tries')."""
        self._changed = True

    # -- what the router asks
    def decide(self, at: At) -> Decision:
        if self.clean_intent is None:
            self.clean_intent = at.intent
        if at.point.kind is PointKind.REQUEST:
            self._running.add((at.intent, at.attempt))
        if at.intent == self.clean_intent:
            if at.attempt == ORIGINAL:
                self._clean_window = at.window
            return Decision.PASS
        if self.second is Second.CALL:
            return self._decide_call(at)
        one = self._try_of(at.intent)
        if one is None and at.attempt == ORIGINAL and at.point.kind is PointKind.REQUEST:
            if self._quiet(at.intent):
                return Decision.PASS
            self._closing[at.intent] = at  # the call that closes the run waits for the last try's
            return Decision.HOLD
        if (
            one is not None
            and self.second is Second.TIMEOUT
            and at.attempt == RETRY
            and one.gate is not None
            and one.gate.ticket not in one.released
        ):
            # The original gave up at the door, waiting for the last try's calls (a slow server): its client's
            # retry is not the race's, which never began. The try is not reached (releases says so).
            one.blocked.add(one.gate.ticket)
            return Decision.PASS
        if one is not None and one.looking and at.attempt == ORIGINAL:
            one.looks.append(at)  # what the store holds at the retry's answer is read first
            return Decision.HOLD
        if one is None or one.made is not None:
            return self._answered(one, at)
        ordering = one.ordering
        if at.attempt == ORIGINAL and at.point.kind is PointKind.REQUEST:
            # A try starts once the last one's calls are over: a released original may still be at work.
            if not self._quiet(at.intent):
                one.gate = at
                return Decision.HOLD
            return Decision.HOLD if self._start(one, at) else Decision.PASS
        if at.attempt == ORIGINAL:
            if ordering.held is Held.ORIGINAL and one.held is None and reached(ordering.at, at.window):
                one.held = at
                if self.second.severs:
                    self._sever.append((at.intent, ORIGINAL))
                return Decision.HOLD
        elif (
            at.attempt == RETRY
            and ordering.held is Held.RETRY
            and one.held is None
            and reached(ordering.at, at.window)
        ):
            one.held = at
            return Decision.HOLD
        if at.attempt == one.other and self._holding(one) and at.point.kind in AT_SERVER:
            one.meanwhile.append(at.point.name)
        return self._answered(one, at)

    def _decide_call(self, at: At) -> Decision:
        """:meth:`decide` for a race of two calls: the first call's points are the original's, the second
        call's the retry's; a call's own later attempts (a client's retry) are not the race's."""
        one, who = self._call_of(at)
        if one is None:
            if at.attempt != ORIGINAL or at.point.kind is not PointKind.REQUEST:
                return Decision.PASS
            if self.clean is not None:
                self._closers += 1  # past the last ordering: no call is needed after this one
            if not self._quiet(at.intent):
                self._closing[at.intent] = at  # the call that closes the run waits for the last try's
                return Decision.HOLD
            return Decision.PASS
        if one.made is not None or at.attempt != ORIGINAL:
            return Decision.PASS
        ordering, door = one.ordering, at.point.kind is PointKind.REQUEST
        if who == ORIGINAL and door:
            if not self._quiet(at.intent):
                one.gate = at
                return Decision.HOLD
            return Decision.HOLD if self._start(one, at) else Decision.PASS
        if who == RETRY and door:
            one.call_door = at  # it goes in once the first is where the ordering wants it (releases)
            return Decision.HOLD
        mine = Held.ORIGINAL if who == ORIGINAL else Held.RETRY
        if ordering.held is mine and one.held is None and reached(ordering.at, at.window):
            one.held = at
            return Decision.HOLD
        if who == one.other and self._holding(one) and at.point.kind in AT_SERVER:
            one.meanwhile.append(at.point.name)
        return Decision.PASS

    def _call_of(self, at: At) -> tuple[_Try | None, int]:
        """The try of a race of two calls that ``at`` belongs to, and which call it is (``ORIGINAL``: the
        first, ``RETRY``: the second). A new call at the door is the second of the try waiting for one,
        else the first of the next ordering, while there is one and budget left."""
        first = self._first_of.get(at.intent)
        if first is not None:
            return self.tries[first], RETRY
        one = self.tries.get(at.intent)
        if one is not None:
            return one, ORIGINAL
        if at.attempt != ORIGINAL or at.point.kind is not PointKind.REQUEST:
            return None, ORIGINAL
        if self._pairing is not None:
            one, self._pairing = self._pairing, None
            one.partner = at.intent
            self._first_of[at.intent] = one.intent
            self._changed = True
            return one, RETRY
        one = self._try_of(at.intent)
        self._pairing = one
        return one, ORIGINAL

    def _answered(self, one: _Try | None, at: At) -> Decision:
        """The retry's answer passes to the client: while the original is still at work, it is held at its
        next point until the run has read the store (:meth:`looked`)."""
        if (
            self.looks
            and one is not None
            and at.attempt == RETRY
            and at.point.kind is PointKind.RESPONSE
            and (at.intent, ORIGINAL) in self._running
        ):
            one.looking = True
        return Decision.PASS

    def looked(self, intent: int) -> None:
        """The run read the store as the retry of ``intent`` was answered (or its answer was no success,
        and there is nothing to read): the original goes on."""
        one = self.tries.get(intent)
        if one is not None:
            one.looking = False

    def _start(self, one: _Try, request: At) -> bool:
        """The try's original is at the server's door: whether it is held there (the reverse, or the retry
        sent at ``request``), its client stream broken so that the retry comes."""
        ordering = one.ordering
        if ordering.held is Held.RETRY:
            one.door = request
        elif reached(ordering.at, request.window):
            one.held = request
        else:
            return False
        if self.second.severs:
            self._sever.append((request.intent, ORIGINAL))
        return True

    def _quiet(self, intent: int) -> bool:
        """No attempt of another intent (but the other call of its race) is still at the server."""
        one = self.tries.get(self._first_of.get(intent, intent))
        together = {intent} if one is None else {one.intent, one.partner}
        return all(i in together for i, _ in self._running)

    def limit(self, at: At) -> float:  # a look waits the hold limit at most, as a race's hold does
        """A race's own hold waits the hold limit (a timeout retry held at its point, a share of it); a call
        waiting at the door for the last try's, longer."""
        one = self.tries.get(at.intent)
        waiting = at.intent in self._closing or (
            one is not None and one.gate is not None and one.gate.ticket == at.ticket
        )
        first = self.tries.get(self._first_of.get(at.intent, -1))
        waiting |= first is not None and first.call_door is not None and first.call_door.ticket == at.ticket
        if waiting:
            return WAIT_LIMIT_S
        if self.second is Second.TIMEOUT and at.attempt == RETRY:
            return self.hold_limit_s * RETRY_HOLD_SHARE  # released before its own timeout (see the module)
        return self.hold_limit_s

    def _holding(self, one: _Try) -> bool:
        return one.held is not None and one.held.ticket not in one.released

    def _try_of(self, intent: int) -> _Try | None:
        """The intent's try; a new intent takes the next ordering while there is one and budget left."""
        one = self.tries.get(intent)
        if one is None and self._more():
            one = _Try(intent, self.orderings[len(self.tries)])
            self.tries[intent] = one
            self._changed = True
        return one

    def ended(self, intent: int, attempt: int) -> None:
        self._running.discard((intent, attempt))
        if intent == self.clean_intent and attempt == ORIGINAL and self.clean is None:
            self.clean = self._clean_window
            self.orderings = orderings_of(self.clean, self.only, self.repeat, self.second)
            self._changed = True
            return
        if self.second is Second.CALL:
            self._call_ended(intent, attempt)
            return
        one = self.tries.get(intent)
        if one is None or one.made is not None:
            return
        one.ended.add(attempt)
        if one.held is None and (attempt == ORIGINAL or one.door is not None):
            # Its attempt ended (the original's own call, or the retry before the point) without reaching it.
            who = "original" if one.ordering.held is Held.ORIGINAL else "retry"
            self._settle(one, Made.NOT_REACHED, f"the {who} never reached {one.ordering.where}")

    def _call_ended(self, intent: int, attempt: int) -> None:
        """:meth:`ended` for two calls: a call's exchange ended (its first attempt's; a client's retry of
        it is not the race's)."""
        first = self._first_of.get(intent)
        one = self.tries.get(intent if first is None else first)
        if one is None or one.made is not None or attempt != ORIGINAL:
            return
        who = ORIGINAL if first is None else RETRY
        one.ended.add(who)
        mine = Held.ORIGINAL if who == ORIGINAL else Held.RETRY
        if one.held is None and one.ordering.held is mine:
            self._settle(one, Made.NOT_REACHED, f"the {self._who(who)} never reached {one.ordering.where}")

    def _who(self, who: int) -> str:
        if self.second is Second.CALL:
            return "first" if who == ORIGINAL else "second"
        return "original" if who == ORIGINAL else "retry"

    def blocked(self, ticket: int) -> None:
        # Past its limit the router lets a closing call go of itself, and a look too.
        self._closing = {i: at for i, at in self._closing.items() if at.ticket != ticket}
        for one in self.tries.values():
            one.looks = [at for at in one.looks if at.ticket != ticket]
            if ticket in (t.ticket for t in (one.held, one.door, one.gate, one.call_door) if t is not None):
                one.blocked.add(ticket)
                return

    def releases(self) -> list[tuple[int, Decision]]:
        let_go: list[tuple[int, Decision]] = []
        for intent, at in list(self._closing.items()):
            if self._quiet(intent):
                del self._closing[intent]
                let_go.append((at.ticket, Decision.PASS))
        for one in self.tries.values():
            if one.looks and not one.looking:
                let_go += [(at.ticket, Decision.PASS) for at in one.looks]
                one.looks = []
            gate = one.gate
            if gate is not None and one.door is None and one.held is None and gate.ticket not in one.released:
                if gate.ticket in one.blocked:
                    self._settle(one, Made.NOT_REACHED, "the try before it was still at work past the limit")
                elif not self._quiet(one.intent) or self._start(one, gate):
                    continue  # still waiting, or held on now as the ordering's own hold
                one.released.add(gate.ticket)
                let_go.append((gate.ticket, Decision.PASS))
            let_go += self._send_second(one)
            door, held = one.door, one.held
            # The original waits at the door until the retry is held (or went its way, or took too long).
            if (
                door is not None
                and door.ticket not in one.released
                and (held is not None or one.made is not None or door.ticket in one.blocked)
            ):
                one.released.add(door.ticket)
                let_go.append((door.ticket, Decision.PASS))
                if held is None and one.made is None:
                    self._settle(
                        one, Made.NOT_REACHED, f"the retry did not reach {one.ordering.where} in time"
                    )
            if held is not None and held.ticket not in one.released:
                if one.other in one.ended or self._in_beside(one):
                    self._settle(one, Made.MADE, "")
                elif held.ticket in one.blocked:
                    self._settle(one, Made.BLOCKED, self._why_blocked(one))
                else:
                    continue
                one.released.add(held.ticket)
                let_go.append((held.ticket, Decision.PASS))
        return let_go

    def _send_second(self, one: _Try) -> list[tuple[int, Decision]]:
        """Two calls: the second, at the server's door, goes in once the first is held at the ordering's
        point (the second sent there), or at its own door (the second held at its point: held here already
        where that point is its request); at once where the try is settled, or the first took too long."""
        call = one.call_door
        if call is None or one.sent:
            return []
        if one.made is None and call.ticket in one.blocked:
            where = one.ordering.where if one.ordering.held is Held.ORIGINAL else "the server's door"
            self._settle(one, Made.NOT_REACHED, f"the first did not reach {where} in time")
        if one.ordering.held is Held.ORIGINAL:
            ready = one.held is not None
        else:
            ready = one.door is not None
            if ready and one.made is None and reached(one.ordering.at, call.window):
                one.sent, one.held = True, call  # its own door is the ordering's point: held on there
                return []
        if not ready and one.made is None:
            return []
        one.sent = True
        return [(call.ticket, Decision.PASS)]

    def _in_beside(self, one: _Try) -> bool:
        """Two calls, the second sent at the first's point: the second is in (the first's door held: both
        now run as the server schedules them), or has reached a point at the server (a point there held)."""
        if self.second is not Second.CALL or one.ordering.held is not Held.ORIGINAL or not one.sent:
            return False
        if one.held is not None and one.held.point.kind is PointKind.REQUEST:
            return True  # the second went in first; the first follows it
        return bool(one.meanwhile)

    def severs(self) -> list[tuple[int, int]]:
        severed, self._sever = self._sever, []
        return severed

    def _why_blocked(self, one: _Try) -> str:
        other, held = self._who(one.other), self._who(ORIGINAL if one.other == RETRY else RETRY)
        if not one.meanwhile:
            return f"the {other} reached nothing at the server while the {held} was held: " + SERIALIZES
        return (
            f"the {other} reached {one.meanwhile[-1]}, then waited for the {held} past "
            f"{self.hold_limit_s:g} s (a lock it holds, or the server's own order)"
        )

    def _settle(self, one: _Try, made: Made, why: str) -> None:
        if one.made is None:
            one.made, one.why = made, why
            self._changed = True

    def _more(self) -> bool:
        """Whether an ordering is left to try within the budget (once spent, the plan says so)."""
        if self.clean is None or self.ran_out or len(self.tries) >= len(self.orderings):
            return False
        if self._clock() >= self._deadline:
            self.ran_out, self._changed = True, True
            return False
        return True

    def exhausted(self) -> bool:
        """Every ordering has its intent, or the budget is spent, and no call is at work. A released original
        may be, after the retry's answer ended its intent: one more intent, held at the server's door until
        it is done, closes the run, so the effects are read once the last try's are all made."""
        if self.clean is None or self._pairing is not None or self._more():
            return False
        # Two at a time, the other worker's call is always at work: one call past the last ordering closes.
        return not self._running or self._closers > 0

    def applied(self, at: At, decision: Decision) -> None:
        return None  # it only holds and passes: what it decided is what was done

    def missed(self) -> list[Missed]:
        return []  # an ordering not made is a row of its own (blocked, not reached), not a missed fault

    def annotate(self, intent: int) -> Mapping[str, Any]:
        one = self.tries.get(self._first_of.get(intent, intent))
        return {"race": one.ordering.name} if one is not None else {}

    def told(self) -> Mapping[str, Any] | None:
        """A ``crash_plan`` event when a try began or settled: each ordering with what became of it."""
        if not self._changed:
            return None
        self._changed = False
        return {
            "races": [one.told() for one in self.tries.values()],
            "orderings": [o.name for o in self.orderings],
            **({"second": self.second.value} if self.second is not Second.RETRY else {}),
            **({"clean_intent": self.clean_intent} if self.clean_intent is not None else {}),
            **({"ran_out": True} if self.ran_out else {}),
        }
