"""A reference MCP server whose one side effect goes through a PostgreSQL client library of your choice.

The crash points' self-check holds a server at each of its commits, whatever the
library commits with. So this server does what ``targets/invoices`` does
(``create_invoice`` with a naive, keyed or atomic design) on four libraries, each
used the way servers use it, and with the ways to write that no tag tells:

``psycopg``        psycopg 3, sync, not autocommit: each unit of work is a transaction, ``commit()``
``psycopg-async``  psycopg 3's ``AsyncConnection``, the same
``asyncpg``        asyncpg's pool: ``fetchval`` of ``INSERT ... RETURNING`` (a row-limited Execute
                   answered PortalSuspended, committed at Sync), ``fetchrow``, ``execute``, a
                   transaction for the atomic design; the pool resets a connection it takes back
``sqlalchemy``     SQLAlchemy 2 Core on psycopg, ``pool_pre_ping``, ``engine.begin()``

It never imports the harness. Configuration by environment (bad values: one line, exit 2):

PORT, HOST            where to listen (loopback only)
PGCLIENTS_DB          a postgresql:// URL (the harness's {postgres_url})
PGCLIENTS_DRIVER      psycopg (default) | psycopg-async | asyncpg | sqlalchemy
PGCLIENTS_MODE        naive | keyed (look the key up; insert the invoice and commit; then the key
                      record, a second commit) | atomic (invoice and key record in one transaction)
PGCLIENTS_WRITE       how the invoice is written: insert (INSERT ... RETURNING, default) | cte (a
                      data-modifying WITH, whose tag says SELECT) | function (SELECT add_invoice(...),
                      a function that inserts) | copy (COPY ... FROM STDIN)
PGCLIENTS_WARMUP      1: the first call a process serves first commits a row of its own (``warmup``),
                      so that calls commit a varying number of times
PGCLIENTS_TRANSPORT   json (default) | sse: a progress notification before the work, so the answer is
                      the second event of an event stream
PGCLIENTS_SESSIONS    stateless (default) | stateful: 2025 clients get a session in this process's
                      memory (a restarted server answers 404 to the old one)
PGCLIENTS_POOL        1 (default) | 2 | 4 | 8: connections in asyncpg's pool (one serializes the calls'
                      statements; more let two calls run side by side, as a race needs)
PGCLIENTS_KEYS        unique (default) | plain: the key records in a table with no unique key (a flaw
                      whose only window is a race: atomic still commits the invoice and its key
                      record together, so no crash duplicates, but two attempts that both read no
                      key both commit; crash points find nothing, races find it)
PGCLIENTS_LOCK        none (default) | row: every call takes a lock as a row (committed before the
                      work, deleted after it) and waits while another holds it, as a lease without
                      an expiry does: a kill while it is held leaves the row, and after the restart
                      every call waits for ever
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

DRIVERS = ("psycopg", "psycopg-async", "asyncpg", "sqlalchemy")
MODES = ("naive", "keyed", "atomic")
WRITES = ("insert", "cte", "function", "copy")

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS invoices (id BIGSERIAL PRIMARY KEY, customer_id TEXT NOT NULL, "
    "amount_cents BIGINT NOT NULL, memo TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS idempotency_keys (key TEXT PRIMARY KEY, response TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS plain_keys (key TEXT NOT NULL, response TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS warmup (id BIGSERIAL PRIMARY KEY, pid INT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, pid INT NOT NULL)",
    "CREATE OR REPLACE FUNCTION add_invoice(c TEXT, a BIGINT, m TEXT) RETURNS BIGINT LANGUAGE sql AS "
    "$$ INSERT INTO invoices (customer_id, amount_cents, memo) VALUES (c, a, m) RETURNING id $$",
]
TAKE_LOCK = "INSERT INTO locks (name, pid) VALUES ('invoices', $1) ON CONFLICT DO NOTHING RETURNING name"
GIVE_LOCK = "DELETE FROM locks WHERE name = 'invoices'"
LOCK_POLL_S = 0.05
INSERT = "INSERT INTO invoices (customer_id, amount_cents, memo) VALUES ($1, $2, $3) RETURNING id"
WRITE_SQL = {
    "insert": INSERT,
    "cte": f"WITH created AS ({INSERT}) SELECT id FROM created",
    "function": "SELECT add_invoice($1, $2, $3)",
}
KEYS = {
    "unique": (
        "SELECT response FROM idempotency_keys WHERE key = $1",
        "INSERT INTO idempotency_keys (key, response) VALUES ($1, $2)",
    ),
    "plain": (
        "SELECT response FROM plain_keys WHERE key = $1 LIMIT 1",
        "INSERT INTO plain_keys (key, response) VALUES ($1, $2)",
    ),
}
"""(find, record) of each PGCLIENTS_KEYS."""
NEXT_ID = "SELECT nextval(pg_get_serial_sequence('invoices', 'id'))"
COPY_COLUMNS = ("id", "customer_id", "amount_cents", "memo")


class ConfigError(Exception):
    """A bad environment variable: one line, exit code 2."""


class Unit(Protocol):
    """One unit of work on one connection: statements in ``$n`` style, committed when it ends."""

    async def fetchval(self, sql: str, *args: Any) -> Any: ...

    async def execute(self, sql: str, *args: Any) -> None: ...

    async def copy(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None: ...


class Store(Protocol):
    async def open(self) -> None:
        """Connect (and let the library learn the server) before any call: what a library does on its
        first connection would otherwise be commits of the first call only."""
        ...

    def unit(self, atomic: bool = False) -> contextlib.AbstractAsyncContextManager[Unit]:
        """A transaction of its own (asyncpg: autocommit statements, or ``transaction()`` when
        ``atomic`` asks for one), committed at the end, rolled back on an error."""
        ...


def _percent(sql: str) -> str:
    return re.sub(r"\$\d+", "%s", sql)


class PsycopgStore:
    """psycopg 3, sync, not autocommit: BEGIN before the first statement, COMMIT at the unit's end."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)

    async def open(self) -> None:
        pass

    @contextlib.asynccontextmanager
    async def unit(self, atomic: bool = False) -> AsyncIterator[Unit]:
        with self.conn.transaction():
            yield _PsycopgUnit(self.conn)


