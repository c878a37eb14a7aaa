"""Observed points placed after the run: the PostgreSQL relay's spooled reports, in their attempts.

A run that only observes, and whose only observing site is the relay, keeps no window while it runs
(:meth:`harness.crashpoints.router.Router.defer`): the relay's reports go to a spool unread, so the
driver's process spends nothing a commit (decision 0092). Once the run's calls are over and the relay
has exited, :func:`place_after_run` replays the attempts' windows from the history (each from its
``attempt_started`` to its ``attempt_ended``, on the history's clock) and tells the spooled reports to
a :class:`Router` of their own between them, each when its commit was asked for (its ``at``, on the
same clock): the same placement rules as a run that reads them as it goes (a marker or key, then the
connection), the same windows, each report among the windows open at its time. What an attempt reached
is written as ``points_placed`` events, many attempts to an event, at the history's end; a point placed
in an attempt already written is a ``point_late`` event, as in a run (one in an attempt still waiting
for its event joins its points there, so a late point always follows the attempt's others).

An attempt's points are written as its window closes, as a run's driver takes them at the attempt's
end: the relay writes each report before it lets its commit's reply go on, so every report of a commit
asked for before that end is earlier in the spool (only a dying pod's last replies, which the relay reads
for 5 s after it died, come later: placed late, as above). Memory is bounded: the history is read as a
stream, and the router keeps the recent windows only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.crashpoints.pgproxy import RelayReports
from harness.crashpoints.plans import ObservePlan
from harness.crashpoints.router import TOLD_POINTS, Router
from harness.events import PlacedAttempt, PointLate, PointsPlaced
from harness.history import EventType, HistoryWriter

PER_EVENT = 256
"""Attempts a ``points_placed`` event lists at most."""

_STARTED, _ENDED = EventType.ATTEMPT_STARTED.value, EventType.ATTEMPT_ENDED.value


@dataclass(frozen=True, slots=True)
class Placed:
    """What a placement wrote: attempts that reached a point, and the points."""

    attempts: int
    points: int


def place_after_run(spool: Path, history: HistoryWriter) -> Placed:
    """Place the spooled reports in the attempts of ``history`` (still open: the events go to its end)."""
    history.flush()
    now = [0.0]
    written = _Written(history)
    router = written.router = Router(ObservePlan(), clock=lambda: now[0], late=written.late)
    router.attach(history, None, lambda: True)
    reports = RelayReports(router)
    windows = _windows(history.path, history.path.stat().st_size)
    pending = next(windows, None)

    def advance(to: float) -> None:
        nonlocal pending
        while pending is not None and pending[0] <= to:
            t, opens, intent, attempt = pending
            now[0] = t
            if opens:
                router.opened(intent, attempt)
            else:
                router.closed(intent, attempt)
                written.take(intent, attempt)
            pending = next(windows, None)

    with open(spool, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # cut short: the relay was killed as it wrote its last report
            if not line.strip():
                continue
            report: dict[str, Any] = orjson.loads(line)
            if "at" in report:
                report["at"] = history.since_start(report["at"])
                advance(report["at"])
            reports.tell(report)
    advance(float("inf"))
    written.flush()
    return Placed(written.attempts, written.points)


def _windows(path: Path, size: int) -> Iterator[tuple[float, bool, int, int]]:
    """(t, opens, intent, attempt) of every attempt's start and end in the first ``size`` bytes of the
    history (what was written before the placement began), in the order written: by time."""
    read = 0
    with open(path, "rb") as f:
        for line in f:
            read += len(line)
            if read > size:
                return
            if b'"attempt_' not in line:
                continue
            ev = orjson.loads(line)
            typ = ev.get("type")
            if typ in (_STARTED, _ENDED):
                yield float(ev["t"]), typ == _STARTED, int(ev["intent"]), int(ev["attempt"])


class _Written:
    """The points of attempts whose windows closed, written in ``points_placed`` events."""

    router: Router

    def __init__(self, history: HistoryWriter) -> None:
        self.history = history
        self._batch: dict[tuple[int, int], PlacedAttempt] = {}
        """(intent, attempt) -> its entry of the next ``points_placed`` event."""
        self.attempts = 0
        self.points = 0

    def take(self, intent: int, attempt: int) -> None:
        told = self.router.points_of(intent, attempt)
        if not told:
            return
        self.attempts += 1
        self.points += len(told["points"]) + told.get("points_more", 0)
        # A copy: a point placed in it from now on comes through :meth:`late`.
        entry: PlacedAttempt = {"intent": intent, "attempt": attempt, "points": list(told["points"])}
        if "points_more" in told:
            entry["points_more"] = told["points_more"]
        self._batch[(intent, attempt)] = entry
        if len(self._batch) == PER_EVENT:
            self.flush()

    def late(self, point: PointLate) -> None:
        """A point placed in an attempt already taken: with its others where they are not written yet,
        else a ``point_late`` after them."""
        self.points += 1
        entry = self._batch.get((point.intent, point.attempt))
        if entry is None:
            self.history.emit(point)
        elif len(entry["points"]) < TOLD_POINTS:
            entry["points"].append([point.point, point.label])
        else:  # as ``attempt_ended`` keeps them: the last, where the attempt was when it ended
            entry["points"][-1] = [point.point, point.label]
            entry["points_more"] = entry.get("points_more", 0) + 1

    def flush(self) -> None:
        if self._batch:
            self.history.emit(PointsPlaced(attempts=list(self._batch.values())))
            self._batch = {}
