"""The invoices target's stores: SQLite (a file) or PostgreSQL (a URL), one interface.

Every method runs without awaiting, on one connection, so no two calls of the
server interleave inside a method; what interleaves between methods is exactly
what the idempotency designs have to get right. ``create_invoice`` is one
commit (naive, and keyed's first); ``record_key`` is keyed's second commit;
``create_invoice_with_key`` is atomic's single transaction, where the unique key
decides between racing attempts and the loser replays the winner. The demo
catalog (``demo_catalog.py``) adds two tables with ``enable_demo``: what happened
to an invoice after it was created (sent, voided), and search handles, so a
handle outlives the process and any replica can resolve it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS invoices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    customer_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    memo TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS failpoint_hits (point TEXT PRIMARY KEY, hits INTEGER NOT NULL);
"""

POSTGRES_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS invoices (
        id BIGSERIAL PRIMARY KEY,
        customer_id TEXT NOT NULL,
        amount_cents BIGINT NOT NULL,
        memo TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS idempotency_keys (
        key TEXT PRIMARY KEY,
        request_hash TEXT NOT NULL,
        response TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    "CREATE TABLE IF NOT EXISTS failpoint_hits (point TEXT PRIMARY KEY, hits INTEGER NOT NULL)",
]

DEMO_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS invoice_events (
        invoice_id BIGINT NOT NULL,
        kind TEXT NOT NULL,
        at TEXT NOT NULL,
        at_ms BIGINT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS invoice_events_kind_at ON invoice_events (kind, at_ms)",
    """CREATE TABLE IF NOT EXISTS search_handles (
        handle TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    )""",
]
"""Tables of the demo catalog only: the default store stays exactly as the harness's tests know it."""

STATUS_SQL = (
    "CASE WHEN EXISTS (SELECT 1 FROM invoice_events e WHERE e.invoice_id = i.id AND e.kind = 'void') "
    "THEN 'void' WHEN EXISTS (SELECT 1 FROM invoice_events e WHERE e.invoice_id = i.id AND e.kind = 'sent') "
    "THEN 'sent' ELSE 'open' END"
)


class Conflict(Exception):
    """The key was taken by another attempt between our check and our commit."""


def invoice_json(invoice_id: int, customer_id: str, amount_cents: int, memo: str, created_at: str) -> str:
    invoice = {
        "invoice_id": f"inv_{invoice_id:08d}",
        "customer_id": customer_id,
        "amount_cents": amount_cents,
        "memo": memo,
        "created_at": created_at,
    }
    return json.dumps(invoice, separators=(",", ":"))


class Store:
    """SQL shared by both stores; subclasses supply the connection, transactions and dialect."""

    P = "?"  # parameter placeholder

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _insert_returning_id(self, sql: str, params: tuple[Any, ...]) -> int:
        raise NotImplementedError

    def _unique_violation(self, exc: Exception) -> bool:
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.P)

    def failpoint_hit(self, point: str) -> int:
        """Count a pass through ``point``; persisted so a restarted process keeps counting."""
        with self.transaction():
            self._execute(
                self._q(
                    "INSERT INTO failpoint_hits (point, hits) VALUES (?, 1) "
                    "ON CONFLICT (point) DO UPDATE SET hits = failpoint_hits.hits + 1"
                ),
                (point,),
            )
            row = self._execute(
                self._q("SELECT hits FROM failpoint_hits WHERE point = ?"), (point,)
            ).fetchone()
        return int(row[0])

    def find_key(self, key: str) -> tuple[str, str] | None:
        row = self._execute(
            self._q("SELECT request_hash, response FROM idempotency_keys WHERE key = ?"), (key,)
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def find_hash(self, request_hash: str) -> tuple[str, str] | None:
        """The flaw payload_dedup: a recorded call with the same payload, whatever its key."""
        row = self._execute(
            self._q("SELECT request_hash, response FROM idempotency_keys WHERE request_hash = ? LIMIT 1"),
            (request_hash,),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def _next_invoice_id(self) -> int:
        raise NotImplementedError

    def _insert_invoice(
        self, customer_id: str, amount_cents: int, memo: str, created_at: str, invoice_id: int | None = None
    ) -> str:
        if invoice_id is None:
            invoice_id = self._insert_returning_id(
                self._q(
                    "INSERT INTO invoices (customer_id, amount_cents, memo, created_at) VALUES (?, ?, ?, ?)"
                ),
                (customer_id, amount_cents, memo, created_at),
            )
        else:
            self._execute(
                self._q(
                    "INSERT INTO invoices (id, customer_id, amount_cents, memo, created_at) "
                    "VALUES (?, ?, ?, ?, ?)"
                ),
                (invoice_id, customer_id, amount_cents, memo, created_at),
            )
        return invoice_json(invoice_id, customer_id, amount_cents, memo, created_at)

    def create_invoice(
        self, customer_id: str, amount_cents: int, memo: str, created_at: str, invoice_id: int | None = None
    ) -> str:
        """One commit: the business write alone (naive, and keyed's first commit); ``invoice_id``: one
        reserved before (the flaw key_first)."""
        with self.transaction():
            return self._insert_invoice(customer_id, amount_cents, memo, created_at, invoice_id)

    def reserve_invoice(
        self, customer_id: str, amount_cents: int, memo: str, created_at: str
    ) -> tuple[int, str]:
        """The flaw key_first: an invoice id taken before the invoice exists, and its response to be."""
        invoice_id = self._next_invoice_id()
        return invoice_id, invoice_json(invoice_id, customer_id, amount_cents, memo, created_at)

    def record_key(self, key: str, request_hash: str, response: str, created_at: str) -> None:
        """Keyed's second commit. The first record for a key wins; a racing attempt's is dropped."""
        with self.transaction():
            self._execute(
                self._q(
                    "INSERT INTO idempotency_keys (key, request_hash, response, created_at) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
                ),
                (key, request_hash, response, created_at),
            )

    def create_invoice_with_key(
        self, key: str, request_hash: str, customer_id: str, amount_cents: int, memo: str, created_at: str
    ) -> tuple[str, bool]:
        """Atomic: invoice and key record in one transaction. Returns (response, created)."""
        return self._once(
            key,
            request_hash,
            created_at,
            lambda: self._insert_invoice(customer_id, amount_cents, memo, created_at),
        )

    def _once(self, key: str, request_hash: str, at: str, effect: Callable[[], str]) -> tuple[str, bool]:
        """``effect`` (it returns the response) and the key record in one transaction; when the key
        was recorded before, by an earlier call or a concurrent twin, its first response instead.
        Returns (response, created)."""
        try:
            with self.transaction():
                if self.find_key(key) is not None:
                    raise Conflict
                response = effect()
                self._execute(
                    self._q(
                        "INSERT INTO idempotency_keys (key, request_hash, response, created_at) "
                        "VALUES (?, ?, ?, ?)"
                    ),
                    (key, request_hash, response, at),
                )
                return response, True
        except Exception as exc:
            # Another attempt with this key committed first: ours rolled back, nothing of it exists.
            if not isinstance(exc, Conflict) and not self._unique_violation(exc):
                raise
        winner = self.find_key(key)
        assert winner is not None
        return winner[1], False

    # -- the demo catalog

    def enable_demo(self) -> None:
        for statement in DEMO_SCHEMA:
            self._execute(statement)

    def invoices(
        self,
        *,
        invoice_id: int | None = None,
        customer_id: str | None = None,
        status: str | None = None,
        after_id: int = 0,
        limit: int = 1,
    ) -> list[dict[str, Any]]:
        """Invoices with their status (open, sent, void), by id, after ``after_id``: one page of a search."""
        where: list[str] = ["i.id > ?"]
        params: list[Any] = [after_id]
        for column, value in (("i.id", invoice_id), ("i.customer_id", customer_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        rows = self._execute(
            self._q(
                "SELECT * FROM (SELECT i.id, i.customer_id, i.amount_cents, i.memo, i.created_at, "
                f"{STATUS_SQL} AS status FROM invoices i) i WHERE {' AND '.join(where)} ORDER BY i.id LIMIT ?"
            ),
            (*params, limit),
        ).fetchall()
        return [{**json.loads(invoice_json(*row[:5])), "status": str(row[5])} for row in rows]

    def record_event_with_key(
        self, key: str, request_hash: str, invoice_id: int, kind: str, response: str, at: str, at_ms: int
    ) -> tuple[str, bool]:
        """An invoice event (sent, void) and its key record in one transaction, as atomic's create.
        Returns (response, created): a key recorded before answers with its first response."""

        def event() -> str:
            self._execute(
                self._q("INSERT INTO invoice_events (invoice_id, kind, at, at_ms) VALUES (?, ?, ?, ?)"),
                (invoice_id, kind, at, at_ms),
            )
            return response

        return self._once(key, request_hash, at, event)

    def events_since(self, kind: str, since_ms: int) -> list[int]:
        """When (epoch ms) each event of a kind happened since ``since_ms``, oldest first: a quota window."""
        rows = self._execute(
            self._q("SELECT at_ms FROM invoice_events WHERE kind = ? AND at_ms >= ? ORDER BY at_ms"),
            (kind, since_ms),
        ).fetchall()
        return [int(row[0]) for row in rows]

    def save_handle(self, handle: str, state: str, expires_at_ms: int, now_ms: int) -> None:
        """Keep a search's state under its handle (and forget the handles that expired long ago)."""
        with self.transaction():
            self._execute(
                self._q("DELETE FROM search_handles WHERE expires_at_ms < ?"), (now_ms - 86_400_000,)
            )
            self._execute(
                self._q("INSERT INTO search_handles (handle, state, expires_at_ms) VALUES (?, ?, ?)"),
                (handle, state, expires_at_ms),
            )

    def load_handle(self, handle: str) -> tuple[str, int] | None:
        """A search's state and when it expires (epoch ms), or None for a handle never issued."""
        row = self._execute(
            self._q("SELECT state, expires_at_ms FROM search_handles WHERE handle = ?"), (handle,)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def effects(self, memo_prefix: str) -> dict[str, int]:
        """Invoices per memo, for memos starting with the prefix: the read-only view the harness audits."""
        rows = self._execute(
            self._q("SELECT memo, COUNT(*) FROM invoices WHERE memo LIKE ? ESCAPE '\\' GROUP BY memo"),
            (memo_prefix.replace("%", r"\%").replace("_", r"\_") + "%",),
        ).fetchall()
        return {str(memo): int(n) for memo, n in rows}


WAL_SWITCH_PATIENCE_S = 10.0
"""How long a starting server retries switching its database to WAL while a twin holds it."""


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """``journal_mode=WAL``, retried while another process holds the file.

    Replicas started together open one file at once; the switch needs the file to
    itself, and SQLite answers SQLITE_BUSY at once, without its busy handler, while
    a twin is making the same switch or recovering the WAL. One of them won, so a
    short retry always succeeds.
    """
    deadline = time.monotonic() + WAL_SWITCH_PATIENCE_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class SqliteStore(Store):
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        _switch_to_wal(self.db)
        # NORMAL loses nothing on a process kill (only on power loss), which is the fault modelled here.
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=5000")
        self.db.executescript(SQLITE_SCHEMA)

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _insert_returning_id(self, sql: str, params: tuple[Any, ...]) -> int:
        cur = self.db.execute(sql, params)
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def _next_invoice_id(self) -> int:
        # Ids reserved here never collide with AUTOINCREMENT's: with key_first every invoice takes one.
        self.db.execute("CREATE TABLE IF NOT EXISTS invoice_ids (id INTEGER PRIMARY KEY AUTOINCREMENT)")
        return self._insert_returning_id("INSERT INTO invoice_ids DEFAULT VALUES", ())

    def _unique_violation(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)


class PostgresStore(Store):
    P = "%s"

    def __init__(self, url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self.db = psycopg.connect(url, autocommit=True)
        # Replicas start together: CREATE ... IF NOT EXISTS is not safe against a concurrent
        # twin in PostgreSQL (both pass the check, one fails on the catalog's unique index).
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(7282026)")
            for statement in POSTGRES_SCHEMA:
                self.db.execute(statement)

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    def _insert_returning_id(self, sql: str, params: tuple[Any, ...]) -> int:
        row = self.db.execute(sql + " RETURNING id", params).fetchone()
        assert row is not None
        return int(row[0])

    def _next_invoice_id(self) -> int:
        row = self.db.execute("SELECT nextval(pg_get_serial_sequence('invoices', 'id'))").fetchone()
        assert row is not None
        return int(row[0])

    def _unique_violation(self, exc: Exception) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)


def open_store(location: str) -> Store:
    """A PostgreSQL store for a postgresql:// URL, otherwise a SQLite file at that path."""
    if location.startswith(("postgresql://", "postgres://")):
        return PostgresStore(location)
    return SqliteStore(Path(location))
