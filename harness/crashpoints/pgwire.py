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
status ``I`` after statements outside a block ends an implicit transaction
(autocommit, or several statements in one simple query, or everything up to
one Sync of the extended protocol, a pipeline's or a ``PortalSuspended``
row-limited Execute's; there the CommandComplete comes *before* the commit, so
the point is the ReadyForQuery).

*Every* transaction that ran a statement and committed is a commit here, whatever
the client library, the protocol path or what the statements were: whether it
wrote is a label (:class:`Wrote`), read from the tags (INSERT, UPDATE, DELETE,
MERGE, COPY FROM, DDL), the CopyInResponse, and the statement's text (a
data-modifying ``WITH``, a function or procedure call: ``unknown``), never a filter
that hides a commit. Transactions of session commands only (``SET``, ``RESET``,
``DISCARD``, ``DEALLOCATE``, ``CLOSE``, ``LISTEN``: a connection pool's reset)
change no data and are no commits; a transaction that failed or rolled back is
none either. What the client asked for is followed too, so that a commit can say
which statements it made durable and a *label* (``INSERT invoices``) that finds
the same commit in another call whatever its index.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

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
STATEMENTS_KEPT = 4096
"""Statement texts whose label and reading are kept, computed once: a server sends the same few
statements in every call (its parameters apart), and the relay saw every commit's regexes run again."""

WRITE_COMMANDS = frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "ALTER", "DROP", "TRUNCATE", "GRANT", "REVOKE"}
    | {"COMMENT", "REFRESH", "CLUSTER", "REINDEX", "IMPORT", "SECURITY", "COMMIT PREPARED"}
)
"""Tags (their first word; ``COMMIT PREPARED`` whole) of statements that change data or schema."""
SESSION_COMMANDS = frozenset(
    {"SET", "RESET", "SHOW", "DISCARD", "DEALLOCATE", "CLOSE", "LISTEN", "UNLISTEN", "PREPARE"}
    | {"SAVEPOINT", "RELEASE"}
)
"""Tags of statements that change no data: a transaction of only these is no commit."""
_SAVEPOINT_ROLLBACK = re.compile(r"^\s*ROLLBACK\s+((WORK|TRANSACTION)\s+)?TO\b", re.IGNORECASE)
_REL = r"(?:\"[^\"]+\"|[a-z_][\w$]*)(?:\.(?:\"[^\"]+\"|[a-z_][\w$]*))?"
"""A relation's name, perhaps schema-qualified and quoted."""
_LABELS = [
    (re.compile(rf"\bINSERT\s+INTO\s+({_REL})", re.I), "INSERT"),
    (re.compile(rf"\bUPDATE\s+(?:ONLY\s+)?({_REL})(?:\s+(?:AS\s+)?\w+)?\s+SET\b", re.I), "UPDATE"),
    (re.compile(rf"\bDELETE\s+FROM\s+(?:ONLY\s+)?({_REL})", re.I), "DELETE"),
    (re.compile(rf"\bMERGE\s+INTO\s+({_REL})", re.I), "MERGE"),
    (re.compile(rf"^\s*COPY\s+({_REL})", re.I), "COPY"),
    (re.compile(rf"^\s*SELECT\b(?:(?!\bFROM\b).)*?\bINTO\s+(?:TABLE\s+)?({_REL})", re.I | re.S), "INTO"),
    (
        re.compile(
            r"^\s*(?:CREATE|ALTER|DROP|TRUNCATE)\b.*?\b(?:TABLE|INDEX|SEQUENCE|VIEW|TYPE|FUNCTION|PROCEDURE|"
            rf"SCHEMA|TRIGGER)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_REL})",
            re.I | re.S,
        ),
        "DDL",
    ),
]
"""Statements that change data, found in a statement's text (a data-modifying ``WITH`` too): the verb
and the relation, so that a commit can be found again in another call by what it wrote."""
_WRITING = [regex for regex, verb in _LABELS if verb not in ("COPY", "DDL")]
"""What writes whatever its tag says (a COPY writes only FROM STDIN: the CopyInResponse tells)."""
_CALL = re.compile(r"^\s*(?:CALL|DO)\b", re.I)
_NAME_UNSAFE = re.compile(r"[^\w.$]")
"""What a label keeps of a name: word characters, dots and dollars (no quotes, no markup): ``"t"`` and
``t`` are one table."""
_FUNCTION = re.compile(rf"({_REL})\s*\(", re.I)
_FROM = re.compile(rf"\bFROM\s+({_REL})", re.I)
NOT_CALLS = frozenset(
    {
        "count",
        "sum",
        "min",
        "max",
        "avg",
        "coalesce",
        "now",
        "lower",
        "upper",
        "length",
        "exists",
        "in",
        "any",
        "all",
        "some",
        "values",
        "cast",
        "nullif",
        "greatest",
        "least",
        "array_agg",
        "json_agg",
        "jsonb_agg",
        "string_agg",
        "row_number",
        "abs",
        "round",
        "date_trunc",
        "to_char",
        "extract",
        "substring",
        "trim",
        "char_length",
        "md5",
        "concat",
        "position",
        "current_setting",
        "json_build_object",
        "jsonb_build_object",
        "to_json",
        "to_jsonb",
        "array",
        "unnest",
        "generate_series",
        "on",
        "and",
        "or",
        "not",
        "where",
        "using",
        "over",
        "filter",
        "from",
        "join",
        "as",
        "when",
        "then",
        "else",
        "select",
        "with",
        "lateral",
        "by",
        "having",
        "interval",
        "table",
        "into",
        "set",
        "returning",
        "conflict",
        "key",
        "check",
        "references",
        "primary",
        "unique",
        "default",
        "varchar",
        "char",
        "numeric",
        "decimal",
        "timestamp",
        "timestamptz",
        "copy",
        "pg_advisory_lock",
        "pg_advisory_unlock",
        "pg_advisory_unlock_all",
        "pg_advisory_xact_lock",
        "pg_try_advisory_lock",
        "pg_try_advisory_xact_lock",
        "set_config",
        "pg_sleep",
        "version",
        "current_database",
    }
)
"""Words followed by ``(`` that are no call that could write: keywords, and pure built-in functions."""
_KEYWORDS = frozenset(
    {"in", "any", "all", "some", "values", "on", "and", "or", "not", "where", "using", "over", "filter"}
    | {"from", "join", "as", "when", "then", "else", "select", "with", "lateral", "by", "having", "exists"}
)
"""Of those, the words that are no function at all."""


