"""Hold points by name: what a scenario, the history and the reports call a moment of a call.

A point is a kind and, for the kinds that can happen several times in one call, a
1-based index counted within one attempt: ``db_commit#2`` is the second committed
transaction of the attempt the point is looked for in. ``request`` and
``response`` happen once per attempt. A commit also has a *label*, what it
committed (``INSERT invoices``): a plan finds the same commit in another call by
its label and which of the call's commits with that label it is (``nth``), not by
its index alone, so a call that commits once more or once less than the clean one
(a warm-up row, an audit row) is held at the same commit, or is seen not to reach it.
A *path* is the points to hold one after the other: ``db_commit#1/db_commit#1``
holds the first attempt at its first commit, and then the retry at its own first
commit (a crash during the recovery).

A file operation the server makes on its data directory is a point too
(``fs_write#3``, ``fs_rename#1``: see :mod:`harness.crashpoints.fstrace`), labelled
by its path (``tasks.db``, ``notes.json.tmp -> notes.json``); the crash comes before
the operation runs. Each point can be crashed two ways: a process kill (everything
the server wrote survives) or a power loss (``fs_write#3@power_loss``: the kill,
then the data directory rolled back to what had been made durable).

Each kind is described once, by its facts (:data:`KINDS`): where it is seen, whether it is
counted, crashed, observed in every run; every set of kinds the harness uses is derived from
them (ARCHITECTURE.md, "Adding a crash-point kind").

Pure: the scenario model validates names with it, the hold controller counts with
it, the explorer and the reports read it back from the history.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class PointKind(enum.StrEnum):
    """Where the harness can hold a call, in the order a call passes them."""

    REQUEST = "request"
    """The request is at the server's door: held, it never reaches it. The control point: whatever the
    design, a try held here must take effect exactly once."""
    DB_STATEMENT = "db_statement"
    """A statement the server sent the harness's PostgreSQL, before the database runs it: held, the
    database has not seen it yet, so another attempt's statements can go first."""
    DB_COMMIT = "db_commit"
    """A transaction committed in the harness's PostgreSQL (whatever it wrote); its reply is held."""
    DOWNSTREAM = "downstream"
    """The effect sink recorded a call of the target's; its reply is held."""
    RESPONSE = "response"
    """The server's JSON-RPC answer to the call reached the fault proxy (a JSON body, or the event of an
    event stream that carries it); held, none of it reaches the client."""
    FS_CREATE = "fs_create"
    """A file or directory is about to be made in the data directory."""
    FS_TRUNCATE = "fs_truncate"
    """A file is about to be cut (``ftruncate``, or opened with ``O_TRUNC``)."""
    FS_WRITE = "fs_write"
    """Bytes are about to be written to a file (``write``, ``pwrite``, ...)."""
    FS_FSYNC = "fs_fsync"
    """A file's (or a directory's) ``fsync``/``fdatasync`` is about to run."""
    FS_RENAME = "fs_rename"
    """A name is about to be moved (``rename``, ``renameat2``): what a reader finds under the new name."""
    FS_UNLINK = "fs_unlink"
    """A name is about to be removed (a file's, or an empty directory's)."""


class Site(enum.StrEnum):
    """Where a point is seen: the harness's part that holds it and reports it to the decision router."""

    PROXY = "proxy"
    """The fault proxy in front of an HTTP pod, or the host of a stdio pod: a call's request and answer."""
    POSTGRES = "postgres"
    SINK = "sink"
    DOWNSTREAM = "downstream"
    FILES = "files"


@dataclass(frozen=True, slots=True)
class KindFacts:
    """What the harness knows of one kind of point: the one place a kind is described, so that every
    module asks these facts rather than listing kinds (ARCHITECTURE.md: adding a crash-point kind)."""

    sites: frozenset[Site]
    """Where it is seen; any one of them, if the scenario has it, serves (a downstream call is seen by
    the effect sink or the downstream proxy). Which scenario section each needs is the scenario rules'
    (:mod:`harness.scenario.rules`)."""
    phrase: str
    """What reaching it means, in an attempt's story when its history says nothing more of it."""
    counted: bool = True
    """It can happen several times in one attempt, so its name carries an index (``db_commit#2``)."""
    crashable: bool = True
    """Crash points hold and crash the pod there (fixed holds, explorations)."""
    observed: bool = True
    """Every run records it in each attempt's points (observe mode): cheap enough to count always."""
    writes: bool = True
    """Reaching it may change what a store holds (a commit, unless it only read; a downstream call; a
    file operation other than an fsync): a clean call's effect that no such point preceded was made
    where the harness cannot hold it."""
    boundary: bool = False
    """A file operation that changes what a crash leaves (what is durable, which name means what): an
    exploration tries it before the writes between two of them."""


