"""Effect sources: where the auditor finds the side effects of each intent, by marker.

A SQLite file, a JSON-lines file, the files of a directory and the effect sink's
record are read here, any time after the run. A PostgreSQL query and a read tool
of the target need a live service: the runner makes that final read once, at the
end of the run (``harness.final_read``), into ``effects.json``, which is what the
auditor reads for them. Whatever the source, rows become counts per marker in one
place, :func:`count_rows`.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from harness import rundir
from harness.errors import AuditError
from harness.history import excerpt
from harness.scenario import AUDIT_PLACEHOLDERS, Effects
from harness.template import render_text
from harness.workload import MARKER_SHAPE

EFFECT_BATCH = 1 << 16
"""Rows of an effect query fetched at once, when it is read row by row."""


def resolve_path(path: str, run_dir: Path) -> str:
    values = {"data_dir": run_dir / rundir.DATA, "run_dir": run_dir, "scenario_dir": "{scenario_dir}"}
    return render_text(
        path, {**values, "postgres_url": "{postgres_url}"}, AUDIT_PLACEHOLDERS, "audit.effects"
    )


def resolve_url(url: str, run_dir: Path, postgres_url: str = "{postgres_url}") -> str:
    values = {
        "data_dir": run_dir / rundir.DATA,
        "run_dir": run_dir,
        "scenario_dir": "{scenario_dir}",
        "postgres_url": postgres_url,
    }
    return render_text(url, values, AUDIT_PLACEHOLDERS, "audit.effects.sql.url")


def count_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]], source: str) -> Counter[str]:
    """Effects per marker from a query's rows: a ``marker`` column, and ``effects`` (else 1 per row)."""
    columns = [c.lower() for c in columns]
    if "marker" not in columns:
        raise AuditError(
            f"the effects query on {source} must return a 'marker' column (and optionally 'effects'); "
            f"it returned {columns}"
        )
    mi = columns.index("marker")
    counts: Counter[str] = Counter()
    if "effects" in columns:
        ei = columns.index("effects")
        for row in rows:
            if row[mi] is not None:
                counts[str(row[mi])] += 0 if row[ei] is None else int(row[ei])  # NULL: no effect
    else:
        counts.update(str(row[mi]) for row in rows if row[mi] is not None)
    return counts


def count_effects(effects: Effects, run_dir: Path) -> Counter[str]:
    """Effects per marker, as counted by the scenario's effect source."""
    if effects.sink is not None:
        return count_sink_effects(run_dir)
    if effects.jsonl is not None:
        path = Path(resolve_path(effects.jsonl.path, run_dir))
        return count_jsonl(path, effects.jsonl.marker_field, f"audit.effects.jsonl.path {path}")
    if effects.files is not None:
        directory = Path(resolve_path(effects.files.dir, run_dir))
        return count_files(directory, effects.files.pattern, effects.files.marker_in)
    if effects.collected_at_end:
        return read_collected(run_dir)
    assert effects.sql is not None
    return _sqlite_effects(resolve_url(effects.sql.url, run_dir), effects.sql.query)


def read_collected(run_dir: Path) -> Counter[str]:
    path = run_dir / rundir.COLLECTED
    if not path.is_file():
        raise AuditError(
            f"no {rundir.COLLECTED} in {run_dir}: this source is read once at the end of a run, and this "
            "run ended before that final read (its history can still be read; its effects cannot)"
        )
    try:
        counts = orjson.loads(path.read_bytes())["effects"]
        effects = Counter({str(k): int(v) for k, v in counts.items()})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AuditError(
            f"{path} is damaged ({type(exc).__name__}: {excerpt(str(exc), 120)}): it holds the final read "
            "of effects, which cannot be taken again; restore it from a copy of the run directory"
        ) from None
    if any(v < 0 for v in effects.values()):
        raise AuditError(f"{path} is damaged: it holds a negative count of effects")
    return effects


def count_sink_effects(run_dir: Path) -> Counter[str]:
    """Effects per marker recorded by the sink of a run (a call deduplicated by its key is not one)."""
    path = run_dir / rundir.SINK
    if not path.is_file():
        raise AuditError(f"no effect sink record at {path} (did the target call {{sink_url}}?)")
    return count_jsonl(path, "marker", str(path), skip="replay")