class Wrote(enum.StrEnum):
    """Whether a commit changed data, as far as the wire tells: a label, never a filter."""

    YES = "yes"
    """A write tag (INSERT, UPDATE, DELETE, MERGE, COPY FROM, DDL) or a data-modifying statement."""
    UNKNOWN = "unknown"
    """A call of a function or procedure, or a statement the proxy did not see: it may have written."""
    NO = "no"
    """Reads only."""


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
    """The first ``count`` NUL-terminated strings of a body, decoded leniently; those a malformed body
    lacks are empty. The proxy never judges a frame: it relays it, and PostgreSQL answers a malformed
    one as it does (an ErrorResponse, then it closes), so following it must never raise."""
    parts = body.split(b"\x00", count)[:count]
    return [p.decode("utf-8", "replace") for p in parts] + [""] * (count - len(parts))


def statement_text(sql: str) -> str:
    """A statement as a commit reports it: one line, at most STATEMENT_LIMIT characters."""
    line = " ".join(sql.split())
    return line if len(line) <= STATEMENT_LIMIT else line[: STATEMENT_LIMIT - 1] + "…"


def _name(relation: str) -> str:
    return _NAME_UNSAFE.sub("_", relation.replace('"', "").lower())


@lru_cache(maxsize=STATEMENTS_KEPT)
def statement_label(sql: str) -> str | None:
    """What a statement changes, as ``INSERT invoices``; for one that changes nothing the text shows, the
    function it calls (``CALL add_invoice``), what it reads (``SELECT idempotency_keys``) or its first
    word and function (``SELECT pg_advisory_unlock_all``, a pool's reset); None for no text."""
    found = [(m.start(), verb, m[1]) for regex, verb in _LABELS if (m := regex.search(sql))]
    if found:
        _, verb, relation = min(found)
        if verb == "DDL":
            verb = sql.split(None, 1)[0].upper()
        return f"{verb} {_name(relation)}"
    functions = [m[1] for m in _FUNCTION.finditer(sql)]
    calls = [f for f in functions if f.lower() not in NOT_CALLS]
    if calls:
        return f"CALL {_name(calls[0])}"
    if (m := _FROM.search(sql)) is not None:
        return f"SELECT {_name(m[1])}"
    words = sql.split(None, 1)
    if not words:
        return None
    verb = _name(words[0]).upper()
    pure = [f for f in functions if f.lower() not in _KEYWORDS]
    return f"{verb} {_name(pure[0])}" if pure else verb


