"""The effects an audit looks intents up in: the scenario's effect source as an :class:`EffectTable`.

Each source counts its own effects (:mod:`harness.effects`); a SQLite store, the
one source whose result can hold millions of markers, is read here in bulk
instead: its query's result concatenated by SQLite and split by numpy
(:func:`_sqlite_pieces`), no Python object per row.
"""

from __future__ import annotations

import itertools
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from harness.audit import store
from harness.audit.memory import give_back
from harness.audit.parse import hashes_sql
from harness.audit.scratch import Scratch
from harness.audit.store import SEPARATOR, Concatenated, EarlyRead, concatenation, result_columns
from harness.effects.base import Unreadable, count_rows
from harness.effects.registry import source_of
from harness.effects.sql import SqliteSource
from harness.effects.sqlite_file import open_store
from harness.errors import AuditError
from harness.scenario import Effects

EFFECT_BATCH = 1 << 16
"""Markers hashed at once; also the rows of a SQLite part, or of a fetch when read row by row."""


Hashes = tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]
"""Those two hashes of each of some markers."""


class EffectTable:
    """Effects per marker, as 96 bits of hash of each marker sorted for binary search: the markers
    themselves are not kept.

    A run of millions of intents has millions of markers: as a Python Counter they
    took more memory than the rest of the audit (~150 bytes each), and even as
    Arrow text (~30 bytes) they were a fifth of its peak at 3M intents. Here a
    marker is 14 bytes: the top 32 bits of DuckDB's 64-bit ``hash`` of it (sorted,
    searched), a 64-bit check (the other 32 bits, and 32 bits of the hash of the
    marker after a prefix byte), its count (one byte; larger counts in ``big``) and
    whether an intent claimed it. For two different markers to be taken for each
    other all 96 bits must agree: less than once in 10^15 audits of 3M intents (3M
    lookups, each against a run of ~3M/2^32 keys, each then a 64-bit check).
    Foreign markers, the only ones reported by name, are found by reading the
    source again (``markers``), when there are any.

    Built in two steps: while the fold runs, the digests are spooled to files
    (:meth:`_build`); on first use they are sorted (:meth:`_sort`).
    """

    def __init__(
        self,
        pieces: Iterable[tuple[pa.Array, npt.NDArray[np.int64]]],
        markers: Callable[[], Iterable[pa.Array]],
    ) -> None:
        """``pieces``: the source's markers (text; nulls are skipped) with their counts, a marker possibly
        more than once; ``markers``: the same markers again, for :meth:`foreign`."""
        self._con: duckdb.DuckDBPyConnection | None = None
        self._spool: Scratch | None = None
        self.unreadable: tuple[Unreadable, ...] = ()
        """The store's files that do not parse as its server reads them (none of their markers counted)."""
        try:
            self._markers = markers
            self._build(pieces)
        except BaseException:
            self.close()
            raise

    def _hasher(self) -> duckdb.DuckDBPyConnection:
        """DuckDB, which hashes markers: connected on first use, so that reading the source starts at
        once (connecting took 20 ms of a contended start-up, before SQLite could begin)."""
        if self._con is None:
            self._con = duckdb.connect(":memory:")
            self._con.execute("SET threads = 1")
            self._con.execute("SET allocator_flush_threshold = '1MB'")
        return self._con

    def _build(self, pieces: Iterable[tuple[pa.Array, npt.NDArray[np.int64]]]) -> None:
        """Hash the pieces as they come, onto files: the table is sorted on first use (:meth:`_sort`).

        The audit reads the effect source while it folds the history, whose parse
        holds the most memory the audit ever does; the sort, which needs three
        columns' worth at once, waits on disk for the fold to end.
        """
        self._spool = Scratch()
        self.big: dict[tuple[int, int], int] = {}
        """Counts that do not fit ``counts`` (255 there), by (search key, check)."""
        self.total = 0
        n = 0
        folder = self._spool.path
        with (
            open(folder / "high", "wb") as highs,
            open(folder / "check", "wb") as checks,
            open(folder / "counts", "wb") as small,
        ):
            for names, counts in pieces:
                present = names.is_valid().to_numpy(zero_copy_only=False)
                high, check = self._digests(names.filter(present) if not present.all() else names)
                counts = np.asarray(counts, dtype=np.int64)[present]
                large = (counts < 0) | (counts >= _BIG)
                for row in np.flatnonzero(large).tolist():
                    key = (int(high[row]), int(check[row]))
                    self.big[key] = self.big.get(key, 0) + int(counts[row])
                high.tofile(highs)
                check.tofile(checks)
                np.where(large, _BIG, counts).astype(np.uint8).tofile(small)
                self.total += int(counts.sum())
                n += len(high)
        give_back()  # what reading the source freed, before the fold's peak
        if n >= 1 << 32:
            raise AuditError(f"the effect source holds {n:,} markers; the audit takes at most 2^32 - 1")
        self._size = n
        self.high = np.zeros(0, np.uint32)
        self.check = np.zeros(0, np.uint64)
        self.counts = np.zeros(0, np.uint8)
        self.claimed = np.zeros(0, dtype=bool)
        """Whether an intent looked this marker up (the others are foreign to the run)."""

    def _sort(self) -> None:
        """Sort the spooled digests by search key: the keys with each one's index in their low bits,
        sorted in place (no order array, no copies but the one each column is reordered into)."""
        if self._spool is None:
            return
        folder = self._spool.path
        n = self._size
        ordered = np.empty(n, dtype=np.uint64)
        halves = ordered.view(np.uint32)  # each key's high half its search key, low half its index
        index, high = (
            (halves[0::2], halves[1::2]) if sys.byteorder == "little" else (halves[1::2], halves[0::2])
        )
        high[:] = np.fromfile(folder / "high", dtype=np.uint32)
        index[:] = np.arange(n, dtype=np.uint32)
        ordered.sort()  # in place: the views above now read the keys in order
        self.check = np.fromfile(folder / "check", dtype=np.uint64)[index]
        self.counts = np.fromfile(folder / "counts", dtype=np.uint8)[index]
        self.high = high.copy()
        del ordered, halves, index, high
        self._spool.cleanup()
        self._spool = None
        if len(self.high) > 1 and (self.high[1:] == self.high[:-1]).any():
            self._merge_repeats()
        self.claimed = np.zeros(len(self.high), dtype=bool)
        give_back()  # the sort's copies

    def _merge_repeats(self) -> None:
        """A marker given more than once (a query with a row per effect) is one entry, its counts added up.
        Its entries share a search key, as a few different markers do too: those runs are sorted by
        check, and equal checks merged."""
        shared = np.flatnonzero(self.high[1:] == self.high[:-1])
        rows = np.unique(np.concatenate([shared, shared + 1]))
        order = rows[np.lexsort((self.check[rows], self.high[rows]))]
        same = (self.high[order][1:] == self.high[order][:-1]) & (
            self.check[order][1:] == self.check[order][:-1]
        )
        if not same.any():
            return
        drop = np.zeros(len(self.high), dtype=bool)
        starts = np.flatnonzero(np.concatenate([[True], ~same]))
        for a, b in itertools.pairwise([*starts.tolist(), len(order)]):
            if b - a < 2:
                continue
            members = order[a:b]
            key = (int(self.high[members[0]]), int(self.check[members[0]]))
            small = self.counts[members]
            total = int(small[small != _BIG].sum(dtype=np.int64)) + self.big.pop(key, 0)
            keep = int(members[0])
            drop[members[1:]] = True
            if 0 <= total < _BIG:
                self.counts[keep] = total
            else:
                self.counts[keep] = _BIG
                self.big[key] = total
        keep_rows = ~drop
        self.high, self.check, self.counts = (
            self.high[keep_rows],
            self.check[keep_rows],
            self.counts[keep_rows],
        )

    @classmethod
    def of(cls, counts: Mapping[str, int], unreadable: tuple[Unreadable, ...] = ()) -> EffectTable:
        def markers() -> Iterator[pa.Array]:
            yield pa.array(list(counts), pa.string())

        piece = (pa.array(list(counts), pa.string()), np.fromiter(counts.values(), np.int64, len(counts)))
        table = cls([piece], markers)
        table.unreadable = unreadable
        return table

    def _digests(
        self, markers: pa.Array, hashes: Hashes | None = None
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64]]:
        """Each marker's search key and check, from its ``hashes`` when given, else from DuckDB's (in C++: a
        million in tens of milliseconds)."""
        if hashes is None:
            con = self._hasher()
            con.register("hashed", pa.table({"m": markers}))
            try:
                one, other = hashes_sql("m")
                found = con.execute(f"SELECT {one} AS a, {other} AS b FROM hashed").fetchnumpy()
            finally:
                con.unregister("hashed")
            hashes = (np.asarray(found["a"], dtype=np.uint64), np.asarray(found["b"], dtype=np.uint64))
        first = np.asarray(hashes[0], dtype=np.uint64)
        low = np.uint64(0xFFFFFFFF)
        check = ((first & low) << np.uint64(32)) | (np.asarray(hashes[1], dtype=np.uint64) & low)
        return (first >> np.uint64(32)).astype(np.uint32), check

    def _places(self, markers: pa.Array, hashes: Hashes | None = None) -> npt.NDArray[np.int64]:
        """Each marker's place in the table, -1 for one it does not hold (or null)."""
        self._sort()
        places = np.full(len(markers), -1, dtype=np.int64)
        if not len(self.high) or not len(markers):
            return places
        valid = markers.is_valid().to_numpy(zero_copy_only=False)
        high, check = self._digests(markers, hashes)
        # Searched in sorted order, each search starts where the last ended: 4x faster than at random.
        ordered = np.argsort(high)
        at = np.empty(len(high), dtype=np.int64)
        at[ordered] = np.searchsorted(self.high, high[ordered])
        at = np.minimum(at, len(self.high) - 1)
        same = valid & (self.high[at] == high)
        hit = same & (self.check[at] == check)
        places[hit] = at[hit]
        for row in np.flatnonzero(same & ~hit).tolist():  # the search key is shared: look along its run
            place = int(at[row]) + 1
            while place < len(self.high) and self.high[place] == high[row]:
                if self.check[place] == check[row]:
                    places[row] = place
                    break
                place += 1
        return places

    def _counts_at(self, places: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        counts = self.counts[places].astype(np.int64)
        for row in np.flatnonzero(counts == _BIG).tolist():
            place = int(places[row])
            counts[row] = self.big[(int(self.high[place]), int(self.check[place]))]
        return counts

    def lookup(self, markers: Any, hashes: Hashes | None = None) -> npt.NDArray[np.int64]:
        """Effects of each marker (0 for one with none, or null), in the order given; ``hashes``: DuckDB's
        two hashes of each (:func:`hashes_sql`), when the caller has them already (the columnar fold's)."""
        places = self._places(_text(markers), hashes)
        found = np.zeros(len(places), dtype=np.int64)
        hits = places >= 0
        found[hits] = self._counts_at(places[hits])
        self.claimed[places[hits]] = True
        return found

    def foreign(self) -> tuple[int, list[str]]:
        """Effects whose marker no intent looked up, and the first five of those markers (read again)."""
        self._sort()
        strangers = np.flatnonzero(~self.claimed)
        counts = self._counts_at(strangers)
        unclaimed = np.zeros(len(self.high), dtype=bool)
        unclaimed[strangers[counts != 0]] = True
        total = int(counts.sum())
        if not unclaimed.any():
            return total, []
        first: list[str] = []
        for names in self._markers():
            places = self._places(names)
            stranger = places >= 0
            stranger[stranger] = unclaimed[places[stranger]]
            first = sorted({*first, *names.filter(stranger).to_pylist()})[:5]
        return total, first

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
        if self._spool is not None:
            self._spool.cleanup()
            self._spool = None


_BIG = 255
"""A count of 255 or more (or below 0) is kept in ``EffectTable.big``; ``counts`` holds 255 for it."""


def _text(markers: Any) -> pa.Array:
    if isinstance(markers, pa.ChunkedArray):
        markers = markers.combine_chunks()
    array = markers if isinstance(markers, pa.Array) else pa.array(markers, pa.string())
    return array.cast(pa.string()) if array.type != pa.string() else array


def load_effects(effects: Effects, run_dir: Path, early: EarlyRead | None = None) -> EffectTable:
    """The scenario's effect source as an :class:`EffectTable`; a SQLite query's result as SQLite's
    concatenation (``early``'s, when it read this store and query: :mod:`harness.audit.store`), or
    row by row when that cannot be split back exactly."""
    try:
        source = source_of(effects)
        if isinstance(source, SqliteSource):
            url, query = source.url(run_dir), source.query

            def pieces(
                concatenated: bool, early: EarlyRead | None = None
            ) -> Iterator[tuple[pa.Array, npt.NDArray[np.int64]]]:
                return _sqlite_pieces(url, query, concatenated=concatenated, early=early)

            try:
                return EffectTable(pieces(True, early), lambda: (m for m, _ in pieces(True)))
            except _NotConcatenated:
                return EffectTable(pieces(False), lambda: (m for m, _ in pieces(False)))
        read = source.reading(run_dir)
        return EffectTable.of(read.counts, read.unreadable)
    finally:
        if early is not None:
            early.cancel()  # not taken (another source, or a scenario the guess misread): not needed


def _texts(values: Sequence[Any]) -> pa.Array:
    """Markers as text (converted in C when they already are, as a store's markers nearly always are)."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if m is None else str(m) for m in values], pa.string())


def _counts(values: Sequence[Any]) -> npt.NDArray[np.int64]:
    try:
        return np.asarray(pa.array(values, pa.int64()).fill_null(0), dtype=np.int64)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return np.array([0 if n is None else int(n) for n in values], dtype=np.int64)


class _NotConcatenated(Exception):
    """SQLite's concatenation of this result cannot be split back exactly; it is read row by row."""


def _split(joined: bytes | None, count: int) -> pa.Array:
    """``count`` markers SQLite concatenated with ``SEPARATOR`` between them, as an Arrow text array
    (numpy finds the separators and drops them: no Python object per marker)."""
    if not count:
        return pa.array([], pa.string())
    raw = np.frombuffer(joined or b"", dtype=np.uint8)
    cuts = np.flatnonzero(raw == SEPARATOR)
    if len(cuts) + 1 != count:
        raise _NotConcatenated  # a marker holding the separator
    keep = np.ones(len(raw), dtype=bool)
    keep[cuts] = False
    ends = np.append(cuts, len(raw)) - np.arange(count)  # each end, less the separators before it
    offsets = np.concatenate([[0], ends]).astype(np.int32)  # a SQLite string is at most 1 GB
    markers = pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(raw[keep]))
    try:
        markers.validate(full=True)
    except pa.ArrowInvalid:
        raise _NotConcatenated from None  # not UTF-8
    return markers


