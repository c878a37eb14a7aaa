"""A SQLite effect store: opened read-only, its effect query's result concatenated by SQLite, and that
read started early, at the audit's first step.

An audit's first fifth of a second runs on one core: Python imports numpy, Arrow
and DuckDB before the history's parse can begin. SQLite lets go of the GIL while
it runs a query, and the effect query of a long run (a GROUP BY over every
effect) is half a second of it. So ``mcp-chaos audit`` starts that read before
anything else (:func:`read_early`), from the run's copy of its scenario as
written, and :func:`harness.audit.effects.load_effects` takes its result only
when the validated scenario names the same store and query; otherwise the read
is cancelled and the audit reads the store as it always does. Measured in
alternating audits of a million intents, with and without it: 0.06 s less in
quiet minutes (a first version, 12 of 12 pairs), 0.2 s less in busy ones (this
one, 10 of 12).

This module imports nothing heavier than sqlite3 (and PyYAML, in
:func:`read_early`).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from harness import rundir
from harness.effects.sqlite_file import SQLITE, open_store
from harness.errors import AuditError

SEPARATOR = 31
"""The byte between markers in SQLite's concatenation (ASCII's unit separator; a marker holding it
takes the row by row path)."""
BULK_BYTES = 24 << 20
"""A store up to this size has its effect query's result read as one concatenation: its markers'
text, at most the store's size, costs about three times that while it is read. A larger store's is
kept in a temporary table and read in parts (:func:`harness.audit.effects._in_parts`)."""

Concatenated = tuple[int, bytes | None, bytes | None]
"""A result as SQLite concatenates it: its rows, their markers (``SEPARATOR`` between), their counts."""


def result_columns(db: sqlite3.Connection, body: str) -> list[str]:
    """The lower-cased columns of the query ``body`` (without its semicolon), read from none of its rows."""
    return [d[0].lower() for d in db.execute(f"SELECT * FROM ({body}) LIMIT 0").description or ()]


def concatenation(body: str, counted: bool) -> tuple[str, str]:
    """The select that concatenates a result (its row count, markers and counts: :data:`Concatenated`),
    and that result: the query ``body``'s rows with a marker (and its ``effects``, when ``counted``)."""
    effects = "CAST(group_concat(n, ',') AS BLOB)" if counted else "NULL"
    select = f"SELECT count(*), CAST(group_concat(m, char({SEPARATOR})) AS BLOB), {effects}"
    source = f"SELECT marker AS m, {'effects' if counted else 'NULL'} AS n"
    return select, f"{source} FROM ({body}) WHERE marker IS NOT NULL"


class EarlyRead:
    """The concatenated result of ``query`` on the store at ``url``, read on a thread of its own."""

    def __init__(self, url: str, query: str) -> None:
        self.url = url
        self.query = query
        self._row: Concatenated | None = None
        self._db: sqlite3.Connection | None = None
        self._cancelled = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mcp-chaos-early-effects", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            _, db = open_store(self.url)
        except AuditError:
            return  # the read proper says why
        try:
            with self._lock:
                if self._cancelled:
                    return
                self._db = db
            body = self.query.strip().rstrip(";")
            columns = result_columns(db, body)
            if "marker" in columns:
                select, result = concatenation(body, "effects" in columns)
                self._row = db.execute(f"{select} FROM ({result})").fetchone()
        except sqlite3.Error:
            pass  # interrupted, or a query that fails: the read proper runs it again and says why
        finally:
            with self._lock:
                self._db = None
            db.close()

    def take(self, url: str, query: str) -> Concatenated | None:
        """The result, when this read was of ``url`` and ``query`` and succeeded (once); else None, and
        the read is cancelled."""
        if (url, query) != (self.url, self.query):
            self.cancel()
            return None
        self._thread.join()
        row, self._row = self._row, None
        return row

    def cancel(self) -> None:
        """Stop the read if it is still going (SQLite interrupts its query), and wait for its thread."""
        with self._lock:
            self._cancelled = True
        while self._thread.is_alive():
            with self._lock:  # held: the thread closes the connection only after letting go of it
                if self._db is not None:
                    self._db.interrupt()  # a statement started after this is interrupted on the next turn
            self._thread.join(0.05)
        self._row = None


def read_early(run_dir: Path) -> EarlyRead | None:
    """Start reading the effect source that the run's copy of its scenario names, when it is a SQLite
    store of at most ``BULK_BYTES`` whose URL has no placeholder but ``{data_dir}`` and ``{run_dir}``;
    else None. A guess from the scenario's text: nothing here raises, and a scenario or store it
    cannot read is left to the audit proper, which says what is wrong."""
    import yaml  # the scenario's own loader is imported with its models: too late to be early

    try:
        text = (run_dir / rundir.SCENARIO).read_text(encoding="utf-8")
        # Only three mappings are walked, and two strings taken: an alias bomb costs nothing here.
        sql = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["audit"]["effects"]["sql"]
        url, query = sql["url"], sql["query"]
    except (OSError, UnicodeError, yaml.YAMLError, KeyError, TypeError):
        return None
    if not isinstance(url, str) or not isinstance(query, str) or not url.startswith(SQLITE):
        return None
    url = url.replace("{data_dir}", str(run_dir / rundir.DATA)).replace("{run_dir}", str(run_dir))
    if "{" in url or "}" in url:
        return None
    try:
        if Path(url.removeprefix(SQLITE)).stat().st_size > BULK_BYTES:
            return None
    except OSError:
        return None
    return EarlyRead(url, query)