@lru_cache(maxsize=STATEMENTS_KEPT)
def _text_wrote(text: str) -> Wrote:
    """Whether a statement whose tag does not say it wrote did, by its text."""
    if any(regex.search(text) for regex in _WRITING):
        return Wrote.YES  # a data-modifying WITH, SELECT INTO: the tag says SELECT
    if _CALL.match(text) or any(m[1].lower() not in NOT_CALLS for m in _FUNCTION.finditer(text)):
        return Wrote.UNKNOWN
    return Wrote.NO


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement a transaction ran, as the server reported it done."""

    tag: str
    """The CommandComplete tag (``INSERT 0 1``); empty for a portal suspended at its row limit."""
    text: str | None
    """The statement as the client sent it (cut), when the proxy saw it."""
    copy_in: bool = False
    """A COPY the client sent rows to (``COPY ... FROM STDIN``), not one that read rows out."""

    @property
    def wrote(self) -> Wrote:
        command = self.tag.split(" ", 1)[0]
        if command in WRITE_COMMANDS or self.tag == "COMMIT PREPARED" or self.copy_in:
            return Wrote.YES
        if self.text is None:
            return Wrote.UNKNOWN  # a SELECT tag may be a data-modifying WITH
        return _text_wrote(self.text)

    @property
    def label(self) -> str | None:
        if self.text is not None and (label := statement_label(self.text)) is not None:
            return label
        return self.tag.split(" ", 1)[0] or None

    def __str__(self) -> str:
        return self.text or self.tag or "a statement"


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction that ran statements has committed; the message it was seen in is where to hold."""

    statements: tuple[Statement, ...]
    autocommit: bool
    """True: an implicit transaction (no BEGIN) committed at ReadyForQuery; False: a COMMIT."""

    @property
    def wrote(self) -> Wrote:
        labels = {s.wrote for s in self.statements}
        return next((w for w in (Wrote.YES, Wrote.UNKNOWN) if w in labels), Wrote.NO)

    @property
    def label(self) -> str:
        """What it committed, to find the same commit in another call: the labels of the statements
        that (may have) written, else of all, in order, each once (``INSERT invoices``)."""
        telling = [s for s in self.statements if s.wrote is not Wrote.NO] or list(self.statements)
        labels = [s.label or "?" for s in telling]
        return "; ".join(dict.fromkeys(labels))


@dataclass(frozen=True, slots=True)
class Run:
    """A message of the client's that makes the server run a statement (a Query, an Execute)."""

    statement: str | None
    """Its text (cut), when the proxy saw it prepared; None for a portal of a statement it did not."""

    @property
    def label(self) -> str | None:
        return None if self.statement is None else statement_label(self.statement)


@dataclass(slots=True)
class _Pending:
    """Something the client asked for whose completion the server has yet to report."""

    statement: str | None
    simple: bool = False
    """A simple Query: every CommandComplete until its ReadyForQuery belongs to it."""
    sync: bool = False
    """Ends at the next ReadyForQuery (a Query, or a Sync of the extended protocol)."""
    rollbacks: deque[bool] = field(default_factory=deque)
    """A simple Query's ROLLBACK statements in order, each whether it rolls back to a savepoint only:
    the tags of one query all report on its whole text, so the k-th ROLLBACK tag is told by these."""