_FILES = frozenset({Site.FILES})
KINDS: Mapping[PointKind, KindFacts] = {
    PointKind.REQUEST: KindFacts(
        frozenset({Site.PROXY}), "the request was at the server's door", counted=False, writes=False
    ),
    PointKind.DB_STATEMENT: KindFacts(
        frozenset({Site.POSTGRES}), "sent a statement", crashable=False, observed=False, writes=False
    ),
    PointKind.DB_COMMIT: KindFacts(frozenset({Site.POSTGRES}), "committed"),
    PointKind.DOWNSTREAM: KindFacts(
        frozenset({Site.SINK, Site.DOWNSTREAM}), "the downstream recorded a call"
    ),
    PointKind.RESPONSE: KindFacts(
        frozenset({Site.PROXY}), "the answer reached the proxy", counted=False, writes=False
    ),
    PointKind.FS_CREATE: KindFacts(_FILES, "about to make a file", boundary=True),
    PointKind.FS_TRUNCATE: KindFacts(_FILES, "about to cut a file", boundary=True),
    PointKind.FS_WRITE: KindFacts(_FILES, "about to write a file"),
    PointKind.FS_FSYNC: KindFacts(_FILES, "about to fsync", writes=False, boundary=True),
    PointKind.FS_RENAME: KindFacts(_FILES, "about to rename a file", boundary=True),
    PointKind.FS_UNLINK: KindFacts(_FILES, "about to remove a file", boundary=True),
}
"""Every kind's facts; a kind without them fails the unit tests (``tests/unit/test_point_kinds.py``)."""


def _kinds_where(test: Callable[[KindFacts], bool]) -> frozenset[PointKind]:
    """The kinds whose facts pass ``test``: the sets below."""
    return frozenset(k for k, facts in KINDS.items() if test(facts))


COUNTED = _kinds_where(lambda f: f.counted)
"""Kinds that can happen several times in one attempt, so their names carry an index."""
CRASH_KINDS = _kinds_where(lambda f: f.crashable)
"""What crash points hold and explore: a statement not yet run leaves nothing a crash there would not."""
OBSERVED = _kinds_where(lambda f: f.observed)
"""What every run's observe mode counts: a run's story tells what each attempt committed, and counting
every statement costs."""
FILE_KINDS = _kinds_where(lambda f: Site.FILES in f.sites)
"""The file tracer's points: operations on the data directory, each held before it runs."""
EDGES = _kinds_where(lambda f: Site.PROXY in f.sites)
"""A call's door and its answer: a crash there changes no store, whatever the design."""
SERVICE_KINDS = _kinds_where(lambda f: bool(f.sites & {Site.POSTGRES, Site.SINK, Site.DOWNSTREAM}))
"""Points of a store a harness service holds (a database, a downstream): what they change, the file
tracer does not see."""
BOUNDARIES = _kinds_where(lambda f: f.boundary)
"""File operations that change what a crash leaves (what is durable, which name means what); an
exploration tries them before the writes between them."""


def phrase(name: str) -> str:
    """What reaching the point named ``name`` (``db_commit#2``, as a history writes it) means in a story;
    ``passed`` for a name that is no point's."""
    try:
        kind = PointKind(name.partition(CRASH_SEPARATOR)[0].partition("#")[0])
    except ValueError:
        return "passed"
    return KINDS[kind].phrase


class Crash(enum.StrEnum):
    """How a point is crashed."""

    KILL = "kill"
    """SIGKILL: everything the server wrote survives, as a pod killed on a healthy node."""
    POWER_LOSS = "power_loss"
    """SIGKILL, then the data directory rolled back to what was durable (file bytes as of their last
    fsync, names as of their directory's): a node that lost power, its volume with it."""


