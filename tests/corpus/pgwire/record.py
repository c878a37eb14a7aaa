"""Record what PostgreSQL clients say to PostgreSQL, for the wire protocol's unit tests.

psycopg 3 (sync and async), asyncpg, SQLAlchemy (on psycopg) and node-postgres, each doing what
servers do with them, and the ways to write that no tag tells (a data-modifying WITH, a function,
COPY FROM STDIN). Run from the repository root (needs the PostgreSQL server binaries, and ``make
node`` for the node-postgres recording): ``.venv/bin/python -m tests.corpus.pgwire.record [NAME...]``.
It starts a throwaway cluster, puts a recording relay in front of it (which answers SSL requests ``N`` as
the harness's proxy does, so the server's side is what the proxy reads), runs each client's
script through it and writes ``<client>.jsonl``: one chunk per line, in the order the relay
read them, ``{"from": "client" | "server", "hex": ...}``. The unit tests replay these files.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import psycopg

from harness.crashpoints.pgwire import ENCRYPTION_REQUESTS, REFUSED, Framer
from harness.loopback import LoopbackServer, free_port
from harness.services import Postgres

CLIENTS = ["psycopg", "psycopg-writes", "psycopg-async", "asyncpg", "sqlalchemy"]
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

NODE_SCRIPT = """
const pg = require(process.argv[1]);
(async () => {
  const pool = new pg.Pool({ connectionString: process.argv[2], max: 1 });
  await pool.query('CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)');
  await pool.query('INSERT INTO t (memo) VALUES ($1)', ['autocommit']);
  const client = await pool.connect();
  await client.query('BEGIN');
  await client.query('INSERT INTO t (memo) VALUES ($1) RETURNING id', ['in a block']);
  await client.query('COMMIT');
  await client.query('BEGIN');
  await client.query('SELECT memo FROM t WHERE memo = $1', ['in a block']);
  await client.query('COMMIT');
  await client.query('BEGIN');
  try { await client.query('INSERT INTO t (memo) VALUES ($1)', ['autocommit']); } catch (e) {}
  await client.query('ROLLBACK');
  client.release();
  await pool.end();
})();
"""


def psycopg_script(url: str) -> None:
    """What the reference target does, and the cases around it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)")
        conn.execute("SELECT memo FROM t WHERE memo = %s", ("nothing",))  # a read in autocommit
        with conn.transaction():  # keyed's first commit
            conn.execute("INSERT INTO t (memo) VALUES (%s) RETURNING id", ("in a block",))
        conn.execute("INSERT INTO t (memo) VALUES (%s)", ("autocommit",))  # a write in autocommit
        with conn.transaction():  # read-only: a COMMIT that is no commit point
            conn.execute("SELECT count(*) FROM t")
        try:
            with conn.transaction():  # a unique violation: rolled back
                conn.execute("INSERT INTO t (memo) VALUES (%s)", ("autocommit",))
        except psycopg.errors.UniqueViolation:
            pass
        with conn.transaction(), conn.transaction():  # a savepoint inside a block
            conn.execute("INSERT INTO t (memo) VALUES (%s)", ("nested",))
        conn.execute("BEGIN; INSERT INTO t (memo) VALUES ('simple'); COMMIT")  # one simple query
        with conn.pipeline():  # several messages in one read
            conn.execute("INSERT INTO t (memo) VALUES (%s)", ("piped 1",))
            conn.execute("INSERT INTO t (memo) VALUES (%s)", ("piped 2",))


def psycopg_writes_script(url: str) -> None:
    """Writes no tag tells (a function, a data-modifying WITH), COPY both ways, DDL, and a pool's reset."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)")
        conn.execute(
            "CREATE OR REPLACE FUNCTION add_t(m text) RETURNS bigint LANGUAGE sql AS "
            "$$ INSERT INTO t (memo) VALUES (m) RETURNING id $$"
        )
        conn.execute("SELECT add_t(%s)", ("by a function",))
        conn.execute("WITH x AS (INSERT INTO t (memo) VALUES (%s) RETURNING id) SELECT id FROM x", ("cte",))
        with conn.cursor() as cur, cur.copy("COPY t (memo) FROM STDIN") as copy:
            copy.write_row(("copied",))
        with conn.cursor() as cur, cur.copy("COPY (SELECT memo FROM t) TO STDOUT") as copy:
            for _ in copy:
                pass
        conn.execute("DISCARD ALL")  # what a pool sends between borrowers: changes no data


async def psycopg_async_script(url: str) -> None:
    """psycopg's async connection as servers use it: not autocommit, commit() after the work."""
    conn = await psycopg.AsyncConnection.connect(url)
    await conn.execute("CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)")
    await conn.commit()
    cur = await conn.execute("SELECT memo FROM t WHERE memo = %s", ("async",))
    await cur.fetchone()
    await conn.execute("INSERT INTO t (memo) VALUES (%s) RETURNING id", ("async",))
    await conn.commit()  # the read and the write: one transaction
    await conn.execute("SELECT count(*) FROM t")
    await conn.commit()  # a read-only transaction: a commit that wrote nothing
    await conn.close()


