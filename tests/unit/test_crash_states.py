"""Crash states: the points of a call that leave the same files after a kill, and after a power loss.

Each case is a call's trace as the file tracer tells it (the operations, never their bytes); the last
test checks the model against the files themselves: every group of points it calls one state leaves
the same names and bytes, after a kill and after a power loss, from starts the call cannot tell apart.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from harness.crashpoints.points import Crash, FileOp, Point, PointKind
from harness.crashpoints.states import crash_states

K = PointKind
BOTH = [Crash.KILL, Crash.POWER_LOSS]


def call(*ops: tuple[PointKind, FileOp]) -> list[Point]:
    """``request``, the operations (numbered per kind, as the router counts them), ``response``."""
    counts: dict[PointKind, int] = {}
    points = [Point(K.REQUEST)]
    for kind, op in ops:
        counts[kind] = counts.get(kind, 0) + 1
        points.append(Point(kind, counts[kind], op=op))
    return [*points, Point(K.RESPONSE)]


def groups(points: list[Point], crashes: list[Crash] = BOTH, *, merge: bool = True) -> list[list[str]]:
    return [[p.name for p in s.points] for s in crash_states(points, crashes, merge=merge)]


def write(path: str) -> tuple[PointKind, FileOp]:
    return K.FS_WRITE, FileOp((path,))


def fsync(path: str, node: str = "file") -> tuple[PointKind, FileOp]:
    return K.FS_FSYNC, FileOp((path,), node)


def rename(old: str, new: str) -> tuple[PointKind, FileOp]:
    return K.FS_RENAME, FileOp((old, new), "file")


def made(path: str) -> tuple[PointKind, FileOp]:
    """``open(path, "w")`` of a name not there."""
    return K.FS_TRUNCATE, FileOp((path,), new=True, size=0)


DURABLE = call(
    made("notes.jsonl.tmp"),
    write("notes.jsonl.tmp"),
    fsync("notes.jsonl.tmp"),
    rename("notes.jsonl.tmp", "notes.jsonl"),
    fsync(".", "dir"),
)


def test_a_durable_file_store_is_six_states_of_fourteen_points() -> None:
    """A temporary file, its fsync, the rename, the directory's fsync: a kill at the fsync leaves what a
    kill at the rename does; a power loss anywhere before the directory's fsync leaves the store as it
    was (the temporary file was never made durable by name)."""
    assert groups(DURABLE) == [
        ["request", "fs_truncate#1"],
        [
            "request@power_loss",
            "fs_truncate#1@power_loss",
            "fs_write#1@power_loss",
            "fs_fsync#1@power_loss",
            "fs_rename#1@power_loss",
            "fs_fsync#2@power_loss",
        ],
        ["fs_write#1"],
        ["fs_fsync#1", "fs_rename#1"],
        ["fs_fsync#2", "response"],
        ["response@power_loss"],
    ]


def test_a_rename_never_fsynced_is_one_power_loss_state_and_each_kill_its_own() -> None:
    rename_only = call(
        made("notes.jsonl.tmp"), write("notes.jsonl.tmp"), rename("notes.jsonl.tmp", "notes.jsonl")
    )
    assert groups(rename_only) == [
        ["request", "fs_truncate#1"],
        [
            "request@power_loss",
            "fs_truncate#1@power_loss",
            "fs_write#1@power_loss",
            "fs_rename#1@power_loss",
            "response@power_loss",
        ],
        ["fs_write#1"],
        ["fs_rename#1"],
        ["response"],
    ]


def test_a_rewrite_in_place_leaves_the_store_empty_at_its_first_write() -> None:
    """``open(path, "w")`` of the store: the kill before its first write finds it empty, a state of its
    own, whatever the file held before."""
    torn = call((K.FS_TRUNCATE, FileOp(("notes.jsonl",), size=0)), write("notes.jsonl"), write("notes.jsonl"))
    assert groups(torn, [Crash.KILL]) == [
        ["request", "fs_truncate#1"],
        ["fs_write#1"],
        ["fs_write#2"],
        ["response"],
    ]


def test_sqlite_with_its_defaults_is_seventeen_states_of_thirty_six_points() -> None:
    """The rollback journal: made, written, fsynced, its directory fsynced, its header written and
    fsynced, the database written and fsynced, the journal deleted (and its deletion never fsynced)."""
    journal, db = "notes.db-journal", "notes.db"
    sqlite = call(
        (K.FS_CREATE, FileOp((journal,), "file")),
        *[write(journal)] * 7,
        fsync(journal),
        fsync(".", "dir"),
        write(journal),
        fsync(journal),
        write(db),
        write(db),
        fsync(db),
        (K.FS_UNLINK, FileOp((journal,), "file")),
    )
    found = groups(sqlite)
    assert len(found) == 17
    assert sum(map(len, found)) == 36
    power = [g for g in found if g[0].endswith("@power_loss")]
    assert [g[0] for g in power] == [
        "request@power_loss",  # ... to the directory's fsync: the journal is not there after the crash
        "fs_write#8@power_loss",  # the journal made durable, its header not yet
        "fs_write#9@power_loss",  # the journal's header durable, the database not yet written
        "fs_unlink#1@power_loss",  # the database durable, the journal too (its deletion is not)
    ]
    assert len(power[0]) == 11
    assert ["fs_fsync#1", "fs_fsync#2", "fs_write#8"] in found  # two fsyncs change nothing a kill leaves


def test_a_file_mapped_writable_leaves_every_kill_its_own_state() -> None:
    """SQLite's write-ahead log maps its -shm file: what is written through it is no operation."""
    shm = FileOp(("invoices.db-wal",), mapped=True)
    wal = call((K.FS_WRITE, shm), (K.FS_FSYNC, FileOp(("invoices.db-wal",), "file", mapped=True)))
    assert groups(wal) == [
        ["request"],
        ["request@power_loss", "fs_write#1@power_loss", "fs_fsync#1@power_loss"],
        ["fs_write#1"],
        ["fs_fsync#1"],
        ["response"],
        ["response@power_loss"],
    ]


