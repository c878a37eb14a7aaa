"""PostgreSQL's wire protocol as the commit-holding proxy reads it, on byte streams real clients sent.

``tests/corpus/pgwire/*.jsonl`` are recordings (``record.py`` beside them) of psycopg 3, as the
Python reference target uses it, and of node-postgres, as the TypeScript target does, talking to
a real PostgreSQL through a relay that read them chunk by chunk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.crashpoints.pgwire import (
    SSL_REQUEST,
    STARTUP_V3,
    Commit,
    Framer,
    Message,
    Transactions,
    statement_text,
)

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "pgwire"
RECORDINGS = ["psycopg", "node-postgres"]


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


def simple(commit: Commit) -> tuple[bool, list[str | None]]:
    return commit.autocommit, [w.statement for w in commit.writes]


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


def test_psycopg_commits_are_the_transactions_that_wrote() -> None:
    commits = replay("psycopg")
    insert = "INSERT INTO t (memo) VALUES ($1)"
    assert [(at, simple(c)) for at, c in commits] == [
        (b"C", (False, ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # with conn.transaction()
        (b"Z", (True, [insert])),  # autocommit: committed when ReadyForQuery says idle
        (b"C", (False, [insert])),  # inside a savepoint, released, then COMMIT
        (b"C", (False, ["BEGIN; INSERT INTO t (memo) VALUES ('simple'); COMMIT"])),  # one simple query
        (b"Z", (True, [insert, insert])),  # a pipeline: two Executes, one Sync, one implicit transaction
    ]
    # Not commits: the DDL, reads in autocommit, a read-only transaction, a unique violation rolled back.


def test_node_postgres_commits_are_the_transactions_that_wrote() -> None:
    commits = replay("node-postgres")
    assert [(at, simple(c)) for at, c in commits] == [
        (b"Z", (True, ["INSERT INTO t (memo) VALUES ($1)"])),  # pool.query: autocommit
        (b"C", (False, ["INSERT INTO t (memo) VALUES ($1) RETURNING id"])),  # BEGIN ... COMMIT
    ]


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
    assert simple(commit) == (False, ["INSERT INTO t VALUES (1)"])


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
