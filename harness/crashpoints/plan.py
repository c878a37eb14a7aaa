"""Which path of hold points each intent is held along: fixed by the scenario, or found by exploring.

A fixed plan (``faults.crash_points.holds``) is what a reproducer scenario
carries: every intent it names is held along one path. An exploring plan
(``faults.crash_points.explore``, what ``mcp-chaos crashpoints`` runs) decides
as the run goes, one intent at a time:

1. intent 0 is the clean call: nothing is held, and the points its answered
   attempt passed are the points of the call (``request``, ``db_commit#1``, ...);
2. each of those points is then held in ``repeat`` intents, in the call's order;
3. when a retry after a hold at a point is answered, the points it committed at
   (``db_commit``, ``downstream``: the retry's own commits) become paths of two,
   held in ``repeat`` intents each (a crash during the recovery), after the
   others. A retry after ``request`` or after a commit that only read is a first
   execution again and is not explored further; a retry's commits that only read
   are not either;
4. a try whose intent ended without being held at every point of its path (the
   call took another path: it committed differently, or its answer was no answer
   to the tool) is tried again, at most ``repeat`` more times per path, so that a
   point gets its ``repeat`` proven tries where it can.

At most ``max_points`` paths are planned, the single points first; the clean
call's points beyond that are ``skipped`` (the exploration is then inconclusive:
it did not try them), the retries' beyond it ``deferred``. Points are held by what
they commit (:meth:`Point.same`). Intents the plan has nothing for run clean.
Pure and deterministic: the same answers give the same plan, so a run of it can
be read back from its history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace

from harness.crashpoints.points import COUNTED, Point, PointKind, parse_path

Path = tuple[Point, ...]


def labelled(path: Path, labels: Sequence[str | None] | None) -> Path:
    """``path`` with each point's label (``None``: found by its index), as a reproducer names them."""
    if not labels:
        return path
    return tuple(
        replace(p, label=label) if label is not None else p for p, label in zip(path, labels, strict=False)
    )


def _left_work(point: Point) -> bool:
    """Whether a crash at ``point`` can leave work half done for the retry to recover from."""
    return point.kind is not PointKind.REQUEST and not point.reads


class FixedPlan:
    """The scenario's holds: the first that names an intent gives its path."""

    def __init__(
        self, holds: Iterable[tuple[str, Sequence[int] | None, Sequence[str | None] | None]]
    ) -> None:
        self._holds = [
            (labelled(parse_path(at), labels), None if intents is None else frozenset(intents))
            for at, intents, labels in holds
        ]
        self.planned = [path for path, _ in self._holds]
        self.skipped: list[Path] = []
        self.deferred: list[Path] = []

    def path_of(self, intent: int) -> Path:
        for path, intents in self._holds:
            if intents is None or intent in intents:
                return path
        return ()

    def answered(self, intent: int, points: Path, held: int) -> None:
        """Nothing to learn: the plan was fixed."""

    def unheld(self, intent: int) -> None:
        """Nothing to try again: each intent of a fixed plan is one try, its miss a missed fault."""

    def exhausted(self) -> bool:
        """Never: a fixed plan holds every intent the scenario names, to its last."""
        return False


class ExplorePlan:
    """Every point of a clean call, ``repeat`` times each, then the retries' own commits."""

    def __init__(self, repeat: int, max_points: int, only: Sequence[str] | None = None) -> None:
        self.repeat = repeat
        self.max_points = max_points
        self.only = None if only is None else [parse_path(name) for name in only]
        self.clean: Path | None = None
        """The points of the clean call, once it was answered."""
        self.planned: list[Path] = []
        """Every path planned, in the order they are tried."""
        self.skipped: list[Path] = []
        """Points of the clean call left out by ``max_points``: never tried."""
        self.deferred: list[Path] = []
        """Paths of two (a crash in a retry's recovery) left out by ``max_points``."""
        self._paths: dict[int, Path] = {}
        self._queue: deque[Path] = deque()
        self._again: dict[Path, int] = {}

    def path_of(self, intent: int) -> Path:
        if intent not in self._paths:
            # One call at a time: when an intent starts, every earlier one has been seen to its end.
            self._paths[intent] = self._queue.popleft() if self._queue and self.clean is not None else ()
        return self._paths[intent]

    def answered(self, intent: int, points: Path, held: int) -> None:
        """An attempt of ``intent`` got its answer after ``held`` holds, having passed ``points``."""
        path = self._paths.get(intent, ())
        if self.clean is None and not path:
            self.clean = points
            if self.only is None:
                for point in points:
                    self._add((point,))
            else:  # asked for by name: a path of two is held whether or not a retry was seen to reach it
                by_name = {p: p for p in points}  # the clean call's points, with their labels
                for wanted in self.only:
                    if wanted[0] in by_name:
                        self._add((by_name[wanted[0]], *wanted[1:]))
        elif self.only is None and len(path) == 1 and held == 1 and _left_work(path[0]):
            for point in points:
                if point.kind in COUNTED and not point.reads:
                    self._add((path[0], point))

    def exhausted(self) -> bool:
        """Whether every try has been made: asked before the next intent starts (one call at a time, so
        every earlier try has ended and added what it found); the run then starts no more."""
        return self.clean is not None and not self._queue

    def unheld(self, intent: int) -> None:
        """``intent`` ended without being held along its whole path: try the path again (bounded)."""
        path = self._paths.get(intent, ())
        if not path or self._again.get(path, 0) >= self.repeat:
            return
        self._again[path] = self._again.get(path, 0) + 1
        self._queue.appendleft(path)

    def _add(self, path: Path) -> None:
        if path in self.planned or path in self.skipped or path in self.deferred:
            return
        if len(self.planned) >= self.max_points:
            (self.skipped if len(path) == 1 else self.deferred).append(path)
            return
        self.planned.append(path)
        self._queue.extend([path] * self.repeat)