def test_what_the_model_cannot_follow_starts_a_new_epoch() -> None:
    """A hard link, a rename across directories, an operation the tracer said nothing of, a commit of the
    database: no state before it equals one after, though nothing between them changed the files."""
    for unknown in [
        (K.FS_CREATE, FileOp(("b",), "link")),
        rename("a", "sub/a"),
        (K.FS_RENAME, FileOp(("a", "/elsewhere/a"), "file")),
        (K.FS_WRITE, FileOp(())),
    ]:
        points = call(fsync("a"), unknown, fsync("a"))
        assert ["fs_fsync#1", "fs_fsync#2"] not in groups(points, [Crash.KILL]), unknown
    commit = [Point(K.REQUEST), Point(K.DB_COMMIT, 1), Point(K.RESPONSE)]
    assert groups(commit, [Crash.KILL]) == [["request"], ["db_commit#1"], ["response"]]
    blind = call(fsync("a"))
    blind[1] = Point(K.FS_FSYNC, 1)  # the tracer said nothing of it
    assert groups(blind, [Crash.KILL]) == [["request", "fs_fsync#1"], ["response"]]


def test_a_store_the_harness_does_not_see_leaves_every_point_its_own_state() -> None:
    alone = groups(DURABLE, merge=False)
    assert alone == [[name] for p in DURABLE for name in (p.name, f"{p.name}@power_loss")]


def test_a_sync_makes_everything_a_kill_leaves_what_a_power_loss_leaves() -> None:
    points = call(write("a"), (K.FS_FSYNC, FileOp((".",), "all")), write("a"))
    found = groups(points)
    assert ["fs_fsync#1@power_loss", "fs_write#2@power_loss"] not in found  # the sync changed it
    assert ["fs_write#2@power_loss", "response@power_loss"] in found  # then the write did not


# -- the model against the files


@dataclass
class Disk:
    """A data directory as the power-loss model keeps it, concretely: what a kill finds (``names``,
    ``data``) and what a power loss finds (``listing``, ``durable``)."""

    names: dict[str, int]
    data: dict[int, tuple[Any, ...]]
    listing: dict[str, dict[str, int]]
    durable: dict[int, tuple[Any, ...]]
    made: int = 100
    notes: list[Any] = field(default_factory=list)

    def killed(self) -> list[tuple[str, tuple[Any, ...]]]:
        return sorted((path, self.data[node]) for path, node in self.names.items())

    def powered_off(self) -> list[tuple[str, tuple[Any, ...]]]:
        return sorted(
            (posixpath.join(d, name), self.durable.get(node, ()))
            for d, names in self.listing.items()
            for name, node in names.items()
        )

    def apply(self, number: int, op: tuple[str, ...]) -> None:
        what, *paths = op
        if what in ("create", "made"):
            self.made += 1
            self.names[paths[0]] = self.made
            self.data[self.made] = ()
        elif what == "write":
            node = self.names[paths[0]]
            self.data[node] = (*self.data[node], number)
        elif what == "empty":
            self.data[self.names[paths[0]]] = ()
        elif what == "cut":
            node = self.names[paths[0]]
            self.data[node] = (*self.data[node][:1], ("cut", number))
        elif what == "rename":
            self.names[paths[1]] = self.names.pop(paths[0])
        elif what == "unlink":
            del self.names[paths[0]]
        elif what == "fsync":
            node = self.names[paths[0]]
            self.durable[node] = self.data[node]
        elif what == "fsyncdir":
            where = paths[0]
            self.listing[where] = {
                posixpath.basename(p): n for p, n in self.names.items() if posixpath.dirname(p) == where
            }
        elif what == "sync":
            self.listing = {d: {} for d in DIRS}
            for path, node in self.names.items():
                self.listing[posixpath.dirname(path)][posixpath.basename(path)] = node
            self.durable.update(self.data)


