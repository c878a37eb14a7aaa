"""A SQLite store, opened read-only: by the auditor's bulk read as early as its first step, so this
module imports nothing but the standard library (see :mod:`harness.audit.store`)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from harness.errors import AuditError, StoreNotMade

SQLITE = "sqlite:///"


def open_store(url: str) -> tuple[Path, sqlite3.Connection]:
    """The SQLite effect store, opened read-only: the audit must never be able to change the evidence
    it reads (and ``query_only``: nothing attached later can be written either).

    A writer killed inside a transaction leaves a *hot journal*, which SQLite rolls back on the next
    open, and a read-only connection cannot: every query fails with "attempt to write a readonly
    database". Then a copy of the store and its journal is read instead, recovered the way SQLite
    recovers (what the store holds once the next writer opens it), and the original is left as it was.
    """
    path = Path(url.removeprefix(SQLITE))
    if not path.is_file():
        raise StoreNotMade(
            f"effects store {path} does not exist (did the target write to audit.effects.sql.url?)"
        )
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        db.execute("PRAGMA query_only = ON")
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a hot journal refuses this
    except sqlite3.Error as exc:
        if db is not None:
            db.close()
        if "readonly" not in str(exc) or not _journals(path):
            raise AuditError(f"cannot open effects store {path}: {exc}") from None
        return path, _recovered_copy(path)
    return path, db


def _journals(path: Path) -> list[Path]:
    """The store's journal, write-ahead log and shared memory, those that exist."""
    return [j for j in (Path(f"{path}{suffix}") for suffix in ("-journal", "-wal", "-shm")) if j.exists()]


def _recovered_copy(path: Path) -> sqlite3.Connection:
    """A connection to a copy of the store and its journals, which SQLite recovered on opening it; the
    copy's files are removed at once (the connection keeps them until it closes)."""
    with tempfile.TemporaryDirectory(prefix="mcp-chaos-store-") as scratch:
        copy = Path(scratch) / path.name
        try:
            shutil.copyfile(path, copy)
            for journal in _journals(path):
                shutil.copyfile(journal, Path(scratch) / journal.name)
            db = sqlite3.connect(copy)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the hot journal rolled back
            db.execute("PRAGMA query_only = ON")
        except (OSError, sqlite3.Error) as exc:
            raise AuditError(
                f"cannot read effects store {path}: a writer died in a transaction (hot journal), and "
                f"a recovered copy could not be read either: {exc}"
            ) from None
    return db
