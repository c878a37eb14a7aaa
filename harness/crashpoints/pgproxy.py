"""The PostgreSQL proxy: the target's database connections pass it, and it can hold a commit's reply.

When crash points run, ``{postgres_url}`` names this proxy instead of the
harness's cluster. It relays every byte both ways, framing each direction
(``pgwire``) to follow the connection's transactions, and when a transaction
has committed (any transaction that ran a statement, labelled with whether it
wrote) it asks the hold controller whether to hold. Held, the
reply stops before the message that tells the commit (a ``COMMIT`` tag, or the
ReadyForQuery that ends an implicit transaction): the database has committed, the
server waits, and the controller kills it. The harness's own connections (the
final read, start-up checks) go to the cluster directly and are never held or
counted.

SSL and GSS encryption requests are answered ``N`` here: the proxy must read
the messages, and on loopback the cluster refuses TLS anyway, so clients with
``sslmode=prefer`` (libpq's default) go on in clear. A stream the framer cannot
read is relayed untouched from there on, without holds.
"""

from __future__ import annotations

import asyncio
import contextlib

from harness.crashpoints.holds import HoldPoints
from harness.crashpoints.pgwire import ENCRYPTION_REQUESTS, REFUSED, Framer, Message, Transactions
from harness.loopback import LoopbackServer

_READ = 65536


class PostgresProxy(LoopbackServer):
    """Relays the target's PostgreSQL connections to the cluster at ``upstream_port``."""

    def __init__(self, upstream_port: int, holds: HoldPoints, port: int = 0) -> None:
        super().__init__(port)
        self.upstream_port = upstream_port
        self.holds = holds

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        generation = self.holds.connection()
        if generation is None:
            return  # the fence: only the pod killed at a point can be connecting now
        framer = Framer(startup=True)
        first: list[Message] = []
        while framer.startup:  # encryption requests are answered here; the rest waits for the server
            data = await reader.read(_READ)
            if not data:
                return
            for message in framer.feed(data):
                if message.type == b"" and message.code in ENCRYPTION_REQUESTS:
                    writer.write(REFUSED)
                else:
                    first.append(message)
            if framer.broken:
                return  # not a PostgreSQL client
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            transactions = Transactions()
            for message in first:
                transactions.client(message)
            up_writer.write(b"".join(m.raw for m in first))  # a partial message stays in the framer
            sides = [
                asyncio.ensure_future(self._from_client(reader, up_writer, framer, transactions, generation)),
                asyncio.ensure_future(self._from_server(up_reader, writer, transactions, generation)),
            ]
            try:
                await asyncio.wait(sides, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for side in sides:
                    side.cancel()
                await asyncio.gather(*sides, return_exceptions=True)
        finally:
            up_writer.transport.abort()

    def _cut(self, generation: int) -> bool:
        """The pod this connection belongs to is being killed: nothing more of it gets through."""
        return self.holds.cut(generation)

    async def _from_client(
        self,
        reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        framer: Framer,
        transactions: Transactions,
        generation: int,
    ) -> None:
        while data := await reader.read(_READ):
            if self._cut(generation):
                continue
            if framer.broken:
                up_writer.write(data)
            else:
                messages = framer.feed(data)
                for message in messages:
                    transactions.client(message)
                up_writer.write(b"".join(m.raw for m in messages) + framer.spill())
            with contextlib.suppress(ConnectionError):
                await up_writer.drain()

    async def _from_server(
        self,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        transactions: Transactions,
        generation: int,
    ) -> None:
        framer = Framer()
        while data := await up_reader.read(_READ):
            if self._cut(generation):
                continue
            if framer.broken:
                writer.write(data)
                continue
            relayed = bytearray()
            for message in framer.feed(data):
                commit = transactions.server(message)
                if commit is not None and self.holds.db_commit(commit):
                    break  # held: this message and everything after it stay here; the pod is dying
                relayed += message.raw
            relayed += framer.spill()
            writer.write(relayed)
            await writer.drain()
