"""``audit.effects.sql``: a query that yields ``marker`` (and ``effects``) columns, on a SQLite store
read from the run directory, or on PostgreSQL, read live at the end of the run.

The auditor's bulk read of a large SQLite store (its result concatenated by SQLite,
split by numpy) is the audit's own (:mod:`harness.audit.effects`); it opens the
store with :func:`harness.effects.sqlite_file.open_store` like this module does.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.effects.base import Drafted, EffectSource, LiveIO, SeenStore, count_rows, place
from harness.effects.sqlite_file import open_store
from harness.errors import AuditError, StoreNotMade
from harness.scenario import SqlEffects

SQL_TODO = "TODO: SELECT <column holding the marker> AS marker, COUNT(*) AS effects FROM <table> GROUP BY 1"
"""The query ``init`` leaves to write when no column of a store is named like the marker's field."""


class _Sql(EffectSource, field="sql"):
    """What both SQL stores share: the section, and the drafts ``init`` makes of a SQL store."""

    section: SqlEffects

    @property
    def query(self) -> str:
        return self.section.query

    def url(self, run_dir: Path, postgres_url: str | None = None) -> str:
        return place(self.section.url, run_dir, "audit.effects.sql.url", postgres_url)

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        """A query over a table with a column named like the marker's field (the most specific draft of
        all); else a query left to write over the first SQL store seen."""
        sql = [s for s in stores if s.kind == "sql"]
        for store in sql:
            for table, columns in store.tables.items():
                column = next((c for c in columns if marker_field and c.lower() == marker_field), None)
                if column is not None:
                    query = (
                        f'SELECT "{column}" AS marker, COUNT(*) AS effects FROM "{table}" GROUP BY "{column}"'
                    )
                    why = f"the server created table {table} with a column {column}, like the marker's field"
                    yield Drafted({"sql": {"url": store.where, "query": query}}, None, why, rank=0)
                    return
        if sql:
            listing = "; ".join(f"{t}({', '.join(c)})" for t, c in sql[0].tables.items()) or "no tables yet"
            yield Drafted(
                {"sql": {"url": sql[0].where, "query": SQL_TODO}},
                f"write the query; the store has: {listing}",
                "the server writes this store",
                rank=3,
            )


class SqliteSource(_Sql, kind="sqlite"):
    """A SQLite file the target writes (``sqlite:///PATH``), opened read-only by the auditor."""

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        path, db = open_store(self.url(run_dir))
        try:
            cur = db.execute(self.query)
            columns = [d[0].lower() for d in cur.description or ()]
            if columns == ["marker", "effects"]:
                grouped = _grouped(cur.fetchall())
                if grouped is not None:
                    return grouped
                cur = db.execute(self.query)
            return count_rows(columns, cur, str(path))
        except sqlite3.Error as exc:
            # "no such table": the target has not made its table yet (it does at its first write).
            error = StoreNotMade if "no such table" in str(exc) else AuditError
            raise error(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
        finally:
            db.close()


class PostgresSource(_Sql, kind="postgres", live=True):
    """A PostgreSQL database (the harness's ``{postgres_url}`` or another), read once at the end of the run
    on a read-only connection."""

    async def read_live(self, run_dir: Path, io: LiveIO) -> Counter[str]:
        url = self.url(run_dir, io.postgres_url)
        columns, rows = await io.query(url, self.query)
        return count_rows(columns, rows, url)


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
