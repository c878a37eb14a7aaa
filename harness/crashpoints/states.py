"""Crash states: which points of a call leave the same files behind, so that one try stands for them all.

A crash at a point leaves a *crash state*: the files and bytes a restarted server finds (the page
cache, after a kill; what was durable, after a power loss's rollback). Two points that leave the
same state are one try: the server restarts on the same files either way and the retry meets the
same store. ALICE (Pillai et al., OSDI 2014) builds the states a crash can leave from a recorded
trace of file operations; the harness need not build them (the rollback of
:mod:`harness.crashpoints.durable` makes the real one), only know which points' states are the
same. It computes that from the clean call's trace, the operations as the file tracer told them
(:class:`~harness.crashpoints.points.FileOp`), before any try.

The model is symbolic, so that what it proves holds for every call and not only the clean one:
the call starts from files nobody knows (a kill's and a power loss's, each its own unknown), and
each operation is applied to a description of both sides, on POSIX's and the power-loss model's
terms (:mod:`harness.crashpoints.durable`):

- the names: each path names the file it named at the start, or what the call made or moved there,
  or nothing (a create, a rename, an unlink; ``open(path, "w")`` of a name not there makes one);
- the bytes: a file's start bytes, or none (made in the call, or truncated to 0), then every write
  and other truncation in order, each its own; never compared by value, since a write's bytes hold
  the intent's marker, the same in no two calls;
- what a power loss keeps: a file's bytes as of its last fsync, a directory's names as of its last
  fsync (a rename within one directory, a file made, a name removed: not before it), everything
  after a ``sync``.

A kill at a point leaves the kill side as it is before the point's operation runs; a power loss
leaves the durable side. Two points (and crashes) share a state only where the descriptions are
equal, which then makes the files and bytes equal whatever the start: an fsync changes nothing a
kill leaves, and a write, a create or a rename within one directory nothing a power loss leaves
until the next fsync that makes it durable. ``request`` stands where the call has done nothing
yet, ``response`` where it has done everything.

When unsure, a point is a state of its own: an operation the model does not follow (a hard link,
a rename of a directory or with an end outside the data directory, a file made with ``O_TMPFILE``
and linked, an operation the tracer said nothing of) starts a new *epoch*, and no state before it
equals one after; a database commit or a downstream call is a state of its own and starts one too
(what it changed is the database's or the downstream's, which this model does not see); a file of
the data directory mapped shared and writable changes without an operation to see, so no two kills
share a state in such a call. And only the store the harness sees counts: where the effect source
reads neither the data directory nor a service the harness holds (a ``tool`` or ``command``
source), every point is its own state (:func:`crash_states`'s ``merge``). What a server keeps
outside what the harness sees (an outside database it reaches directly) no crash point sees either.

Pure: a function of the clean call's points.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.crashpoints.points import FILE_KINDS, SERVICE_KINDS, Crash, FileOp, Point, PointKind

Node = tuple[Any, ...]
"""A file or directory the model knows: ``("v", path, epoch)`` what a kill found at ``path`` when the
epoch began, ``("d", path, epoch)`` what a power loss would have, ``("n", k)`` what the call's k-th
operation made."""
Bytes = tuple[Any, tuple[int, ...]]
"""A file's bytes: where they start (``("vb", node)`` a kill's start bytes of ``node``, ``("db", node)``
a power loss's, ``"empty"``), then the operations that changed them since, by number."""
EMPTY = "empty"


@dataclass
class _Side:
    """One side of the files: what a kill leaves (``start="v"``) or what a power loss leaves (``"d"``)."""

    start: str
    names: dict[str, Node | None] = field(default_factory=dict)
    """Paths the call changed, with what each names now (None: nothing)."""
    dirs: dict[str, str] = field(default_factory=dict)
    """Directories whose unchanged names are not this side's start: ``"v"`` (a kill's start: a power
    loss keeps the directory as a kill found it, once it was fsynced), ``""`` (made in the call: none)."""
    bytes: dict[Node, Bytes] = field(default_factory=dict)
    """Files whose bytes the call changed, on this side."""

    def node(self, path: str, epoch: int) -> Node | None:
        if path in self.names:
            return self.names[path]
        base = self.dirs.get(posixpath.dirname(path), self.start)
        return None if base == "" else (base, path, epoch)

    def content(self, node: Node) -> Bytes:
        if node in self.bytes:
            return self.bytes[node]
        if node[0] == "n":
            return (EMPTY, ())
        return ("vb" if self.start == "v" else "db", node), ()

    def key(self, epoch: int) -> tuple[Any, ...]:
        """This side's description: equal descriptions, equal files and bytes, whatever the start. A file
        the call made counts only while it has a name (unnamed, nothing finds it after the crash)."""
        named = {n for n in self.names.values() if n is not None}
        kept = sorted((repr(n), self.bytes[n]) for n in self.bytes if n[0] != "n" or n in named)
        return (
            epoch,
            self.start,
            tuple(sorted(self.dirs.items())),
            tuple(sorted((p, repr(n)) for p, n in self.names.items())),
            tuple(kept),
        )