CRASH_SEPARATOR = "@"
_COUNTED_NAMES = "|".join(sorted(k.value for k in COUNTED))
_ONCE_NAMES = "|".join(sorted(k.value for k in frozenset(PointKind) - COUNTED))
_CRASHES = "|".join(c.value for c in Crash)
_NAME = re.compile(
    rf"^({_ONCE_NAMES}|({_COUNTED_NAMES})#([1-9][0-9]{{0,3}}))(?:{CRASH_SEPARATOR}({_CRASHES}))?$"
)
_USE = ", ".join(k.value if k not in COUNTED else f"{k.value}#N" for k in PointKind)
"""Every point's name, for the error that says what one looks like."""
PATH_SEPARATOR = "/"
MAX_DEPTH = 2
"""A crash, and a crash during the recovery from it."""


@dataclass(frozen=True, slots=True)
class FileOp:
    """What a file operation does, as far as the crash states need it (:mod:`.states`): the file tracer
    tells it with the operation, before it runs. Never what it writes: a write's bytes hold the
    intent's marker, the same in no two calls."""

    paths: tuple[str, ...]
    """Relative to the data directory (outside it, whole: they start with ``/``); a rename's two."""
    node: str = ""
    """What it acts on or makes: ``file``, ``dir``, ``symlink``, ``special`` (a FIFO, a socket, a
    device), ``link`` (a hard link), ``unnamed`` (``O_TMPFILE``), ``all`` (``sync``); empty: unknown."""
    new: bool = False
    """A truncation that made the file (``open(path, "w")`` of a name not there)."""
    size: int | None = None
    """A truncation's length (0 for ``O_TRUNC``)."""
    exchange: bool = False
    """A rename that swaps its two names (``RENAME_EXCHANGE``)."""
    mapped: bool = False
    """Some file of the data directory was mapped shared and writable in the process: its bytes may
    change between two points with no operation to see."""


def file_op(paths: Sequence[str], info: Mapping[str, Any]) -> FileOp:
    """What the file tracer said of an operation (its ``info``) as a :class:`FileOp`; what it did not say
    is unknown, which the crash states read as "may change anything"."""
    size = info.get("size")
    return FileOp(
        tuple(paths),
        str(info.get("node") or ""),
        new=info.get("new") is True,
        size=size if isinstance(size, int) else None,
        exchange=info.get("exchange") is True,
        mapped=info.get("mapped") is True,
    )


@dataclass(frozen=True, slots=True, order=True)
class Point:
    kind: PointKind
    index: int = 1
    label: str | None = field(default=None, compare=False)
    """What it committed (``INSERT invoices``; a commit's), to find it in another call; not part of its
    name nor of its identity."""
    nth: int = field(default=1, compare=False)
    """Which of its attempt's points with this label it is."""
    reads: bool = field(default=False, compare=False)
    """A commit that only read: nothing of the call is durable there that was not before."""
    crash: Crash = Crash.KILL
    """How a try held here is crashed: part of the point's name and identity (the same operation
    crashed two ways is two points to explore), not of how it is found in a call."""
    op: FileOp | None = field(default=None, compare=False)
    """A file operation's effect (the tracer's word on it): what tells which points share a crash state."""

    def same(self, other: Point) -> bool:
        """Whether ``other`` is this point, both of calls already seen whole (the clean call's): by label
        and ``nth`` where both have a label, else by index. A call being held is matched with
        :func:`reached`."""
        if self.kind is not other.kind:
            return False
        if self.label is not None and other.label is not None:
            return (self.label, self.nth) == (other.label, other.nth)
        return self.index == other.index

    @property
    def name(self) -> str:
        base = f"{self.kind.value}#{self.index}" if self.kind in COUNTED else self.kind.value
        return base if self.crash is Crash.KILL else f"{base}{CRASH_SEPARATOR}{self.crash.value}"

    @property
    def operation(self) -> str:
        """Its name without how it is crashed (``fs_write#3``): where in the call it is."""
        return self.name.partition(CRASH_SEPARATOR)[0]

    def __str__(self) -> str:
        return self.name


