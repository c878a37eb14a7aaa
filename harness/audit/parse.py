"""The parse of a history: DuckDB reads the file into Arrow batches on threads of its own, from the
audit's first step.

:mod:`harness.audit.columnar` folds the batches. :func:`harness.audit.begin.begin`
starts the parse before the run's scenario is read and before the rest of the
auditor is imported: those take the first fifth of a second of an audit on one
core, and the other core had nothing to do until the effect source's read began.
Until the fold asks for its first batch, DuckDB parses up to ``HEAD_START``
batches ahead (27 MB, measured), then ``PREFETCH``: the fold's memory is as it was.
Measured in pairs of runs of a million intents, the audit took 0.05 s less.

This module imports neither pandas nor the scenario's models.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

import duckdb
import pyarrow as pa

from harness.audit.scratch import Scratch
from harness.audit.verdicts import STATUS_BY_NAME, ClientStatus
from harness.history import CONNECTION_CLOSED, OUTCOMES, EventType

BATCH_ROWS = 1 << 14
"""History events per batch (DuckDB parses the next while numpy folds these)."""
HEAD_START = 16
"""Batches parsed ahead before the fold asks for its first."""
PREFETCH = 2
"""Batches parsed ahead once the fold runs: it keeps up with the parse, so more would only be held."""
MEMORY_LIMIT = "128MB"
"""DuckDB's ceiling (its parse buffers: the fold keeps no table in it)."""


class Kind(IntEnum):
    """The column ``k``: which of the four per-intent events a row is (nearly all of a history),
    or ``OTHER`` for any other event (a few per fault), which the fold reads line by line."""

    OTHER = 0
    INTENT_STARTED = 1
    ATTEMPT_STARTED = 2
    ATTEMPT_ENDED = 3
    INTENT_ENDED = 4


KIND = {EventType(kind.name.lower()).value: kind for kind in Kind if kind is not Kind.OTHER}
"""Event type -> its ``Kind``."""
OUTCOME_CODE = {name: n for n, name in enumerate(OUTCOMES)}
"""The column ``oc`` of an attempt's end: its outcome's index in ``OUTCOMES`` (-1 another, -2 no end)."""
_COLUMNS = (
    "{seq: 'BIGINT', t: 'DOUBLE', type: 'VARCHAR', intent: 'JSON', id: 'BIGINT', outcome: 'VARCHAR', "
    "detail: 'VARCHAR', marker: 'VARCHAR', key: 'VARCHAR', status: 'VARCHAR', pod: 'VARCHAR', "
    "reply: 'VARCHAR', reads_as_failure: 'JSON', code: 'JSON', message: 'JSON', trace_id: 'VARCHAR', "
    "resumed: 'JSON'}"
)
_FALSY_JSON = ("false", "0", "0.0", '""', "null", "[]", "{}")
"""``reads_as_failure`` values Python reads as false (the fold asks ``ev.get(...)``)."""
_STATUS = {name: int(code) for name, code in STATUS_BY_NAME.items()}
_CLOSED = sorted(d.value for d in CONNECTION_CLOSED)
_END = object()
"""Put after the last batch."""


def hashes_sql(marker: str) -> tuple[str, str]:
    """DuckDB's two hashes of a marker (an SQL expression), of which its digest is made (see
    :class:`harness.audit.effects.EffectTable`): the parse computes them as it reads the history,
    the effect table for the effects."""
    return f"hash({marker})", f"hash(chr(1) || {marker})"