def count_jsonl(path: Path, marker_field: str, where: str, *, skip: str | None = None) -> Counter[str]:
    """One effect per JSON line, of the marker in ``marker_field``.

    A writer killed mid-line leaves a torn line; the next writer appends to it, so
    the line holds the torn start and then a whole record. The whole record is
    counted, the torn part is not (it never became an effect anyone could see).
    """
    if path.is_dir():
        raise AuditError(f"{where} is a directory; name the JSON-lines file the target writes")
    if not path.is_file():
        raise AuditError(
            f"no effects file at {where} (the target never wrote it: no effects, or another path)"
        )
    counts: Counter[str] = Counter()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            record = _record(raw)
            if record is None:  # torn: count the whole record appended to it, if there is one
                record = _appended_record(raw)
                if record is None:
                    continue
            if not isinstance(record, dict) or record.get(marker_field) is None:
                raise AuditError(f"{path}:{number}: a record without a {marker_field!r} field: {raw[:80]!r}")
            if skip is not None and record.get(skip) is True:
                continue
            counts[str(record[marker_field])] += 1
    return counts


def count_files(directory: Path, pattern: str, marker_in: str) -> Counter[str]:
    """Markers in the files of a directory: each occurrence in a file's bytes (``content``), or each
    file whose name holds one (``name``)."""
    where = f"audit.effects.files.dir {directory}"
    if not directory.is_dir():
        raise AuditError(f"{where} is not a directory (the target never made it, or another path)")
    counts: Counter[str] = Counter()
    for path in sorted(directory.glob(pattern)):
        if not path.is_file():
            continue
        if marker_in == "name":
            found = MARKER_SHAPE.findall(path.name.encode())
        else:
            try:
                found = MARKER_SHAPE.findall(path.read_bytes())
            except OSError as exc:
                raise AuditError(f"cannot read {path} ({where}): {exc.strerror or exc}") from None
        counts.update(m.decode() for m in found)
    return counts


