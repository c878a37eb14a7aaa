"""Record what psycopg and node-postgres say to PostgreSQL, for the wire protocol's unit tests.

Run from the repository root (needs the PostgreSQL server binaries, and ``make node`` for the
node-postgres recording): ``.venv/bin/python -m tests.corpus.pgwire.record``. It starts a
throwaway cluster, puts a recording relay in front of it (which answers SSL requests ``N`` as
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

import psycopg

from harness.crashpoints.pgwire import ENCRYPTION_REQUESTS, REFUSED, Framer
from harness.loopback import LoopbackServer, free_port
from harness.services import Postgres

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
    for client in sys.argv[1:] or ["psycopg", "node-postgres"]:
        asyncio.run(record(client, client))