DIRS = ("", "d")
PATHS = ("x", "y", "x.tmp", "d/x", "d/y")


def point_of(kind: str, paths: list[str], names: dict[str, int]) -> tuple[PointKind, FileOp]:
    """The operation as the tracer tells it."""
    if kind == "create":
        return K.FS_CREATE, FileOp((paths[0],), "file")
    if kind == "made":
        return K.FS_TRUNCATE, FileOp((paths[0],), new=True, size=0)
    if kind == "empty":
        return K.FS_TRUNCATE, FileOp((paths[0],), size=0)
    if kind == "cut":
        return K.FS_TRUNCATE, FileOp((paths[0],), size=5)
    if kind == "fsyncdir":
        return K.FS_FSYNC, FileOp((paths[0] or ".",), "dir")
    if kind == "sync":
        return K.FS_FSYNC, FileOp((".",), "all")
    kinds = {"write": K.FS_WRITE, "rename": K.FS_RENAME, "unlink": K.FS_UNLINK, "fsync": K.FS_FSYNC}
    return kinds[kind], FileOp(tuple(paths), "file")


@st.composite
def calls(draw: st.DrawFn) -> tuple[list[tuple[str, ...]], list[Disk]]:
    """A call's operations, valid on its start's names, and starts it cannot tell apart: the same names
    for a kill, any bytes, any durable names and bytes."""
    start = sorted(draw(st.sets(st.sampled_from(PATHS), max_size=4)))
    names = {path: node for node, path in enumerate(start, 1)}
    ops: list[tuple[str, ...]] = []
    shape = dict(names)
    for _ in range(draw(st.integers(0, 9))):
        there = sorted(shape)
        missing = [p for p in PATHS if p not in shape]
        choices: list[tuple[str, ...]] = [("fsyncdir", d) for d in DIRS] + [("sync",)]
        choices += [(k, p) for p in there for k in ("write", "empty", "cut", "unlink", "fsync")]
        choices += [(k, p) for p in missing for k in ("create", "made")]
        choices += [
            ("rename", a, b)
            for a in there
            for b in PATHS
            if a != b and posixpath.dirname(a) == posixpath.dirname(b)
        ]
        op = draw(st.sampled_from(choices))
        ops.append(op)
        if op[0] in ("create", "made"):
            shape[op[1]] = 0
        elif op[0] == "rename":
            shape[op[2]] = shape.pop(op[1])
        elif op[0] == "unlink":
            del shape[op[1]]
    disks = []
    for _ in range(3):
        data = {node: tuple(draw(st.lists(st.integers(0, 2), max_size=2))) for node in names.values()}
        listing: dict[str, dict[str, int]] = {d: {} for d in DIRS}
        for path in draw(st.sets(st.sampled_from(PATHS))):
            node = draw(st.sampled_from([*names.values(), 50, 51]))
            listing[posixpath.dirname(path)][posixpath.basename(path)] = node
        durable = {n: tuple(draw(st.lists(st.integers(0, 2), max_size=2))) for n in [*names.values(), 50, 51]}
        disks.append(Disk(dict(names), data, listing, durable))
    return ops, disks


@given(calls())
def test_every_state_the_model_shares_leaves_the_same_files_from_any_start(
    drawn: tuple[list[tuple[str, ...]], list[Disk]],
) -> None:
    ops, disks = drawn
    points = call(*(point_of(op[0], list(op[1:]), disks[0].names) for op in ops))
    for disk in disks:
        moments = []  # what a kill and a power loss leave at each point (before its operation)
        for number, op in enumerate([None, *ops, None]):
            moments.append({Crash.KILL: disk.killed(), Crash.POWER_LOSS: disk.powered_off()})
            if op is not None:
                disk.apply(number, op)
        for state in crash_states(points, BOTH):
            seen = {repr(moments[points.index(Point(p.kind, p.index))][p.crash]) for p in state.points}
            assert len(seen) == 1, (ops, [p.name for p in state.points])