def _numbers(joined: bytes | None, count: int) -> npt.NDArray[np.int64]:
    """``count`` whole numbers SQLite wrote as decimal text with commas between them, parsed by numpy a
    digit place at a time (nearly all are one digit)."""
    if not count:
        return np.zeros(0, np.int64)
    raw = np.frombuffer(joined or b"", dtype=np.uint8)
    cuts = np.flatnonzero(raw == ord(","))
    if len(cuts) + 1 != count or not len(raw):
        raise _NotConcatenated  # a NULL count (skipped by group_concat)
    starts = np.concatenate([[0], cuts + 1])
    lengths = np.append(cuts, len(raw)) - starts
    negative = raw[np.minimum(starts, len(raw) - 1)] == ord("-")
    starts, lengths = starts + negative, lengths - negative
    if lengths.min() < 1 or lengths.max() > 18:
        raise _NotConcatenated
    values = np.zeros(count, np.int64)
    for place in range(int(lengths.max())):
        more = lengths > place
        digit = raw[starts[more] + place].astype(np.int64) - ord("0")
        if ((digit < 0) | (digit > 9)).any():
            raise _NotConcatenated  # not a whole number
        values[more] = values[more] * 10 + digit
    return np.where(negative, -values, values)


def _within(raw: bytes, cuts: npt.NDArray[np.int64], first: int, last: int) -> bytes:
    """The text of items ``first`` to ``last`` (exclusive) of ``raw``, whose separators are at ``cuts``."""
    start = 0 if first == 0 else int(cuts[first - 1]) + 1
    end = len(raw) if last - 1 >= len(cuts) else int(cuts[last - 1])
    return raw[start:end]