class _PsycopgUnit:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = self.conn.execute(_percent(sql), args).fetchone()
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> None:
        self.conn.execute(_percent(sql), args)

    async def copy(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        with self.conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


class PsycopgAsyncStore:
    """psycopg 3's AsyncConnection: the same transactions, awaited."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.url)

    @contextlib.asynccontextmanager
    async def unit(self, atomic: bool = False) -> AsyncIterator[Unit]:
        async with self.conn.transaction():
            yield _PsycopgAsyncUnit(self.conn)


class _PsycopgAsyncUnit:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetchval(self, sql: str, *args: Any) -> Any:
        cur = await self.conn.execute(_percent(sql), args)
        row = await cur.fetchone()
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> None:
        await self.conn.execute(_percent(sql), args)

    async def copy(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        async with self.conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)


class AsyncpgStore:
    """asyncpg's pool: each statement commits on its own (autocommit), unless in a transaction."""

    def __init__(self, url: str, size: int = 1) -> None:
        self.url = url
        self.size = size
        self.pool: Any = None

    async def open(self) -> None:
        import asyncpg

        self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=self.size)

    @contextlib.asynccontextmanager
    async def unit(self, atomic: bool = False) -> AsyncIterator[Unit]:
        async with self.pool.acquire() as conn:
            if atomic:
                async with conn.transaction():
                    yield _AsyncpgUnit(conn)
            else:
                yield _AsyncpgUnit(conn)