@dataclass
class _Files:
    """Both sides of the data directory as the call goes, from an unknown start."""

    mapped: bool
    """A file of the data directory is mapped shared and writable: what reaches its bytes through the
    mapping is seen by no operation."""
    epoch: int = 0
    kill: _Side = field(default_factory=lambda: _Side("v"))
    durable: _Side = field(default_factory=lambda: _Side("d"))

    def restart(self) -> None:
        """An operation the model cannot follow: a new epoch, whose states equal none before it."""
        self.epoch += 1
        self.kill, self.durable = _Side("v"), _Side("d")

    def apply(self, number: int, point: Point) -> None:
        """The operation of ``point`` (the call's ``number``-th) has run."""
        op = point.op
        if op is None or not op.paths or any(p.startswith("/") for p in op.paths):
            self.restart()  # the tracer said nothing of it, or it reaches outside the data directory
            return
        kind = point.kind
        if kind is PointKind.FS_WRITE:
            self._change(op.paths[0], number)
        elif kind is PointKind.FS_TRUNCATE:
            self._truncate(op, number)
        elif kind is PointKind.FS_CREATE:
            self._create(op, number)
        elif kind is PointKind.FS_UNLINK:
            self.kill.names[op.paths[0].rstrip("/")] = None
        elif kind is PointKind.FS_RENAME:
            self._rename(op)
        elif kind is PointKind.FS_FSYNC:
            self._fsync(op, number)
        else:
            self.restart()

    def _change(self, path: str, number: int) -> None:
        node = self.kill.node(path, self.epoch)
        if node is None:
            self.restart()  # a write to a name the model says is not there: it cannot follow
            return
        start, changes = self.kill.content(node)
        self.kill.bytes[node] = (start, (*changes, number))

    def _truncate(self, op: FileOp, number: int) -> None:
        path = op.paths[0]
        if op.new:  # ``open(path, "w")`` of a name not there: a file made, empty
            self.kill.names[path] = ("n", number)
            return
        node = self.kill.node(path, self.epoch)
        if node is None or op.size is None:
            self.restart()
        elif op.size == 0:
            self.kill.bytes[node] = (EMPTY, ())
        else:
            self._change(path, number)

    def _create(self, op: FileOp, number: int) -> None:
        path = op.paths[0].rstrip("/")
        if op.node == "unnamed":
            return  # no name yet: nothing a crash leaves can find it (its link restarts the model)
        if op.node not in ("file", "dir", "symlink", "special"):
            self.restart()  # a hard link: two names of one file, which this model keeps apart
            return
        self.kill.names[path] = ("n", number)
        if op.node == "dir":
            self.kill.dirs[path] = self.durable.dirs[path] = ""

    def _rename(self, op: FileOp) -> None:
        old, new = op.paths
        if op.exchange or op.node != "file" or posixpath.dirname(old) != posixpath.dirname(new):
            self.restart()  # across directories (durable once either is fsynced), a directory, a swap
            return
        self.kill.names[new] = self.kill.node(old, self.epoch)
        self.kill.names[old] = None

    def _fsync(self, op: FileOp, number: int) -> None:
        if op.node == "all":  # sync: everything a kill leaves is what a power loss leaves
            if self.mapped:
                self.restart()  # with what the mapping wrote, unseen
                return
            kill = self.kill
            self.durable = _Side("v", dict(kill.names), dict(kill.dirs), dict(kill.bytes))
        elif op.node == "dir":
            self._fsync_dir(op.paths[0])
        elif op.node == "file":
            for path in op.paths:
                node = self.kill.node(path, self.epoch)
                if node is None:
                    self.restart()
                    return
                if self.mapped:  # what was written through the mapping is made durable too, unseen
                    self._change(path, number)
                self.durable.bytes[node] = self.kill.content(node)
        else:
            self.restart()

    def _fsync_dir(self, directory: str) -> None:
        """A directory's names as they are now are what a power loss keeps of it."""
        where = "" if directory == "." else directory
        for path, node in self.kill.names.items():
            if posixpath.dirname(path) == where:
                self.durable.names[path] = node
        self.durable.dirs[where] = self.kill.dirs.get(where, "v")

    def state(self, crash: Crash) -> tuple[Any, ...]:
        side = self.kill if crash is Crash.KILL else self.durable
        return (crash.value, side.key(self.epoch))


@dataclass(frozen=True, slots=True)
class CrashState:
    """Points (each with how it is crashed) that leave the same files: one try, at the first of them."""

    points: tuple[Point, ...]
    """In the call's order; the first is where the try is held."""

    @property
    def tried(self) -> Point:
        return self.points[0]

    @property
    def same(self) -> tuple[Point, ...]:
        """The points it stands for besides the one tried."""
        return self.points[1:]


def crash_states(
    points: Sequence[Point], crashes: Sequence[Crash], *, merge: bool = True
) -> list[CrashState]:
    """The distinct crash states of a call whose points were ``points`` (the clean call's, in order),
    each crashed every way of ``crashes``; in the order their first point comes, at one point in the
    order of ``crashes``. ``merge=False``: every point (and crash) its own state, where the store is not
    one the harness sees (see the module's docstring)."""
    files = _Files(mapped=any(p.op is not None and p.op.mapped for p in points))
    found: dict[tuple[Any, ...], list[Point]] = {}
    for number, point in enumerate(points):
        seen = point.kind not in SERVICE_KINDS
        if not seen:
            files.restart()  # a commit or a downstream call: it changed, before this point, what is not seen
        for crash in crashes:
            alone = not merge or not seen or (crash is Crash.KILL and files.mapped)
            key = ("own", number, crash.value) if alone else files.state(crash)
            found.setdefault(key, []).append(replace(point, crash=crash))
        if point.kind in FILE_KINDS:
            files.apply(number, point)
    return [CrashState(tuple(group)) for group in found.values()]
