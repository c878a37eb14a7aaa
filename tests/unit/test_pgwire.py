"""PostgreSQL's wire protocol as the commit-holding proxy reads it, on byte streams real clients sent.

``tests/corpus/pgwire/*.jsonl`` are recordings (``record.py`` beside them) of psycopg 3 (sync, as
the Python reference target uses it, and async), asyncpg, SQLAlchemy and node-postgres (as the
TypeScript target uses it), talking to a real PostgreSQL through a relay that read them chunk by
chunk. Every transaction that ran a statement and committed is a commit, labelled with whether it
wrote; what it wrote is found by what PostgreSQL answered and what the client sent, never only by
a tag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.crashpoints.pgwire import (
    SSL_REQUEST,
    STARTUP_V3,
    Commit,
    Framer,
    Message,
    Transactions,
    Wrote,
    statement_label,
    statement_text,
)
from tests.helpers.quick import examples

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "pgwire"
RECORDINGS = ["psycopg", "psycopg-writes", "psycopg-async", "asyncpg", "sqlalchemy", "node-postgres"]


def chunks(name: str) -> list[tuple[str, bytes]]:
    lines = (CORPUS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [(c["from"], bytes.fromhex(c["hex"])) for c in map(json.loads, lines)]


def stream(name: str, side: str) -> bytes:
    return b"".join(data for who, data in chunks(name) if who == side)


def frame(data: bytes, size: int, *, startup: bool) -> list[Message]:
    framer = Framer(startup=startup)
    messages = []
    for at in range(0, len(data), size):
        messages += framer.feed(data[at : at + size])
    assert framer.rest() == b""
    return messages


def replay(name: str) -> list[tuple[bytes, Commit]]:
    """Both directions in the order the relay read them: each commit, with the message it is at."""
    client, server, transactions = Framer(startup=True), Framer(), Transactions()
    commits = []
    for side, data in chunks(name):
        if side == "client":
            for message in client.feed(data):
                transactions.client(message)
        else:
            for message in server.feed(data):
                commit = transactions.server(message)
                if commit is not None:
                    commits.append((message.type, commit))
    return commits


def simple(commit: Commit) -> tuple[bool, str, list[str | None]]:
    return commit.autocommit, commit.wrote.value, [s.text for s in commit.statements]


@pytest.mark.parametrize("name", RECORDINGS)
@pytest.mark.parametrize("side", ["client", "server"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, 1 << 20])
def test_any_chunking_gives_the_same_messages(name: str, side: str, size: int) -> None:
    data = stream(name, side)
    whole = frame(data, len(data), startup=side == "client")
    assert b"".join(m.raw for m in whole) == data
    assert frame(data, size, startup=side == "client") == whole


def test_the_start_up_is_untyped_until_the_startup_message() -> None:
    first, second, third = frame(stream("psycopg", "client"), 1 << 20, startup=True)[:3]
    assert (first.type, first.code) == (b"", SSL_REQUEST)  # libpq's sslmode=prefer asks first
    assert (second.type, second.code) == (b"", STARTUP_V3)
    assert third.type == b"Q"
    node = frame(stream("node-postgres", "client"), 1 << 20, startup=True)
    assert node[0].code == STARTUP_V3  # node-postgres does not ask for SSL unless told to


CREATE = "CREATE TABLE IF NOT EXISTS t (id BIGSERIAL PRIMARY KEY, memo TEXT UNIQUE)"
INSERT = "INSERT INTO t (memo) VALUES ($1)"


def test_psycopg_commits_every_transaction_that_ran_a_statement() -> None:
    assert [(at, simple(c)) for at, c in replay("psycopg")] == [
        (b"Z", (True, "yes", [CREATE])),  # DDL in autocommit
        (b"Z", (True, "no", ["SELECT memo FROM t WHERE memo = $1"])),  # a read in autocommit: a point too
        (b"C", (False, "yes", ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # with conn.transaction()
        (b"Z", (True, "yes", [INSERT])),  # autocommit: committed when ReadyForQuery says idle
        (b"C", (False, "no", ["SELECT count(*) FROM t"])),  # a read-only transaction's COMMIT
        (b"C", (False, "yes", [INSERT])),  # inside a savepoint, released, then COMMIT
        (b"C", (False, "yes", ["BEGIN; INSERT INTO t (memo) VALUES ('simple'); COMMIT"])),  # one simple query
        (b"Z", (True, "yes", [INSERT, INSERT])),  # a pipeline: two Executes, one Sync, one transaction
    ]
    # Not commits: a unique violation rolled back.


def test_node_postgres_commits() -> None:
    assert [(at, simple(c)) for at, c in replay("node-postgres")] == [
        (b"Z", (True, "yes", [CREATE])),
        (b"Z", (True, "yes", [INSERT])),  # pool.query: autocommit
        (b"C", (False, "yes", ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # BEGIN ... COMMIT
        (b"C", (False, "no", ["SELECT memo FROM t WHERE memo = $1"])),
    ]


def test_asyncpg_commits_at_the_sync_after_a_suspended_portal() -> None:
    """fetchval of INSERT ... RETURNING: Execute with a row limit, answered PortalSuspended (no tag),
    committed at Sync: the commit a tag-only proxy never saw."""
    commits = replay("asyncpg")
    assert [(at, simple(c)) for at, c in commits] == [
        (b"Z", (True, "yes", [CREATE])),
        (b"Z", (True, "yes", ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # fetchval
        (b"Z", (True, "no", ["SELECT memo FROM t WHERE memo = $1"])),  # fetchrow
        (b"Z", (True, "yes", [INSERT])),  # execute with arguments
        (b"Z", (True, "yes", [INSERT, INSERT])),  # executemany: one Sync
        (
            b"C",
            (
                False,
                "yes",
                [
                    "INSERT INTO t (memo) VALUES ($1) RETURNING id",
                    "UPDATE t SET memo = memo || '' WHERE memo = $1",
                ],
            ),
        ),  # a transaction
        (b"Z", (True, "yes", ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # the prepared one reused
        (b"Z", (True, "yes", ['COPY "t"("memo") FROM STDIN (FORMAT binary)'])),  # copy_records_to_table
    ]
    fetchval = commits[1][1].statements[0]
    assert fetchval.tag == ""  # no CommandComplete: the portal was suspended at its row limit
    assert commits[5][1].label == "INSERT t; UPDATE t"


def test_psycopg_async_and_sqlalchemy_commit_their_transactions() -> None:
    assert [simple(c) for _, c in replay("psycopg-async")] == [
        (False, "yes", [CREATE]),
        (
            False,
            "yes",
            ["SELECT memo FROM t WHERE memo = $1", "INSERT INTO t (memo) VALUES ($1) RETURNING id"],
        ),
        (False, "no", ["SELECT count(*) FROM t"]),
    ]
    assert [simple(c) for _, c in replay("sqlalchemy")] == [
        (False, "yes", [CREATE]),
        (False, "yes", [INSERT]),  # engine.begin()
        (False, "yes", ["INSERT INTO t (memo) VALUES ($1) RETURNING id"]),  # conn.commit()
    ]  # the connection that only read rolled back: no commit


def test_writes_no_tag_tells_are_commits_labelled_by_their_text() -> None:
    commits = [c for _, c in replay("psycopg-writes")]
    assert [(c.wrote, c.label) for c in commits] == [
        (Wrote.YES, "CREATE t"),
        (Wrote.YES, "CREATE add_t"),
        (Wrote.UNKNOWN, "CALL add_t"),  # SELECT add_t($1): the function wrote, the tag says SELECT 1
        (Wrote.YES, "INSERT t"),  # a data-modifying WITH: tag SELECT 1
        (Wrote.YES, "COPY t"),  # COPY FROM STDIN: the client sent the rows
        (Wrote.NO, "SELECT t"),  # COPY TO STDOUT reads
    ]  # DISCARD ALL changes no data: no commit


@pytest.mark.parametrize(
    ("sql", "label"),
    [
        ("INSERT INTO invoices (memo) VALUES ($1) RETURNING id", "INSERT invoices"),
        ('UPDATE public."Invoices" SET memo = $1 WHERE id = $2', "UPDATE public.invoices"),
        ("DELETE FROM ONLY t WHERE id = 1", "DELETE t"),
        ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DO NOTHING", "MERGE t"),
        ("WITH x AS (INSERT INTO t VALUES (1) RETURNING id) SELECT id FROM x", "INSERT t"),
        ("SELECT * FROM t WHERE id = $1 FOR UPDATE", "SELECT t"),
        ("SELECT nextval('invoices_id_seq')", "CALL nextval"),
        ("SELECT 1", "SELECT"),
        ('INSERT INTO "a|b`c" VALUES (1)', "INSERT a_b_c"),  # no markup from a quoted name
    ],
)
def test_a_statement_is_labelled_by_what_it_changes_or_reads(sql: str, label: str | None) -> None:
    assert statement_label(sql) == label


def message(kind: bytes, body: bytes) -> Message:
    raw = kind + (4 + len(body)).to_bytes(4, "big") + body
    return Message(kind, body, raw)


def query(sql: str) -> Message:
    return message(b"Q", sql.encode() + b"\x00")


def tag(text: str) -> Message:
    return message(b"C", text.encode() + b"\x00")


def ready(status: bytes) -> Message:
    return message(b"Z", status)


ERROR = message(b"E", b"SERROR\x00C23505\x00\x00")


def test_an_implicit_transaction_that_fails_commits_nothing() -> None:
    tx = Transactions()
    tx.client(query("INSERT INTO t VALUES (1); INSERT INTO t VALUES (1)"))
    assert [tx.server(m) for m in (tag("INSERT 0 1"), ERROR, ready(b"I"))] == [None, None, None]


def test_a_rollback_to_a_savepoint_keeps_the_block_and_its_writes() -> None:
    tx = Transactions()
    for sql, reply in [
        ("BEGIN", "BEGIN"),
        ("INSERT INTO t VALUES (1)", "INSERT 0 1"),
        ("SAVEPOINT s", "SAVEPOINT"),
        ("ROLLBACK TO SAVEPOINT s", "ROLLBACK"),
    ]:
        tx.client(query(sql))
        assert tx.server(tag(reply)) is None
        assert tx.server(ready(b"T")) is None
    tx.client(query("COMMIT"))
    commit = tx.server(tag("COMMIT"))
    assert commit is not None
    assert simple(commit) == (False, "yes", ["INSERT INTO t VALUES (1)"])


def test_a_transaction_of_session_commands_only_is_no_commit() -> None:
    tx = Transactions()
    tx.client(query("SET application_name = 'x'; RESET ALL; DISCARD ALL"))
    replies = (tag("SET"), tag("RESET"), tag("DISCARD ALL"), ready(b"I"))
    assert [tx.server(m) for m in replies] == [None] * 4
    tx.client(query("BEGIN"))
    assert [tx.server(m) for m in (tag("BEGIN"), ready(b"T"))] == [None, None]
    tx.client(query("COMMIT"))
    assert tx.server(tag("COMMIT")) is None  # a block that ran nothing committed nothing


def test_a_commit_of_a_failed_block_is_a_rollback() -> None:
    tx = Transactions()
    for reply in (tag("BEGIN"), ready(b"T"), tag("UPDATE 1"), ready(b"T"), ERROR, ready(b"E")):
        assert tx.server(reply) is None
    assert tx.server(tag("ROLLBACK")) is None  # what COMMIT answers in a failed block
    assert tx.server(ready(b"I")) is None


def test_a_length_no_postgres_sends_breaks_the_stream_and_its_bytes_are_kept() -> None:
    framer = Framer()
    good = ready(b"I").raw
    bad = b"Z\x00\x00\x00\x02rest"
    assert framer.feed(good + bad) == [Message(b"Z", b"I", good)]
    assert framer.broken
    assert framer.feed(b"more") == []
    assert framer.spill() == bad
    assert Framer(startup=True).feed(b"\x00\x00\x00\x04") == []  # shorter than a start-up packet


def test_statements_are_one_line_and_cut() -> None:
    assert statement_text("INSERT INTO t\n   VALUES (1)") == "INSERT INTO t VALUES (1)"
    long = statement_text("SELECT " + "x, " * 100)
    assert len(long) == 160
    assert long.endswith("…")


def test_the_rollbacks_of_one_simple_query_are_told_apart() -> None:
    """Every tag of a simple query reports on its whole text: which ROLLBACK ends the block and which
    only returns to a savepoint is read from the query's statements, in order."""
    tx = Transactions()
    for sql, replies in [
        ("BEGIN; INSERT INTO t VALUES (1); SAVEPOINT a", ("BEGIN", "INSERT 0 1", "SAVEPOINT")),
        ("SELECT 1; ROLLBACK TO SAVEPOINT a", ("SELECT 1", "ROLLBACK")),
    ]:
        tx.client(query(sql))
        assert [tx.server(tag(r)) for r in replies] == [None] * len(replies)
        assert tx.server(ready(b"T")) is None
    tx.client(query("COMMIT"))
    commit = tx.server(tag("COMMIT"))
    assert commit is not None  # the INSERT survived the savepoint's rollback: a commit, a point
    statements = ["BEGIN; INSERT INTO t VALUES (1); SAVEPOINT a", "SELECT 1; ROLLBACK TO SAVEPOINT a"]
    assert simple(commit) == (False, "yes", statements)
    tx.client(query("BEGIN; INSERT INTO t VALUES (2); SAVEPOINT b; ROLLBACK TO SAVEPOINT b; ROLLBACK"))
    replies = ("BEGIN", "INSERT 0 1", "SAVEPOINT", "ROLLBACK", "ROLLBACK")
    assert [tx.server(tag(r)) for r in replies] == [None] * 5
    assert tx.server(ready(b"I")) is None  # rolled back whole: no commit


