"""PostgreSQL's frontend/backend protocol (version 3), as far as holding a commit needs it. Pure.

Framing: after start-up every message is one type byte and an Int32 length that
counts itself but not the type byte. The client's first messages have no type
byte (an Int32 length, then an Int32 code): a StartupMessage, or before it an
SSLRequest or GSSENCRequest (the proxy answers those itself, with one unframed
``N``, so the server never sends an unframed byte through it), or a
CancelRequest on a connection of its own. Every read may hold several messages
and end inside one: the framer parses them all and keeps the tail.

Where a commit becomes visible, from the server's side (``Transactions``): a
``COMMIT`` CommandComplete tag ends a transaction block (the commit is done when
the tag is sent, also in the extended protocol), and a ``ReadyForQuery`` with
status ``I`` after writes outside a block ends an implicit transaction
(autocommit, or several statements in one simple query, or one Sync of the
extended protocol; there the CommandComplete comes *before* the commit, so the
point is the ReadyForQuery). Only transactions that wrote are commits here:
writes are the INSERT, UPDATE, DELETE and MERGE tags; a read-only transaction,
DDL, COPY and a write hidden in a ``SELECT`` (a data-modifying ``WITH``, a
function) are not seen as writes. What the client asked for is followed too, so
that a commit can say which statements it made durable.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

STARTUP_V3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
ENCRYPTION_REQUESTS = frozenset({SSL_REQUEST, GSSENC_REQUEST})
REFUSED = b"N"
"""The unframed answer to an SSLRequest or GSSENCRequest: no, go on in clear."""

MAX_STARTUP = 10_000
"""PostgreSQL's own bound on a start-up packet."""
MAX_MESSAGE = 1 << 30
"""PostgreSQL's bound on any message (1 GB); a longer length means the stream is not its protocol."""
STATEMENT_LIMIT = 160
"""Characters of a statement a commit keeps, to say what it wrote."""

WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE"})
_SAVEPOINT_ROLLBACK = re.compile(r"^\s*ROLLBACK\s+((WORK|TRANSACTION)\s+)?TO\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Message:
    type: bytes
    """One byte; empty for a start-up message (length and code, no type byte)."""
    body: bytes
    raw: bytes
    """The message as it was on the wire."""

    @property
    def code(self) -> int:
        """A start-up message's code (protocol version, or which request it is)."""
        return int.from_bytes(self.body[:4], "big")


class Framer:
    """Splits one direction of a connection into messages; keeps a partial message for the next read.

    ``startup``: the stream begins with untyped start-up messages (the client's
    side), until a StartupMessage or CancelRequest. A length no PostgreSQL would
    send marks the stream ``broken``: its owner stops parsing and relays raw bytes.
    """

    def __init__(self, *, startup: bool = False) -> None:
        self.startup = startup
        self.broken = False
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        if self.broken:
            return []
        buffer = self._buffer
        buffer += data
        messages: list[Message] = []
        at = 0
        while True:
            if self.startup:
                if len(buffer) - at < 8:
                    break
                length = int.from_bytes(buffer[at : at + 4], "big")
                if not 8 <= length <= MAX_STARTUP:
                    self.broken = True
                    break
                if len(buffer) - at < length:
                    break
                raw = bytes(buffer[at : at + length])
                message = Message(b"", raw[4:], raw)
                if message.code not in ENCRYPTION_REQUESTS:
                    self.startup = False
            else:
                if len(buffer) - at < 5:
                    break
                length = int.from_bytes(buffer[at + 1 : at + 5], "big")
                if not 4 <= length <= MAX_MESSAGE:
                    self.broken = True
                    break
                if len(buffer) - at < 1 + length:
                    break
                raw = bytes(buffer[at : at + 1 + length])
                message = Message(raw[:1], raw[5:], raw)
            messages.append(message)
            at += len(raw)
        del buffer[:at]
        return messages

    def rest(self) -> bytes:
        """What is buffered and not yet a whole message; taken out of the framer."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest

    def spill(self) -> bytes:
        """Once the stream broke, what it buffered, to be relayed as it is; else nothing."""
        return self.rest() if self.broken else b""


def _cstrings(body: bytes, count: int) -> list[str]:
    """The first ``count`` NUL-terminated strings of a body, decoded leniently."""
    parts = body.split(b"\x00", count)
    return [p.decode("utf-8", "replace") for p in parts[:count]]


def statement_text(sql: str) -> str:
    """A statement as a commit reports it: one line, at most STATEMENT_LIMIT characters."""
    line = " ".join(sql.split())
    return line if len(line) <= STATEMENT_LIMIT else line[: STATEMENT_LIMIT - 1] + "…"


@dataclass(frozen=True, slots=True)
class Write:
    tag: str
    """The CommandComplete tag, e.g. ``INSERT 0 1``."""
    statement: str | None
    """The statement that wrote, as the client sent it (cut), when the proxy saw it."""


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction that wrote has committed; the message it was seen in is where to hold."""

    writes: tuple[Write, ...]
    autocommit: bool
    """True: an implicit transaction (no BEGIN) committed at ReadyForQuery; False: a COMMIT."""


@dataclass(slots=True)
class _Pending:
    """Something the client asked for whose completion the server has yet to report."""

    statement: str | None
    simple: bool = False
    """A simple Query: every CommandComplete until its ReadyForQuery belongs to it."""
    sync: bool = False
    """Ends at the next ReadyForQuery (a Query, or a Sync of the extended protocol)."""


class Transactions:
    """One connection's transactions, followed from both directions.

    Feed it every message the client sends (:meth:`client`) and every message the
    server sends (:meth:`server`), in the order the proxy relays them; ``server``
    returns the :class:`Commit` a message completes, at the message a hold must
    stop before.
    """

    def __init__(self) -> None:
        self.in_block = False
        """Inside BEGIN ... COMMIT (from the tags, corrected by ReadyForQuery's status)."""
        self._writes: list[Write] = []
        self._pending: deque[_Pending] = deque()
        self._statements: dict[str, str] = {}
        """Prepared statements by name ("" is the unnamed one)."""
        self._portals: dict[str, str | None] = {}

    # -- the client's side: what was asked, so a commit can say what it wrote
    def client(self, message: Message) -> None:
        kind, body = message.type, message.body
        if kind == b"Q":
            (sql,) = _cstrings(body, 1)
            self._pending.append(_Pending(statement_text(sql), simple=True, sync=True))
        elif kind == b"P":
            name, sql = _cstrings(body, 2)
            self._statements[name] = statement_text(sql)
        elif kind == b"B":
            portal, name = _cstrings(body, 2)
            self._portals[portal] = self._statements.get(name)
        elif kind == b"E":
            (portal,) = _cstrings(body, 1)
            self._pending.append(_Pending(self._portals.get(portal)))
        elif kind == b"S":
            self._pending.append(_Pending(None, sync=True))
        elif kind == b"C" and body[:1] in (b"S", b"P"):
            (name,) = _cstrings(body[1:], 1)
            (self._statements if body[:1] == b"S" else self._portals).pop(name, None)

    def _completed(self) -> str | None:
        """The statement a CommandComplete (or empty result) reports on."""
        if not self._pending:
            return None
        first = self._pending[0]
        if first.simple:
            return first.statement  # the query string may hold several statements; all end at its Z
        if first.sync:
            return None
        return self._pending.popleft().statement

    def _synced(self) -> None:
        """ReadyForQuery: everything asked up to the first Query or Sync has been answered."""
        while self._pending:
            if self._pending.popleft().sync:
                return

    # -- the server's side: where commits happen
    def server(self, message: Message) -> Commit | None:
        kind = message.type
        if kind == b"C":
            (tag,) = _cstrings(message.body, 1)
            return self._command(tag, self._completed())
        if kind in (b"I", b"s"):  # an empty query, a suspended portal: an Execute answered
            self._completed()
        elif kind == b"E" and not self.in_block:
            self._writes.clear()  # an implicit transaction fails whole
        elif kind == b"Z":
            self._synced()
            status = message.body[:1]
            self.in_block = status in (b"T", b"E")
            if status == b"I" and self._writes:
                commit = Commit(tuple(self._writes), autocommit=True)
                self._writes.clear()
                return commit
        return None

    def _command(self, tag: str, statement: str | None) -> Commit | None:
        command = tag.split(" ", 1)[0]
        if command in WRITES:
            self._writes.append(Write(tag, statement))
        elif command in ("BEGIN", "START"):
            self.in_block = True
        elif tag == "COMMIT":
            committed = self.in_block and bool(self._writes)
            writes = tuple(self._writes)
            self.in_block = False
            self._writes.clear()
            if committed:
                return Commit(writes, autocommit=False)
        elif tag == "ROLLBACK" and not (statement and _SAVEPOINT_ROLLBACK.match(statement)):
            self.in_block = False
            self._writes.clear()
        elif tag == "PREPARE TRANSACTION":
            self.in_block = False
            self._writes.clear()  # handed to a prepared transaction, committed (if ever) elsewhere
        return None