def _rollbacks(sql: str) -> deque[bool]:
    """The ROLLBACK (or ABORT) statements of a query string, each whether it is to a savepoint."""
    parts = (part.strip() for part in sql.split(";"))
    return deque(
        bool(_SAVEPOINT_ROLLBACK.match(part)) for part in parts if re.match(r"(ROLLBACK|ABORT)\b", part, re.I)
    )


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
        self._work: list[Statement] = []
        """The statements of the transaction open now."""
        self._copy_in = False
        self._pending: deque[_Pending] = deque()
        self._statements: dict[str, str] = {}
        """Prepared statements by name ("" is the unnamed one): reused across calls on one connection."""
        self._portals: dict[str, str | None] = {}

    # -- the client's side: what was asked, so a commit can say what it ran
    def client(self, message: Message) -> Run | None:
        """Follow what the client asks; a message that makes the server run a statement (a simple Query,
        an Execute) is told, with the statement, as where to hold it before the server sees it."""
        kind, body = message.type, message.body
        if kind == b"Q":
            (sql,) = _cstrings(body, 1)
            statement = statement_text(sql)
            self._pending.append(_Pending(statement, simple=True, sync=True, rollbacks=_rollbacks(sql)))
            return Run(statement)
        if kind == b"P":
            name, sql = _cstrings(body, 2)
            self._statements[name] = statement_text(sql)
        elif kind == b"B":
            portal, name = _cstrings(body, 2)
            self._portals[portal] = self._statements.get(name)
        elif kind == b"E":
            (portal,) = _cstrings(body, 1)
            prepared = self._portals.get(portal)
            self._pending.append(_Pending(prepared))
            return Run(prepared)
        elif kind == b"S":
            self._pending.append(_Pending(None, sync=True))
        elif kind == b"C" and body[:1] in (b"S", b"P"):
            (name,) = _cstrings(body[1:], 1)
            (self._statements if body[:1] == b"S" else self._portals).pop(name, None)
        return None

    def _completed(self) -> str | None:
        """The statement a CommandComplete (or empty result, or suspended portal) reports on."""
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
            copy_in, self._copy_in = self._copy_in, False
            statement = self._completed()
            if tag == "ROLLBACK" and self._pending and self._pending[0].rollbacks:
                to_savepoint = self._pending[0].rollbacks.popleft()
                statement = "ROLLBACK TO SAVEPOINT" if to_savepoint else "ROLLBACK"
            return self._command(tag, statement, copy_in=copy_in and tag.startswith("COPY"))
        if kind == b"s":  # a portal suspended at its row limit: the statement ran (asyncpg's fetchval)
            self._work.append(Statement("", self._completed()))
        elif kind == b"I":  # an empty query
            self._completed()
        elif kind == b"G":  # CopyInResponse: the client sends rows, the COPY writes
            self._copy_in = True
        elif kind == b"E":
            self._copy_in = False
            if not self.in_block:
                self._work.clear()  # an implicit transaction fails whole
        elif kind == b"Z":
            self._synced()
            status = message.body[:1]
            self.in_block = status in (b"T", b"E")
            if status == b"I" and self._work:
                commit = Commit(tuple(self._work), autocommit=True)
                self._work.clear()
                return commit
        return None

    def _command(self, tag: str, statement: str | None, *, copy_in: bool) -> Commit | None:
        command = tag.split(" ", 1)[0]
        if command in ("BEGIN", "START"):
            self.in_block = True
        elif tag == "COMMIT":
            work = tuple(self._work)
            self.in_block = False
            self._work.clear()
            if work:  # a transaction that ran nothing committed nothing
                return Commit(work, autocommit=False)
        elif tag == "ROLLBACK":
            if not (statement and _SAVEPOINT_ROLLBACK.match(statement)):
                self.in_block = False
                self._work.clear()
        elif tag == "PREPARE TRANSACTION":
            self.in_block = False
            self._work.clear()  # handed to a prepared transaction, committed (if ever) by COMMIT PREPARED
        elif command not in SESSION_COMMANDS:
            self._work.append(Statement(tag, statement, copy_in=copy_in))
        return None