def _record(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _appended_record(raw: bytes) -> Any:
    """The record after a torn write on the same line: the last '{' that starts valid JSON."""
    start = raw.rfind(b"{")
    while start > 0:
        record = _record(raw[start:])
        if record is not None:
            return record
        start = raw.rfind(b"{", 0, start)
    return None


def _grouped(rows: list[tuple[Any, Any]]) -> Counter[str] | None:
    """The usual GROUP BY result (one row per marker) as a Counter, built in C; None if it is not that."""
    mapping = dict(rows)
    had_null = None in mapping
    mapping.pop(None, None)
    if len(mapping) + had_null != len(rows):
        return None  # a marker (or NULL) came twice: the general path adds them up
    if not all(type(k) is str for k in mapping) or not all(type(v) is int for v in mapping.values()):
        return None
    return Counter(mapping)


def _open_store(url: str) -> tuple[Path, sqlite3.Connection]:
    """The SQLite effect store, opened read-only: the audit must never be able to change the evidence
    it reads (and ``query_only``: nothing attached later can be written either)."""
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        raise AuditError(
            f"effects store {path} does not exist (did the target write to audit.effects.sql.url?)"
        )
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot open effects store {path}: {exc}") from None
    try:
        db.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        db.close()
        raise AuditError(f"cannot open effects store {path}: {exc}") from None
    return path, db


def _sqlite_effects(url: str, query: str) -> Counter[str]:
    path, db = _open_store(url)
    try:
        cur = db.execute(query)
        columns = [d[0].lower() for d in cur.description or ()]
        if columns == ["marker", "effects"]:
            grouped = _grouped(cur.fetchall())
            if grouped is not None:
                return grouped
            cur = db.execute(query)
        return count_rows(columns, cur, str(path))
    except sqlite3.Error as exc:
        raise AuditError(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
    finally:
        db.close()


class EffectTable:
    """Effects per marker, in compact columns ordered by a 64-bit hash of each, looked up a chunk at a time.

    A run of millions of intents has millions of markers: as a Python Counter they
    took more memory than the rest of the audit (~150 bytes each). Here a marker
    costs its own bytes and about 30 more (its Arrow offset, its hash, its place,
    its count, whether an intent claimed it). A chunk of intents is joined to them
    by binary search on the hash, and every match is confirmed by comparing the
    markers themselves, so a hash collision can neither make nor lose one.
    """

    def __init__(self, markers: pa.Array, counts: npt.NDArray[np.int64]) -> None:
        """``markers`` (text, no nulls) with their ``counts``; a marker may come more than once."""
        self._con = duckdb.connect(":memory:")
        self._con.execute("SET threads = 1")
        hashes = self._hash(markers)
        order = np.argsort(hashes, kind="stable")
        if len(order) > 1 and (hashes[order[1:]] == hashes[order[:-1]]).any():
            markers, counts = _summed(markers, counts)  # a marker twice (or a collision): add them up first
            hashes = self._hash(markers)
            order = np.argsort(hashes, kind="stable")
        self.markers = markers
        """In the order they came; ``order`` sorts them by hash."""
        self.order = order.astype(np.int32 if len(order) < 1 << 31 else np.int64)
        self.hashes = hashes[order]
        self.counts = np.asarray(counts, dtype=np.int64)[order]
        self.claimed = np.zeros(len(order), dtype=bool)
        """Whether an intent looked this marker up (the others are foreign to the run)."""
        self.total = int(self.counts.sum())

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> EffectTable:
        return cls(pa.array(list(counts), pa.string()), np.fromiter(counts.values(), np.int64, len(counts)))

    def _hash(self, markers: pa.Array) -> npt.NDArray[np.uint64]:
        """DuckDB's 64-bit hash of each marker (in C++, a million a few milliseconds)."""
        self._con.register("hashed", pa.table({"m": markers}))
        try:
            hashes = self._con.execute("SELECT hash(m) AS h FROM hashed").fetchnumpy()["h"]
        finally:
            self._con.unregister("hashed")
        return np.asarray(hashes, dtype=np.uint64)

    def lookup(self, markers: Any) -> npt.NDArray[np.int64]:
        """Effects of each marker (0 for one with none, or null), in the order given."""
        wanted = _text(markers)
        found = np.zeros(len(wanted), dtype=np.int64)
        if not len(self.hashes) or not len(wanted):
            return found
        hashes = self._hash(wanted)
        # Searched in sorted order, each search starts where the last ended: 4x faster than at random.
        ordered = np.argsort(hashes)
        at = np.empty(len(hashes), dtype=np.int64)
        at[ordered] = np.minimum(np.searchsorted(self.hashes, hashes[ordered]), len(self.hashes) - 1)
        rows = np.flatnonzero((self.hashes[at] == hashes) & wanted.is_valid().to_numpy(zero_copy_only=False))
        if not len(rows):
            return found
        same = pc.equal(wanted.take(rows), self.markers.take(self.order[at[rows]]))
        confirmed = same.to_numpy(zero_copy_only=False)
        hits, places = rows[confirmed], at[rows[confirmed]]
        for row in rows[~confirmed].tolist():  # a collision: the marker may be further along its run
            place = self._in_run(int(at[row]), wanted[row].as_py())
            if place is not None:
                hits, places = np.append(hits, row), np.append(places, place)
        found[hits] = self.counts[places]
        self.claimed[places] = True
        return found

    def _in_run(self, start: int, marker: str) -> int | None:
        """The place of ``marker`` among the markers that share the hash at ``start``, if it is one."""
        place = start
        while place < len(self.hashes) and self.hashes[place] == self.hashes[start]:
            if self.markers[int(self.order[place])].as_py() == marker:
                return place
            place += 1
        return None

    def foreign(self) -> tuple[int, list[str]]:
        """Effects whose marker no intent looked up, and the first five of those markers."""
        unclaimed = np.flatnonzero(~self.claimed & (self.counts != 0))
        if not len(unclaimed):
            return 0, []
        strangers = pa.table({"marker": self.markers.take(self.order[unclaimed])})
        first = pc.select_k_unstable(strangers, 5, [("marker", "ascending")])
        examples = sorted(strangers.column("marker").take(first).to_pylist())
        return int(self.counts[unclaimed].sum()), examples

    def close(self) -> None:
        self._con.close()


def _text(markers: Any) -> pa.Array:
    if isinstance(markers, pa.ChunkedArray):
        markers = markers.combine_chunks()
    array = markers if isinstance(markers, pa.Array) else pa.array(markers, pa.string())
    return array.cast(pa.string()) if array.type != pa.string() else array


def _summed(markers: pa.Array, counts: npt.NDArray[np.int64]) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """Each marker once, with its counts added up (Arrow's hash aggregation, in C++)."""
    table = pa.table({"marker": markers, "effects": pa.array(counts, pa.int64())})
    summed = table.group_by("marker").aggregate([("effects", "sum")])
    column = summed.column("marker").combine_chunks()
    return column, summed.column("effects_sum").to_numpy()


def load_effects(effects: Effects, run_dir: Path) -> EffectTable:
    """The scenario's effect source as an :class:`EffectTable`; a SQLite query's result is read in bulk."""
    local = effects.sink is None and effects.jsonl is None and effects.files is None
    if local and not effects.collected_at_end and effects.sql is not None:
        return _read_sqlite(resolve_url(effects.sql.url, run_dir), effects.sql.query)
    return EffectTable.of(count_effects(effects, run_dir))


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


_SEPARATOR = 31
"""The byte between markers in SQLite's concatenation (ASCII's unit separator; a marker holding it
takes the row by row path)."""


def _split(joined: bytes | None, count: int) -> pa.Array | None:
    """``count`` markers SQLite concatenated with ``_SEPARATOR`` between them, as an Arrow text array
    (numpy finds the separators and drops them: no Python object per marker); None if they are not
    that many, or not UTF-8."""
    if not count:
        return pa.array([], pa.string())
    raw = np.frombuffer(joined or b"", dtype=np.uint8)
    cuts = np.flatnonzero(raw == _SEPARATOR)
    if len(cuts) + 1 != count:
        return None
    keep = np.ones(len(raw), dtype=bool)
    keep[cuts] = False
    ends = np.append(cuts, len(raw)) - np.arange(count)  # each end, less the separators before it
    offsets = np.concatenate([[0], ends]).astype(np.int32)  # a SQLite string is at most 1 GB
    markers = pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(raw[keep]))
    try:
        markers.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return markers


def _numbers(joined: bytes | None, count: int) -> npt.NDArray[np.int64] | None:
    """``count`` whole numbers SQLite wrote as decimal text with commas between them, parsed by numpy a
    digit place at a time (nearly all are one digit); None if they are not that many, or not whole."""
    if not count:
        return np.zeros(0, np.int64)
    raw = np.frombuffer(joined or b"", dtype=np.uint8)
    cuts = np.flatnonzero(raw == ord(","))
    if len(cuts) + 1 != count or not len(raw):
        return None
    starts = np.concatenate([[0], cuts + 1])
    lengths = np.append(cuts, len(raw)) - starts
    negative = raw[np.minimum(starts, len(raw) - 1)] == ord("-")
    starts, lengths = starts + negative, lengths - negative
    if lengths.min() < 1 or lengths.max() > 18:
        return None
    digits = raw.astype(np.int64) - ord("0")
    values = np.zeros(count, np.int64)
    for place in range(int(lengths.max())):
        more = lengths > place
        digit = digits[starts[more] + place]
        if ((digit < 0) | (digit > 9)).any():
            return None
        values[more] = values[more] * 10 + digit
    return np.where(negative, -values, values)


def _bulk(db: sqlite3.Connection, query: str) -> tuple[pa.Array, npt.NDArray[np.int64]] | None:
    """The effect query's result in one step of SQLite: its markers as one blob, its counts as another,
    split by numpy (no Python object per row). None for a query this does not fit (no ``marker``
    column; a marker holding the separator, a count that is not a whole number, or a result too big
    for one SQLite string); the caller then reads its rows one by one."""
    body = query.strip().rstrip(";")
    try:
        columns = [d[0].lower() for d in db.execute(f"SELECT * FROM ({body}) LIMIT 0").description or ()]
        if "marker" not in columns:
            return None
        counted = "effects" in columns
        effects = "CAST(group_concat(effects, ',') AS BLOB)" if counted else "NULL"
        ((rows, markers, counts),) = db.execute(
            f"""SELECT count(*), CAST(group_concat(marker, char({_SEPARATOR})) AS BLOB), {effects}
                FROM ({body}) WHERE marker IS NOT NULL"""
        ).fetchall()
    except sqlite3.Error:
        return None
    split = _split(markers, rows)  # a marker holding the separator: more markers than rows
    numbers = _numbers(counts, rows) if counted else np.ones(rows, np.int64)  # a NULL count: fewer
    if split is None or numbers is None:
        return None
    return split, numbers


def _read_sqlite(url: str, query: str) -> EffectTable:
    path, db = _open_store(url)
    try:
        bulk = _bulk(db, query)
        if bulk is not None:
            return EffectTable(*bulk)
        cur = db.execute(query)
        columns = [d[0].lower() for d in cur.description or ()]
        if "marker" not in columns:
            count_rows(columns, (), str(path))  # its error names the columns
        mi = columns.index("marker")
        ei = columns.index("effects") if "effects" in columns else None
        markers: list[pa.Array] = []
        counts: list[npt.NDArray[np.int64]] = []
        while rows := cur.fetchmany(EFFECT_BATCH):
            values = list(zip(*rows, strict=True))
            text = _texts(values[mi])
            n = _counts(values[ei]) if ei is not None else np.ones(len(rows), np.int64)
            present = text.is_valid()
            markers.append(text.filter(present))
            counts.append(n[present.to_numpy(zero_copy_only=False)])
        joined = pa.concat_arrays(markers) if markers else pa.array([], pa.string())
        return EffectTable(joined, np.concatenate(counts) if counts else np.zeros(0, np.int64))
    except sqlite3.Error as exc:
        raise AuditError(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
    finally:
        db.close()