def _sql_list(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def query(path: Path) -> str:
    """The history's events as the fold reads them: one row per line, the four per-intent events
    coded, each event type's fields only on its rows, and ``bad`` on a line missing one it needs."""
    kinds = " ".join(f"WHEN '{name}' THEN {int(code)}" for name, code in KIND.items())
    outcomes = " ".join(f"WHEN '{o}' THEN {n}" for o, n in OUTCOME_CODE.items())
    falsy = _sql_list(list(_FALSY_JSON))
    statuses = " ".join(f"WHEN '{name}' THEN {code}" for name, code in _STATUS.items())
    gave_up = int(ClientStatus.GAVE_UP)
    marker_hash, marker_check = hashes_sql("marker")
    started, began, ended, finished = (
        int(Kind.INTENT_STARTED),
        int(Kind.ATTEMPT_STARTED),
        int(Kind.ATTEMPT_ENDED),
        int(Kind.INTENT_ENDED),
    )
    history = (
        f"SELECT CASE type {kinds} ELSE {int(Kind.OTHER)} END AS k, * FROM read_json({_quoted(path)}, "
        f"format = 'newline_delimited', columns = {_COLUMNS})"
    )
    return f"""
        SELECT k, seq, coalesce(t, 'nan'::DOUBLE) AS t,
            coalesce(TRY_CAST(intent AS BIGINT), -1) AS intent,
            coalesce(id, -1) AS id,
            CASE WHEN k = {ended} THEN CASE outcome {outcomes} ELSE -1 END ELSE -2 END AS oc,
            k = {ended} AND coalesce(detail IN ({_sql_list(_CLOSED)}), false) AS closed,
            (type IS NULL OR seq IS NULL OR (k > 0 AND (TRY_CAST(intent AS BIGINT) IS NULL
              OR left(intent::VARCHAR, 1) = chr(34))) OR (k IN ({began}, {ended}) AND (id IS NULL
              OR t IS NULL)) OR (k = {started} AND (marker IS NULL OR key IS NULL))
              OR (k = {finished} AND status IS NULL)) AS bad,
            CASE WHEN k = {started} THEN marker END AS marker, CASE WHEN k = {started} THEN key END AS key,
            CASE WHEN k = {started} THEN {marker_hash} END AS marker_hash,
            CASE WHEN k = {started} THEN {marker_check} END AS marker_check,
            CASE WHEN k = {finished} THEN CASE status {statuses} ELSE {gave_up} END END AS status,
            CASE WHEN k = {ended} THEN reply END AS reply,
            k = {ended} AND coalesce(reads_as_failure NOT IN ({falsy}), false) AS flagged,
            CASE WHEN k = {ended} THEN code END AS code,
            CASE WHEN k = {ended} AND message <> 'null' THEN message END AS message,
            CASE WHEN k = {ended} THEN resumed END AS resumed,
            CASE WHEN k = {began} THEN pod END AS pod, CASE WHEN k = {began} THEN trace_id END AS trace_id
        FROM ({history})"""


class Parse:
    """DuckDB's parse of one history, its batches taken by a pump thread as DuckDB makes them.

    DuckDB's Arrow stream parses only when asked for the next batch: asked on the
    fold's thread, the parse and the fold would take turns. The pump asks instead
    (DuckDB lets go of the GIL while it parses) and holds what it got until the fold
    takes it, at most ``HEAD_START`` batches before the fold's first, ``PREFETCH``
    after. :meth:`close` interrupts the parse and waits for the pump. ``workdir``,
    where DuckDB may spill, is the fold's too: it goes with :meth:`discard`, or
    with the intents written into it.
    """

    def __init__(self, path: Path, rows: int) -> None:
        self.rows = rows
        """Rows per batch."""
        self.workdir = Scratch()
        self._con = duckdb.connect(":memory:")
        self._held: deque[object] = deque()
        self._limit = HEAD_START
        self._stopped = False
        self._changed = threading.Condition()
        self._pump: threading.Thread | None = None
        try:
            self._con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            self._con.execute(f"SET temp_directory = {_quoted(self.workdir.path)}")
            self._con.execute(f"SET threads = {min(2, os.cpu_count() or 1)}")
            # Stretches of the file mostly in order: fewer wait to be put back in order (scan.in_order).
            self._con.execute("SET preserve_insertion_order = true")
            reader = self._con.sql(query(path)).to_arrow_reader(rows)
        except BaseException:
            self.discard()
            raise
        self._pump = threading.Thread(target=self._run, args=(reader,), name="mcp-chaos-parse", daemon=True)
        self._pump.start()

    def _run(self, reader: pa.RecordBatchReader) -> None:
        last: object = _END
        try:
            for batch in reader:
                with self._changed:
                    while len(self._held) >= self._limit and not self._stopped:
                        self._changed.wait()
                    if self._stopped:
                        return
                    self._held.append(batch)
                    self._changed.notify_all()
        except BaseException as exc:  # handed to the fold's thread, which raises it
            last = exc
        with self._changed:
            self._held.append(last)
            self._changed.notify_all()

    def ahead(self) -> int:
        """Batches parsed and not taken yet."""
        with self._changed:
            return sum(1 for item in self._held if isinstance(item, pa.RecordBatch))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The batches in the order DuckDB made them (stretches of the file, not all in order); an error
        of the parse is raised here."""
        with self._changed:
            self._limit = PREFETCH
        while True:
            with self._changed:
                while not self._held:
                    self._changed.wait()
                item = self._held.popleft()
                self._changed.notify_all()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, pa.RecordBatch)
            yield item

    def close(self) -> None:
        """Stop the parse (if it is still going) and close DuckDB; the batches already taken stay valid.
        Closing again does nothing."""
        with self._changed:
            if self._stopped:
                return
            self._stopped = True
            self._changed.notify_all()
        if self._pump is not None and self._pump.is_alive():
            self._con.interrupt()
            self._pump.join()
        self._held.clear()
        self._con.close()

    def discard(self) -> None:
        """:meth:`close`, and remove the work directory (the audit will not fold this parse)."""
        try:
            self.close()
        finally:
            self.workdir.cleanup()


def start(path: Path, rows: int | None = None) -> Parse | None:
    """Start parsing the history at ``path`` (``rows`` events per batch, default ``BATCH_ROWS``); None
    for one the columnar fold declines unread: missing or empty, a torn last line (the Python
    fold's careful reader names it), or a path DuckDB would read as a pattern (``run[1]`` as
    ``run1``)."""
    if any(c in str(path) for c in "*?["):
        return None
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size:
                f.seek(size - 1)
            if not size or f.read(1) != b"\n":
                return None
    except OSError:
        return None
    try:
        return Parse(path, rows or BATCH_ROWS)
    except duckdb.Error:
        return None  # a file DuckDB cannot open: the Python fold's reader says why