def _sqlite_pieces(
    url: str, query: str, *, concatenated: bool = True, early: EarlyRead | None = None
) -> Iterator[tuple[pa.Array, npt.NDArray[np.int64]]]:
    """The effect query's markers and counts, ``EFFECT_BATCH`` at a time.

    SQLite concatenates them (``concatenated``): the whole result at once from a
    store of up to ``store.BULK_BYTES`` (``early``'s, when it read the same), else
    in parts (:func:`_in_parts`); numpy splits them. No Python object is made per
    row, and SQLite lets go of the GIL meanwhile, so the fold goes on. A result
    that cannot be split back exactly raises :class:`_NotConcatenated`, and is
    then read row by row.
    """
    path, db = open_store(url)
    try:
        body = query.strip().rstrip(";")
        columns = result_columns(db, body)
        if "marker" not in columns:
            count_rows(columns, (), str(path))  # its error names the columns
        counted = "effects" in columns
        if not concatenated:
            yield from _row_pieces(db, query, columns)
            return
        select, result = concatenation(body, counted)
        parts: Iterable[Concatenated]
        if path.stat().st_size <= store.BULK_BYTES:
            read = early.take(url, query) if early is not None else None
            parts = [read] if read is not None else db.execute(f"{select} FROM ({result})")
        else:
            parts = _in_parts(db, result, select)
        for rows, markers, counts in parts:
            if not rows or markers is None:
                continue
            marker_cuts = np.flatnonzero(np.frombuffer(markers, np.uint8) == SEPARATOR)
            counts = counts or b""  # NULL: no count column
            count_cuts = np.flatnonzero(np.frombuffer(counts, np.uint8) == ord(","))
            if len(marker_cuts) + 1 != rows or (counted and len(count_cuts) + 1 != rows):
                raise _NotConcatenated  # more separators than rows: a marker held one; fewer: a NULL count
            for first in range(0, rows, EFFECT_BATCH):
                last = min(first + EFFECT_BATCH, rows)
                names = _split(_within(markers, marker_cuts, first, last), last - first)
                numbers = (
                    _numbers(_within(counts, count_cuts, first, last), last - first)
                    if counted
                    else np.ones(last - first, np.int64)
                )
                yield names, numbers
    except sqlite3.Error as exc:
        raise AuditError(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
    finally:
        db.close()


_RESULT = "mcp_chaos_effect_rows"
"""The temporary table a large store's result is kept in while it is read in parts."""


def _in_parts(db: sqlite3.Connection, result: str, select: str) -> Iterator[tuple[int, bytes, bytes | None]]:
    """The query's ``result`` concatenated ``EFFECT_BATCH`` rows at a time, from a temporary table.

    SQLite keeps the result in its temporary schema (spilled to a file, not held
    in memory) and reads it back by ranges of rowid. Numbering the rows in the
    query instead (``row_number() OVER ()``, grouped by part) made SQLite sort
    the whole result again: at 3M markers it took longer than the query itself.
    Writing the temporary schema needs ``query_only`` off for that one
    statement; the store itself stays opened read-only. The table goes with the
    connection, which the caller closes.
    """
    db.execute("PRAGMA query_only = OFF")
    try:
        db.execute(f"CREATE TEMP TABLE {_RESULT} AS {result}")
    finally:
        db.execute("PRAGMA query_only = ON")
    (last,) = db.execute(f"SELECT coalesce(max(rowid), 0) FROM temp.{_RESULT}").fetchone()
    part = f"{select} FROM temp.{_RESULT} WHERE rowid > ? AND rowid <= ?"
    for start in range(0, last, EFFECT_BATCH):
        yield db.execute(part, (start, start + EFFECT_BATCH)).fetchone()


def _row_pieces(
    db: sqlite3.Connection, query: str, columns: list[str]
) -> Iterator[tuple[pa.Array, npt.NDArray[np.int64]]]:
    """The effect query's rows, fetched ``EFFECT_BATCH`` at a time: any result shape, any types."""
    cur = db.execute(query)
    mi = columns.index("marker")
    ei = columns.index("effects") if "effects" in columns else None
    while rows := cur.fetchmany(EFFECT_BATCH):
        values = list(zip(*rows, strict=True))
        yield _texts(values[mi]), _counts(values[ei]) if ei is not None else np.ones(len(rows), np.int64)