class _AsyncpgUnit:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.conn.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> None:
        await self.conn.execute(sql, *args)

    async def copy(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        await self.conn.copy_records_to_table(table, records=rows, columns=list(columns))


class SqlalchemyStore:
    """SQLAlchemy 2 Core on psycopg: a pool that pings before lending, ``engine.begin()`` per unit."""

    def __init__(self, url: str) -> None:
        import sqlalchemy

        self.sa = sqlalchemy
        self.engine = sqlalchemy.create_engine(
            url.replace("postgresql://", "postgresql+psycopg://", 1), pool_pre_ping=True, pool_size=1
        )

    async def open(self) -> None:
        with self.engine.connect():
            pass  # the dialect reads the server's version and settings on the first connection

    @contextlib.asynccontextmanager
    async def unit(self, atomic: bool = False) -> AsyncIterator[Unit]:
        with self.engine.begin() as conn:
            yield _SqlalchemyUnit(self.sa, conn)


class _SqlalchemyUnit:
    def __init__(self, sa: Any, conn: Any) -> None:
        self.sa, self.conn = sa, conn

    def _bound(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
        return self.sa.text(re.sub(r"\$(\d+)", r":p\1", sql)), {f"p{i}": v for i, v in enumerate(args, 1)}

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return self.conn.execute(*self._bound(sql, args)).scalar()

    async def execute(self, sql: str, *args: Any) -> None:
        self.conn.execute(*self._bound(sql, args))

    async def copy(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        raw = self.conn.connection.driver_connection  # the psycopg connection under the pool
        with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


STORES: dict[str, Callable[[str], Store]] = {
    "psycopg": PsycopgStore,
    "psycopg-async": PsycopgAsyncStore,
    "asyncpg": AsyncpgStore,
    "sqlalchemy": SqlalchemyStore,
}


def config(env: dict[str, str]) -> dict[str, Any]:
    def choice(name: str, choices: Sequence[str], default: str) -> str:
        value = env.get(name, default)
        if value not in choices:
            raise ConfigError(f"{name}={value!r}; choose one of {', '.join(choices)}")
        return value

    url = env.get("PGCLIENTS_DB", "")
    if not url.startswith(("postgresql://", "postgres://")) or "PORT" not in env:
        raise ConfigError("PORT and PGCLIENTS_DB (a postgresql:// URL) must be set")
    host = env.get("HOST", "127.0.0.1")
    if not (host.startswith("127.") or host in ("::1", "localhost")):
        raise ConfigError(f"HOST={host!r}: the reference target only listens on loopback")
    if not env["PORT"].isdigit():
        raise ConfigError(f"PORT={env['PORT']!r} is not a port number")
    return {
        "url": url,
        "host": host,
        "port": int(env["PORT"]),
        "driver": choice("PGCLIENTS_DRIVER", DRIVERS, "psycopg"),
        "mode": choice("PGCLIENTS_MODE", MODES, "atomic"),
        "write": choice("PGCLIENTS_WRITE", WRITES, "insert"),
        "warmup": choice("PGCLIENTS_WARMUP", ("0", "1"), "0") == "1",
        "sse": choice("PGCLIENTS_TRANSPORT", ("json", "sse"), "json") == "sse",
        "stateful": choice("PGCLIENTS_SESSIONS", ("stateless", "stateful"), "stateless") == "stateful",
        "lock": choice("PGCLIENTS_LOCK", ("none", "row"), "none") == "row",
        "keys": choice("PGCLIENTS_KEYS", tuple(KEYS), "unique"),
        "pool": int(choice("PGCLIENTS_POOL", ("1", "2", "4", "8"), "1")),
    }


async def open_store(cfg: dict[str, Any]) -> Store:
    """The store, connected, with its schema (a lock keeps two starting servers from racing on it)."""
    store: Store = (
        AsyncpgStore(cfg["url"], cfg["pool"])
        if cfg["driver"] == "asyncpg"
        else STORES[cfg["driver"]](cfg["url"])
    )
    await store.open()
    async with store.unit(atomic=True) as unit:
        await unit.execute("SELECT pg_advisory_xact_lock(7282027)")
        for statement in SCHEMA:
            await unit.execute(statement)
    return store


def build_server(cfg: dict[str, Any], store: Store) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("reference-pgclients", version="1.0.0", log_level="WARNING")
    state = {"warm": not cfg["warmup"]}

    async def write(unit: Unit, customer_id: str, amount_cents: int, memo: str) -> int:
        if cfg["write"] == "copy":
            invoice_id = int(await unit.fetchval(NEXT_ID))
            await unit.copy("invoices", COPY_COLUMNS, [(invoice_id, customer_id, amount_cents, memo)])
            return invoice_id
        return int(await unit.fetchval(WRITE_SQL[cfg["write"]], customer_id, amount_cents, memo))

    def result(response: str) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=response)], structured_content=json.loads(response)
        )

    @contextlib.asynccontextmanager
    async def locked() -> AsyncIterator[None]:
        """The lock row, taken (waiting while another holds it) and given back after the work."""
        if not cfg["lock"]:
            yield
            return
        while True:
            async with store.unit() as unit:
                if await unit.fetchval(TAKE_LOCK, os.getpid()) is not None:
                    break
            await asyncio.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            async with store.unit() as unit:
                await unit.execute(GIVE_LOCK)

    @server.tool(description="Creates an invoice; a retry with the same idempotency_key returns the first.")
    async def create_invoice(
        customer_id: str, amount_cents: int, memo: str, ctx: Context, idempotency_key: str | None = None
    ) -> CallToolResult:
        if cfg["sse"]:
            await ctx.report_progress(1, 2)
        async with locked():
            return await invoice(customer_id, amount_cents, memo, idempotency_key)

    async def invoice(
        customer_id: str, amount_cents: int, memo: str, idempotency_key: str | None
    ) -> CallToolResult:
        if not state["warm"]:
            async with store.unit() as unit:
                await unit.execute("INSERT INTO warmup (pid) VALUES ($1)", os.getpid())
            state["warm"] = True
        mode = cfg["mode"]
        find, record = KEYS[cfg["keys"]]
        if mode != "naive":
            if not idempotency_key:
                return CallToolResult(
                    content=[TextContent(type="text", text="idempotency_key required")], is_error=True
                )
            async with store.unit() as unit:
                found = await unit.fetchval(find, idempotency_key)
            if found is not None:
                return result(found)

        def rendered(invoice_id: int) -> str:
            return json.dumps(
                {
                    "invoice_id": invoice_id,
                    "customer_id": customer_id,
                    "amount_cents": amount_cents,
                    "memo": memo,
                }
            )

        if mode == "atomic":
            assert idempotency_key is not None
            try:
                async with store.unit(atomic=True) as unit:
                    response = rendered(await write(unit, customer_id, amount_cents, memo))
                    await unit.execute(record, idempotency_key, response)
            except Exception as exc:  # a unique violation: another attempt with the key committed first
                if "duplicate key" not in str(exc) and "unique" not in str(exc).lower():
                    raise
                async with store.unit() as unit:
                    return result(await unit.fetchval(find, idempotency_key))
            return result(response)
        async with store.unit() as unit:
            response = rendered(await write(unit, customer_id, amount_cents, memo))
        if mode == "keyed":
            assert idempotency_key is not None
            async with store.unit() as unit:
                await unit.execute(record, idempotency_key, response)
        return result(response)

    return server


async def serve(cfg: dict[str, Any]) -> None:
    server = build_server(cfg, await open_store(cfg))
    app = server.streamable_http_app(
        json_response=not cfg["sse"], stateless_http=not cfg["stateful"], host=cfg["host"]
    )
    print(
        f"pgclients: driver={cfg['driver']} mode={cfg['mode']} write={cfg['write']} "
        f"listening on http://{cfg['host']}:{cfg['port']}/mcp",
        file=sys.stderr,
        flush=True,
    )
    settings = uvicorn.Config(app, host=cfg["host"], port=cfg["port"], log_level="warning", access_log=False)
    await uvicorn.Server(settings).serve()


def main() -> int:
    try:
        cfg = config(dict(os.environ))
    except ConfigError as exc:
        print(f"pgclients: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