MESSAGE_TYPES = b"QPBESCDHFdcfXZ" + b"CZsIGEDTnt123"


@settings(max_examples=examples(400))
@given(
    st.lists(
        st.tuples(
            st.sampled_from([bytes([b]) for b in MESSAGE_TYPES]), st.binary(max_size=40), st.booleans()
        ),
        max_size=30,
    )
)
def test_following_any_frames_never_raises(frames: list[tuple[bytes, bytes, bool]]) -> None:
    """A Parse or Bind without its NUL raised ValueError inside the proxy (a traceback from asyncio's
    client_connected_cb); PostgreSQL answers a malformed frame itself, so following one must not raise."""
    transactions = Transactions()
    for kind, body, from_client in frames:
        raw = kind + (4 + len(body)).to_bytes(4, "big") + body
        (message,) = Framer().feed(raw)
        if from_client:
            transactions.client(message)
        else:
            commit = transactions.server(message)
            assert commit is None or commit.statements


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_the_framer_splits_any_bytes_as_it_does_whole(data: bytes, cut: int) -> None:
    whole, pieces = Framer(startup=True), Framer(startup=True)
    at_once = whole.feed(data)
    in_pieces = [m for i in range(0, len(data), cut) for m in pieces.feed(data[i : i + cut])]
    if whole.broken or pieces.broken:
        return  # a stream it cannot read is relayed untouched
    assert [m.raw for m in in_pieces] == [m.raw for m in at_once]
    assert whole.rest() == pieces.rest()