async def asyncpg_script(url: str) -> None:
    """asyncpg as the common Python async driver is used: fetchval of INSERT ... RETURNING (a row-limited
    Execute answered PortalSuspended, committed at Sync), fetchrow, execute, executemany, a
    transaction, a prepared statement reused, COPY from records."""
    conn = await asyncpg.connect(url)
    await conn.execute("CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)")
    await conn.fetchval("INSERT INTO t (memo) VALUES ($1) RETURNING id", "fetchval")
    await conn.fetchrow("SELECT memo FROM t WHERE memo = $1", "fetchval")
    await conn.execute("INSERT INTO t (memo) VALUES ($1)", "execute")
    await conn.executemany("INSERT INTO t (memo) VALUES ($1)", [("many 1",), ("many 2",)])
    async with conn.transaction():
        await conn.fetchval("INSERT INTO t (memo) VALUES ($1) RETURNING id", "in a transaction")
        await conn.execute("UPDATE t SET memo = memo || '' WHERE memo = $1", "in a transaction")
    await conn.fetchval("INSERT INTO t (memo) VALUES ($1) RETURNING id", "fetchval again")
    await conn.copy_records_to_table("t", records=[("copied",)], columns=["memo"])
    await conn.close()


def sqlalchemy_script(url: str) -> None:
    """SQLAlchemy 2 on psycopg: a pool that pings before lending, engine.begin(), a connection that
    only reads (and rolls back), an ORM-style session commit."""
    import sqlalchemy as sa

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)"))
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t (memo) VALUES (:m)"), {"m": "begin"})
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT memo FROM t WHERE memo = :m"), {"m": "begin"}).fetchall()
    with engine.connect() as conn:
        conn.execute(sa.text("INSERT INTO t (memo) VALUES (:m) RETURNING id"), {"m": "commit"}).scalar()
        conn.commit()
    engine.dispose()


class Recorder(LoopbackServer):
    def __init__(self, upstream: int) -> None:
        super().__init__()
        self.upstream = upstream
        self.chunks: list[dict[str, str]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        framer = Framer(startup=True)
        held = b""
        while framer.startup:
            data = await reader.read(65536)
            if not data:
                return
            self.chunks.append({"from": "client", "hex": data.hex()})
            for message in framer.feed(data):
                if message.code in ENCRYPTION_REQUESTS and message.type == b"":
                    writer.write(REFUSED)
                else:
                    held += message.raw
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        up_writer.write(held)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, side: str) -> None:
            while data := await src.read(65536):
                self.chunks.append({"from": side, "hex": data.hex()})
                dst.write(data)
            dst.close()

        await asyncio.gather(pump(reader, up_writer, "client"), pump(up_reader, writer, "server"))


async def record(name: str, run: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        postgres = Postgres(Path(tmp), "record", free_port())
        await postgres.start()
        recorder = Recorder(postgres.port)
        try:
            await recorder.start()
            url = f"postgresql://postgres@127.0.0.1:{recorder.port}/record"
            if run == "psycopg":
                await asyncio.to_thread(psycopg_script, url)
            elif run == "psycopg-writes":
                await asyncio.to_thread(psycopg_writes_script, url)
            elif run == "psycopg-async":
                await psycopg_async_script(url)
            elif run == "asyncpg":
                await asyncpg_script(url)
            elif run == "sqlalchemy":
                await asyncio.to_thread(sqlalchemy_script, url)
            else:
                pg = str(ROOT / "targets" / "invoices-ts" / "node_modules" / "pg")
                await asyncio.to_thread(subprocess.run, ["node", "-e", NODE_SCRIPT, pg, url], check=True)
            await asyncio.sleep(0.2)
        finally:
            await recorder.close()
            await postgres.stop()
        lines = "".join(json.dumps(chunk) + "\n" for chunk in recorder.chunks)
        (HERE / f"{name}.jsonl").write_text(lines, encoding="utf-8")


if __name__ == "__main__":
    for client in sys.argv[1:] or [*CLIENTS, "node-postgres"]:
        asyncio.run(record(client, client))
