"""Which path of hold points each intent is held along: fixed by the scenario, or found by exploring.

A fixed plan (``faults.crash_points.holds``) is what a reproducer scenario
carries: every intent it names is held along one path. An exploring plan
(``faults.crash_points.explore``, what ``mcp-chaos crashpoints`` runs) decides
as the run goes, one intent at a time:

1. intent 0 is the clean call: nothing is held, and the points its answered
   attempt passed are the points of the call (``request``, ``db_commit#1``, ...).
   Where it wrote files, it is a warm-up instead and intent 1 the clean call: the
   first call on a fresh store makes what every later call finds (the file, the
   database), so its points are not those of the calls that follow;
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

Where the call wrote files (the file tracer's points) and ``power_loss`` is asked
for, each single point is planned twice, as a kill and as a power loss
(``fs_write#3@power_loss``), the two one after the other. Such a call's points
are planned most telling first (others in the call's order): ``request`` and ``response`` (the controls, and
after the whole call), then the operations that change what a crash leaves (commits,
downstream calls, each fsync, rename, unlink, truncation, creation), then the first
and last write between two of those, then the other writes: a SQLite transaction
writes many pages, and ``max_points`` may stop among them.

At most ``max_points`` paths are planned, the single points first; the clean
call's points beyond that are ``skipped`` (the exploration is then inconclusive:
it did not try them), the retries' beyond it ``deferred``. Points are held by what
they commit (:meth:`Point.same`). Intents the plan has nothing for run clean.
Pure and deterministic: the same answers give the same plan, so a run of it can
be read back from its history.

An exploration in ``jobs`` copies of the target (``crashpoints --jobs``, see
:mod:`harness.crashpoints.jobs`) runs this plan in each, every copy with its own
clean call: copy ``job`` keeps the clean call's paths whose place in the plan is
``job`` modulo ``jobs`` (the ``job``-th, then every ``jobs``-th after it), and the
retries' paths of two it finds from those. Those share the slots the single points
left under ``max_points``: each copy fills them all with its own, as an exploration
in one copy would have if its points were the only ones, and the merge keeps, in
the order one copy would have found them, as many as one copy would have tried.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace

from harness.crashpoints.points import FILE_KINDS, Crash, Point, PointKind, parse_path

Path = tuple[Point, ...]


def labelled(path: Path, labels: Sequence[str | None] | None) -> Path:
    """``path`` with each point's label (``None``: found by its index), as a reproducer names them."""
    if not labels:
        return path
    return tuple(
        replace(p, label=label) if label is not None else p for p, label in zip(path, labels, strict=False)
    )


def telling_first(points: Sequence[Point]) -> list[Point]:
    """The clean call's points in the order an exploration tries them (see the module's docstring)."""
    ends = [p for p in points if p.kind in (PointKind.REQUEST, PointKind.RESPONSE)]
    boundaries = [p for p in points if p not in ends and p.kind is not PointKind.FS_WRITE]
    edges: list[Point] = []
    run: list[Point] = []
    for point in [*points, None]:
        if point is not None and point.kind is PointKind.FS_WRITE:
            run.append(point)
            continue
        edges += [run[0], run[-1]] if len(run) > 1 else run
        run = []
    rest = [p for p in points if p.kind is PointKind.FS_WRITE and p not in edges]
    return [*ends, *boundaries, *edges, *rest]


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
        self.clean_intent: int | None = None
        """A fixed plan has no clean call."""

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

    def __init__(
        self,
        repeat: int,
        max_points: int,
        only: Sequence[str] | None = None,
        *,
        power_loss: bool = False,
        share: tuple[int, int] = (1, 1),
    ) -> None:
        self.repeat = repeat
        self.share = share
        """This copy's number and how many explore side by side: which of the clean call's paths it tries."""
        self._first = (0, 0)
        """Paths planned from the clean call: this copy's, and all copies' (the slots left for the rest)."""
        self.max_points = max_points
        self.power_loss = power_loss
        """Each point is also crashed as a power loss, where the call wrote files."""
        self.only = None if only is None else [parse_path(name) for name in only]
        self.clean: Path | None = None
        """The points of the clean call, once it was answered."""
        self.clean_intent: int | None = None
        """Which intent the clean call was (0, or 1 after a warm-up)."""
        self._warmed = False
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
            if not self._warmed and any(p.kind in FILE_KINDS for p in points):
                self._warmed = True  # a warm-up: the next call is the clean one
                return
            self.clean, self.clean_intent = points, intent
            if self.only is None:
                files = any(p.kind in FILE_KINDS for p in points)
                crashes = [Crash.KILL, Crash.POWER_LOSS] if self.power_loss and files else [Crash.KILL]
                for point in telling_first(points) if files else points:
                    for crash in crashes:
                        self._add((replace(point, crash=crash),))
            else:  # asked for by name: a path of two is held whether or not a retry was seen to reach it
                by_name = {p: p for p in points}  # the clean call's points, with their labels
                for wanted in self.only:
                    found = by_name.get(replace(wanted[0], crash=Crash.KILL))
                    if found is not None:
                        self._add((replace(found, crash=wanted[0].crash), *wanted[1:]))
            self._take_share()
        elif self.only is None and len(path) == 1 and held == 1 and _left_work(path[0]):
            for point in points:  # the retry's own commits and downstream calls: a crash in the recovery
                if point.kind in (PointKind.DB_COMMIT, PointKind.DOWNSTREAM) and not point.reads:
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

    def _take_share(self) -> None:
        """Keep this copy's share of the clean call's paths (all of them in an exploration of one copy)."""
        job, jobs = self.share
        every = len(self.planned)
        self.planned = self.planned[job - 1 :: jobs]
        self._queue = deque(path for path in self.planned for _ in range(self.repeat))
        self._first = (len(self.planned), every)

    def _add(self, path: Path) -> None:
        if path in self.planned or path in self.skipped or path in self.deferred:
            return
        own, every = self._first
        if len(self.planned) - own >= self.max_points - every:
            (self.skipped if len(path) == 1 else self.deferred).append(path)
            return
        self.planned.append(path)
        self._queue.extend([path] * self.repeat)
