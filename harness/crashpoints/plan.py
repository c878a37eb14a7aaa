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
   others. A retry after ``request`` is a first execution again and is not
   explored further.

At most ``max_points`` paths are planned, the single points first. Intents the
plan has nothing for run clean. Pure and deterministic: the same answers give
the same plan, so a run of it can be read back from its history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from harness.crashpoints.points import COUNTED, Point, PointKind, parse_path

Path = tuple[Point, ...]


class FixedPlan:
    """The scenario's holds: the first that names an intent gives its path."""

    def __init__(self, holds: Iterable[tuple[str, Sequence[int] | None]]) -> None:
        self._holds = [
            (parse_path(at), None if intents is None else frozenset(intents)) for at, intents in holds
        ]

    def path_of(self, intent: int) -> Path:
        for path, intents in self._holds:
            if intents is None or intent in intents:
                return path
        return ()

    def answered(self, intent: int, points: Path, held: int) -> None:
        """Nothing to learn: the plan was fixed."""


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
        self._paths: dict[int, Path] = {}
        self._queue: deque[Path] = deque()

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
                for wanted in self.only:
                    if wanted[0] in points:
                        self._add(wanted)
        elif self.only is None and len(path) == 1 and held == 1 and path[0].kind is not PointKind.REQUEST:
            for point in points:
                if point.kind in COUNTED:
                    self._add((path[0], point))

    def _add(self, path: Path) -> None:
        if path in self.planned or len(self.planned) >= self.max_points:
            return
        self.planned.append(path)
        self._queue.extend([path] * self.repeat)
