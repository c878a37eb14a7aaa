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
import tempfile
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

EFFECTS_MEMORY = "64MB"
"""The effect table's DuckDB ceiling; past it, it spills to a temporary directory."""
EFFECT_BATCH = 1 << 16
"""Rows of an effect query fetched (and markers looked up) at once."""


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
                counts[str(row[mi])] += int(row[ei])
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
    """Effects per marker for the audit, in DuckDB rather than a Python dict, looked up a chunk at a time.

    A run of millions of intents has millions of markers: as a Counter they
    would take more memory than the rest of the audit. Here they are a table in
    a DuckDB file in a temporary directory (compressed, read through a buffer of
    at most ``EFFECTS_MEMORY``), joined to each chunk of intents by marker.
    """

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="mcp-chaos-effects-")
        self.con = duckdb.connect(str(Path(self._dir.name) / "effects.duckdb"))
        self.con.execute(f"SET memory_limit = '{EFFECTS_MEMORY}'")
        self.con.execute("SET temp_directory = ?", [self._dir.name])
        self.con.execute("SET threads = 1")
        self.con.execute("CREATE TABLE raw (marker VARCHAR, effects BIGINT)")
        self.total = 0

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> EffectTable:
        table = cls()
        items = list(counts.items())
        for start in range(0, len(items), EFFECT_BATCH):
            part = items[start : start + EFFECT_BATCH]
            table._append(
                pa.array([m for m, _ in part], pa.string()), pa.array([n for _, n in part], pa.int64())
            )
        return table.seal()

    def _append(self, markers: pa.Array, counts: pa.Array) -> None:
        batch = pa.table({"marker": markers, "effects": counts})
        self.con.register("batch", batch)
        self.con.execute("INSERT INTO raw SELECT marker, effects FROM batch WHERE marker IS NOT NULL")
        self.con.unregister("batch")

    def seal(self) -> EffectTable:
        self.con.execute(
            "CREATE TABLE effects AS SELECT marker, sum(effects)::BIGINT AS effects FROM raw GROUP BY marker"
        )
        self.con.execute("DROP TABLE raw")
        ((total,),) = self.con.execute("SELECT coalesce(sum(effects), 0) FROM effects").fetchall()
        self.total = int(total)
        return self

    def lookup(self, markers: Any) -> npt.NDArray[np.int64]:
        """Effects of each marker (0 for one with none), in the order given."""
        chunk = pa.table(
            {"i": np.arange(len(markers), dtype=np.int64), "marker": pa.array(markers, pa.string())}
        )
        self.con.register("chunk", chunk)
        try:
            found = self.con.execute(
                "SELECT coalesce(e.effects, 0) AS n FROM chunk c LEFT JOIN effects e ON e.marker = c.marker "
                "ORDER BY c.i"
            ).fetchnumpy()["n"]
        finally:
            self.con.unregister("chunk")
        return np.asarray(found, dtype=np.int64)

    def foreign(self, markers: Iterable[Sequence[Any]]) -> tuple[int, list[str]]:
        """Effects whose marker is none of ``markers`` (the run's intents', in chunks), and five of them."""
        self.con.execute("CREATE OR REPLACE TABLE seen (marker VARCHAR)")
        for chunk in markers:
            self.con.register("chunk", pa.table({"marker": pa.array(chunk, pa.string())}))
            self.con.execute("INSERT INTO seen SELECT marker FROM chunk")
            self.con.unregister("chunk")
        ((foreign,),) = self.con.execute(
            "SELECT coalesce(sum(effects), 0) FROM effects WHERE marker NOT IN (SELECT marker FROM seen)"
        ).fetchall()
        examples = self.con.execute(
            "SELECT marker FROM effects WHERE marker NOT IN (SELECT marker FROM seen) ORDER BY marker LIMIT 5"
        ).fetchall()
        self.con.execute("DROP TABLE seen")
        return int(foreign), [str(m) for (m,) in examples]

    def close(self) -> None:
        self.con.close()
        self._dir.cleanup()


def load_effects(effects: Effects, run_dir: Path) -> EffectTable:
    """The scenario's effect source as an :class:`EffectTable`; a SQLite query's rows are streamed into it."""
    local = effects.sink is None and effects.jsonl is None and effects.files is None
    if local and not effects.collected_at_end and effects.sql is not None:
        return _stream_sqlite(resolve_url(effects.sql.url, run_dir), effects.sql.query)
    return EffectTable.of(count_effects(effects, run_dir))


def _texts(values: Sequence[Any]) -> pa.Array:
    """Markers as text (converted in C when they already are, as a store's markers nearly always are)."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if m is None else str(m) for m in values], pa.string())


def _counts(values: Sequence[Any]) -> pa.Array:
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([0 if n is None else int(n) for n in values], pa.int64())


_SEPARATOR = "\x1f"


def _concatenated(db: sqlite3.Connection, query: str, table: EffectTable) -> bool:
    """The usual effect query (a ``marker`` column, and ``effects``) read as long strings SQLite
    concatenates, ``EFFECT_BATCH`` rows each, split by Arrow: no Python object per row, and no
    more than a batch in memory. False (nothing added) for a query this does not fit; the caller
    then reads its rows one by one."""
    body = query.strip().rstrip(";")
    try:
        columns = [d[0].lower() for d in db.execute(f"SELECT * FROM ({body}) LIMIT 0").description or ()]
        if "marker" not in columns:
            return False
        effects = "CAST(effects AS INTEGER)" if "effects" in columns else "1"
        parts = db.execute(
            f"""SELECT count(*), group_concat(m, char(31)), group_concat(n, ','), sum(instr(m, char(31)) > 0)
            FROM (SELECT CAST(marker AS TEXT) AS m, {effects} AS n,
                         (row_number() OVER ()) / {EFFECT_BATCH} AS part
                  FROM ({body}) WHERE marker IS NOT NULL)
            GROUP BY part ORDER BY part"""
        )
        for rows, markers, counts, unsplittable in parts:
            if unsplittable:
                return False
            names = pc.split_pattern(pa.array([markers], pa.string()), _SEPARATOR).flatten()
            numbers = pc.cast(pc.split_pattern(pa.array([counts], pa.string()), ",").flatten(), pa.int64())
            if len(names) != rows or len(numbers) != rows:
                return False
            table._append(names, numbers)
    except sqlite3.Error:
        return False
    return True


def _stream_sqlite(url: str, query: str) -> EffectTable:
    path, db = _open_store(url)
    table = EffectTable()
    try:
        if _concatenated(db, query, table):
            pa.default_memory_pool().release_unused()  # the split strings: give their pages back
            return table.seal()
        table.con.execute("DELETE FROM raw")  # what a partial try added
        cur = db.execute(query)
        columns = [d[0].lower() for d in cur.description or ()]
        if "marker" not in columns:
            count_rows(columns, (), str(path))  # its error names the columns
        mi = columns.index("marker")
        ei = columns.index("effects") if "effects" in columns else None
        while rows := cur.fetchmany(EFFECT_BATCH):
            values = list(zip(*rows, strict=True))
            table._append(
                _texts(values[mi]), _counts(values[ei]) if ei is not None else pa.repeat(1, len(rows))
            )
        return table.seal()
    except sqlite3.Error as exc:
        table.close()
        raise AuditError(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
    except BaseException:
        table.close()
        raise
    finally:
        db.close()