_RANDOM = re.compile(
    r"[0-9a-fA-F]{8,}|[0-9]{6,}"
    r"|(?<=tmp)[a-z0-9_]{8}(?![A-Za-z0-9_])"
    r"|(?<=[A-Za-z._-])(?=[a-z]*[0-9_])[a-z0-9_]{8}(?![A-Za-z0-9_])"
    r"|(?<=tmp_obj_|tmp_idx_)[A-Za-z0-9]{6}|(?<=tmp_pack_)[A-Za-z0-9]{6}"
    r"|(?<=objects/)[0-9a-f]{2}(?=/)"
)
"""What a program puts in a temporary file's name to make it new each time: hex digests, timestamps and
counters; Python's ``tempfile`` names, with its own prefix (``tmpk3j_9x2a``) or another (GitPython's
``objp8kwwxvy``: eight letters, digits and underscores, a digit or an underscore among them, since a
word of eight letters is more often a name); git's own (``tmp_obj_6FcNsW``), and the directory a
loose object falls in by its hash (``objects/5f/``). A name starred that was not random costs only a
shared label, told apart by its ``nth``; one left unstarred makes every try there "never reached"."""


def file_label(path: str) -> str:
    """A file operation's path as its point's label: random parts starred (``memory.jsonl.*``), so that
    a temporary file named anew each call is the same point in every call."""
    return _RANDOM.sub("*", path)


def _parts(label: str) -> frozenset[str]:
    return frozenset(label.split("; "))


def nth_with(label: str, points: Sequence[Point]) -> int:
    """How many of ``points`` commit at least what ``label`` names (``INSERT invoices`` is in ``INSERT
    invoices; INSERT idempotency_keys``): the ``nth`` of the last of them, if it has that label."""
    want = _parts(label)
    return sum(1 for p in points if p.label is not None and want <= _parts(p.label))


def reached(planned: Point, window: Sequence[Point]) -> bool:
    """Whether the point just reached, the last of ``window`` (its attempt's points so far), is
    ``planned``: by label where both have one (it commits at least what the planned one did, and is the
    ``nth`` such commit of its call: a fix that adds the key record to the effect's transaction is still
    held at the effect), else by index."""
    point = window[-1]
    if planned.kind is not point.kind:
        return False
    if planned.label is None or point.label is None:
        return planned.index == point.index
    if not _parts(planned.label) <= _parts(point.label):
        return False
    return nth_with(planned.label, [p for p in window if p.kind is point.kind]) == planned.nth


def parse_point(name: str) -> Point:
    """``db_commit#2`` (``fs_write#3@power_loss``) -> Point; ValueError saying what a name looks like."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a hold point; use {_USE}, N from 1, optionally @power_loss")
    crash = Crash(match[4]) if match[4] else Crash.KILL
    if match[2] is None:
        return Point(PointKind(match[1]), crash=crash)
    return Point(PointKind(match[2]), int(match[3]), crash=crash)


RACE_HELD = ("original", "retry", "first", "second")
"""Whose point a race's ordering holds (``races.Held``): the original's, the retry sent there; or the
retry's own while the original runs. ``first`` and ``second`` name the same two of a race between two
calls (``races --second call``): the first call's point, the second sent there; or the second's own."""


def parse_ordering(text: str) -> tuple[str, Point]:
    """A race's ordering id, ``original:db_commit#3`` -> whose point is held, and which; ValueError saying
    what an id looks like."""
    held, sep, name = text.partition(":")
    if not sep or held not in RACE_HELD:
        raise ValueError(
            f"{text!r} is not an ordering; use original:POINT (the retry sent at the original's point) or "
            "retry:POINT (the retry held at its point while the original runs), first:POINT or second:POINT "
            "for two calls (races --second call), as races names them"
        )
    if "@" in name:
        raise ValueError(f"{text!r}: a race holds and releases, it crashes nothing; drop the @")
    return held, parse_point(name)


def parse_path(text: str) -> tuple[Point, ...]:
    """``db_commit#1/db_commit#1`` -> its points; ValueError for a bad name or a path deeper than 2."""
    parts = text.split(PATH_SEPARATOR)
    if len(parts) > MAX_DEPTH:
        raise ValueError(
            f"{text!r}: a path holds at most {MAX_DEPTH} points (a crash and one in its recovery)"
        )
    return tuple(parse_point(p) for p in parts)


def path_name(path: tuple[Point, ...]) -> str:
    return PATH_SEPARATOR.join(p.name for p in path)
