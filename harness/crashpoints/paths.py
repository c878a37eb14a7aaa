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
2. the call's points, each crashed as a kill and (where it wrote files in its data
   directory and ``power_loss`` is asked for) as a power loss (``fs_write#3@power_loss``),
   make its *crash states* (:mod:`harness.crashpoints.states`): points that leave the
   same files and bytes are one state, tried at its first point and standing for the
   others. Each state is held in ``repeat`` intents, every state's first try before any
   state's second;
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

Where the call wrote files the states are planned the store first (:func:`store_first`):
``request`` and ``response`` (the controls, and after the whole call), then what
changes what a crash leaves of the store (an fsync, a rename, an unlink, a truncation,
a creation of the files the effect source reads or of those renamed onto them; a commit,
a downstream call), then the store's writes (the first and last of a run first), then
the same for other files (copies, logs). A call that wrote no file is planned in its order.

No try begins once the budget (``budget_s``, on the ``clock`` the plan is given) is spent:
the states left are untried (the exploration is then inconclusive), the paths of two left
not explored. Points are held by what they commit (:meth:`Point.same`). Intents the plan has
nothing for run clean. Pure but for that clock: the same answers in the same time give the
same plan, so a run of it can be read back from its history.

An exploration in ``jobs`` copies of the target (``crashpoints --jobs``, see
:mod:`harness.crashpoints.jobs`) runs this plan in each, every copy with its own
clean call: copy ``job`` keeps the clean call's states whose place in the plan is
``job`` modulo ``jobs`` (the ``job``-th, then every ``jobs``-th after it), and the
retries' paths of two it finds from those.
"""

from __future__ import annotations

import fnmatch
import math
import posixpath
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from harness.crashpoints.points import (
    EDGES,
    FILE_KINDS,
    KINDS,
    SERVICE_KINDS,
    Crash,
    Point,
    PointKind,
    parse_path,
)
from harness.crashpoints.states import CrashState, crash_states

Path = tuple[Point, ...]


def labelled(path: Path, labels: Sequence[str | None] | None) -> Path:
    """``path`` with each point's label (``None``: found by its index), as a reproducer names them."""
    if not labels:
        return path
    return tuple(
        replace(p, label=label) if label is not None else p for p, label in zip(path, labels, strict=False)
    )


def store_first(
    states: Sequence[CrashState], call: Sequence[Point], store: Sequence[str]
) -> list[CrashState]:
    """A call's crash states in the order an exploration tries them (see the module's docstring), each
    placed by its most telling point: ``call``, the clean call's points in order; ``store``, globs of the
    files the effect source reads (relative to the data directory)."""
    stored = _store_files(call, store)
    edges = _edges(call)
    position = {p: i for i, p in enumerate(call)}

    def rank(point: Point) -> tuple[int, int]:
        at = replace(point, crash=Crash.KILL)
        if point.kind in EDGES:
            kind = 0
        elif point.kind not in FILE_KINDS:
            kind = 1  # a commit, a downstream call: where a database's or a downstream's store changes
        elif point.kind is not PointKind.FS_WRITE:
            kind = 1 if _on_store(point, stored) else 4
        else:
            kind = (2 if _on_store(point, stored) else 5) + (0 if at in edges else 1)
        return kind, position.get(at, len(position))

    ordered = sorted(enumerate(states), key=lambda item: (min(map(rank, item[1].points)), item[0]))
    return [state for _, state in ordered]


def _on_store(point: Point, stored: set[str]) -> bool:
    """Whether a point's operation is on the store: on one of its files, or an fsync of a directory
    holding one (what makes its names durable), or of everything."""
    files = _files(point)
    if point.op is not None and point.op.node == "all":
        return True
    if point.op is not None and point.op.node == "dir" and point.kind is PointKind.FS_FSYNC:
        where = {"" if f == "." else f.rstrip("/") for f in files}
        return any(posixpath.dirname(f) in where for f in stored)
    return bool(set(files) & stored)


def _files(point: Point) -> tuple[str, ...]:
    """The files a point's operation names (its tracer's paths, else its label's)."""
    if point.op is not None:
        return point.op.paths
    return tuple((point.label or "").split(" -> ")) if point.label else ()


def _store_files(points: Sequence[Point], store: Sequence[str]) -> set[str]:
    """The files of the call that are the store's: those the globs match, and those renamed onto them
    (a temporary file that becomes the store)."""
    stored = {f for p in points for f in _files(p) if any(fnmatch.fnmatchcase(f, g) for g in store)}
    for point in reversed(points):  # a rename onto a temporary file that is itself renamed on
        files = _files(point)
        if point.kind is PointKind.FS_RENAME and len(files) == 2 and files[1] in stored:
            stored.add(files[0])
    return stored


def _edges(points: Sequence[Point]) -> set[Point]:
    """The first and last write of each run of writes between two other operations."""
    edges: set[Point] = set()
    run: list[Point] = []
    for point in [*points, None]:
        if point is not None and point.kind is PointKind.FS_WRITE:
            run.append(point)
            continue
        edges.update(run[:1] + run[-1:])
        run = []
    return edges


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
        self.same: dict[Path, tuple[Point, ...]] = {}
        self.points = 0
        self.ran_out = False
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
    """Every crash state of a clean call, ``repeat`` times each, then the retries' own commits, within
    ``budget_s`` seconds of the ``clock``."""

    def __init__(
        self,
        repeat: int,
        only: Sequence[str] | None = None,
        *,
        power_loss: bool = False,
        share: tuple[int, int] = (1, 1),
        budget_s: float = math.inf,
        clock: Callable[[], float] = lambda: 0.0,
        store: Sequence[str] | None = None,
    ) -> None:
        self.repeat = repeat
        self.share = share
        """This copy's number and how many explore side by side: which of the clean call's states it tries."""
        self.power_loss = power_loss
        """Each point is also crashed as a power loss, where the call wrote files."""
        self.only = None if only is None else [parse_path(name) for name in only]
        self.store = None if store is None else tuple(store)
        """Globs of the store's files in the data directory (tried first); None: a store the harness does
        not see, so no two points are known to leave the same state."""
        self._clock = clock
        self.deadline = clock() + budget_s
        self.ran_out = False
        """The budget was spent with tries left to make."""
        self.clean: Path | None = None
        """The points of the clean call, once it was answered."""
        self.clean_intent: int | None = None
        """Which intent the clean call was (0, or 1 after a warm-up)."""
        self._warmed = False
        self.points = 0
        """Crash points of the clean call (each point, each way it is crashed): what its states stand for."""
        self.planned: list[Path] = []
        """Every path planned, in the order they are tried: a state's first point, or a path of two."""
        self.same: dict[Path, tuple[Point, ...]] = {}
        """Per path planned, the other points of its crash state: one try stands for them."""
        self._paths: dict[int, Path] = {}
        self._rounds: list[deque[Path]] = [deque() for _ in range(repeat)]
        """The tries to make, by round: every path's first try before any path's second."""
        self._again: dict[Path, int] = {}

    def path_of(self, intent: int) -> Path:
        if intent not in self._paths:
            # One call at a time: when an intent starts, every earlier one has been seen to its end.
            queued = next((tries for tries in self._rounds if tries), None)
            self._paths[intent] = queued.popleft() if queued and self.clean is not None else ()
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
                self._plan_states(points)
            else:  # asked for by name: a path of two is held whether or not a retry was seen to reach it
                by_name = {p: p for p in points}  # the clean call's points, with their labels
                for wanted in self.only:
                    found = by_name.get(replace(wanted[0], crash=Crash.KILL))
                    if found is not None:
                        self._add((replace(found, crash=wanted[0].crash), *wanted[1:]))
            self._take_share()
        elif self.only is None and len(path) == 1 and held == 1 and _left_work(path[0]):
            for point in points:  # the retry's own commits and downstream calls: a crash in the recovery
                if point.kind in SERVICE_KINDS and KINDS[point.kind].writes and not point.reads:
                    self._add((path[0], point))

    def _plan_states(self, points: Path) -> None:
        """The clean call's crash states, in the order they are tried."""
        files = any(p.kind in FILE_KINDS for p in points)
        crashes = [Crash.KILL, Crash.POWER_LOSS] if self.power_loss and files else [Crash.KILL]
        # A call that wrote no file keeps each point its own: what changed between them is not seen here.
        states = crash_states(points, crashes, merge=self.store is not None and files)
        self.points = len(points) * len(crashes)
        for state in store_first(states, points, self.store or ()) if files else states:
            self._add((state.tried,), state.same)

    def exhausted(self) -> bool:
        """Whether every try has been made, or no more may begin (the budget is spent): asked before the
        next intent starts (one call at a time, so every earlier try has ended and added what it found);
        the run then starts no more."""
        if self.clean is None:
            return False
        if not any(self._rounds):
            return True
        if self._clock() >= self.deadline:
            self.ran_out = True
        return self.ran_out

    def unheld(self, intent: int) -> None:
        """``intent`` ended without being held along its whole path: try the path again (bounded)."""
        path = self._paths.get(intent, ())
        if not path or self._again.get(path, 0) >= self.repeat:
            return
        self._again[path] = self._again.get(path, 0) + 1
        self._rounds[0].appendleft(path)

    def _take_share(self) -> None:
        """Keep this copy's share of the clean call's paths (all of them in an exploration of one copy)."""
        job, jobs = self.share
        self.planned = self.planned[job - 1 :: jobs]
        for tries in self._rounds:
            tries.clear()
            tries.extend(self.planned)

    def _add(self, path: Path, same: tuple[Point, ...] = ()) -> None:
        if path in self.planned:
            return
        self.planned.append(path)
        self.same[path] = same
        for tries in self._rounds:
            tries.append(path)
