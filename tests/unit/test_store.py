"""The effect store's early read: its result used only for the store and query the scenario names,
cancelled otherwise, and never the cause of an error the audit would not have raised."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from harness import rundir
from harness.audit import store as store_module
from harness.audit.effects import load_effects
from harness.audit.store import EarlyRead, read_early
from harness.effects.sqlite_file import open_store
from harness.errors import AuditError
from harness.scenario import Effects

GROUPED = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
SLOW = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x AS marker FROM n"
"""A query that never ends: only an interrupt stops it."""


def run_dir(tmp_path: Path, url: str = "sqlite:///{data_dir}/s.db", query: str = GROUPED) -> Path:
    """A run directory whose scenario names a SQLite store of three effects (a, b, b)."""
    (tmp_path / rundir.DATA).mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(tmp_path / rundir.DATA / "s.db") as db:
        db.execute("CREATE TABLE IF NOT EXISTS invoices (memo TEXT)")
        db.executemany("INSERT INTO invoices VALUES (?)", [("a",), ("b",), ("b",)])
    scenario = f"name: early\naudit:\n  effects:\n    sql:\n      url: {url}\n      query: {query}\n"
    (tmp_path / rundir.SCENARIO).write_text(scenario, encoding="utf-8")
    return tmp_path


def effects(query: str = GROUPED) -> Effects:
    return Effects.model_validate({"sql": {"url": "sqlite:///{data_dir}/s.db", "query": query}})


def add_effect(run: Path, memo: str) -> None:
    with sqlite3.connect(run / rundir.DATA / "s.db") as db:
        db.execute("INSERT INTO invoices VALUES (?)", (memo,))


def finished(early: EarlyRead) -> EarlyRead:
    early._thread.join()
    return early


def test_the_early_result_is_the_one_the_audit_uses(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    early = read_early(run)
    assert early is not None
    finished(early)
    add_effect(run, "c")  # after the early read: only a read of the store now sees it
    table = load_effects(effects(), run, early)
    assert list(table.lookup(["a", "b", "c"])) == [1, 2, 0]
    assert list(load_effects(effects(), run).lookup(["a", "b", "c"])) == [1, 2, 1]


def test_a_read_of_another_query_is_cancelled_and_the_store_read_again(tmp_path: Path) -> None:
    run = run_dir(tmp_path, query=SLOW)
    early = read_early(run)
    assert early is not None
    assert early.query == SLOW
    table = load_effects(effects(), run, early)  # the validated scenario's query is GROUPED
    assert list(table.lookup(["a", "b"])) == [1, 2]
    assert not early._thread.is_alive()


def test_cancel_interrupts_a_query_that_would_not_end(tmp_path: Path) -> None:
    early = EarlyRead(f"sqlite:///{run_dir(tmp_path) / rundir.DATA / 's.db'}", SLOW)
    time.sleep(0.1)  # the query is running
    started = time.monotonic()
    early.cancel()
    assert not early._thread.is_alive()
    assert time.monotonic() - started < 5
    assert early.take(early.url, early.query) is None


def test_a_failing_query_fails_as_it_does_without_the_early_read(tmp_path: Path) -> None:
    bad = "SELECT nope AS marker FROM invoices"
    run = run_dir(tmp_path, query=bad)
    early = read_early(run)
    assert early is not None
    with pytest.raises(AuditError, match="audit query failed") as with_early:
        load_effects(effects(bad), run, early)
    with pytest.raises(AuditError, match="audit query failed") as without:
        load_effects(effects(bad), run)
    assert str(with_early.value) == str(without.value)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgresql://localhost/db", "not SQLite"),
        ("sqlite:///{scenario_dir}/s.db", "a placeholder only the scenario's models resolve"),
        ("sqlite:///{data_dir}/missing.db", "no such store"),
    ],
)
def test_no_early_read_when_the_guess_cannot_be_made(tmp_path: Path, url: str, why: str) -> None:
    assert read_early(run_dir(tmp_path, url=url)) is None, why


def test_no_early_read_without_a_scenario_or_of_a_large_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_dir(tmp_path)
    monkeypatch.setattr(store_module, "BULK_BYTES", 0)  # read in parts: not the bulk read started early
    assert read_early(run) is None
    (run / rundir.SCENARIO).write_text("audit: [not, a, mapping]\n", encoding="utf-8")
    monkeypatch.undo()
    assert read_early(run) is None
    (run / rundir.SCENARIO).unlink()
    assert read_early(run) is None


def test_a_store_a_killed_writer_left_with_a_hot_journal_is_read_as_sqlite_recovers_it(
    tmp_path: Path,
) -> None:
    """A real writer SIGKILLed inside a transaction that spilled to the file: the read-only read cannot
    roll the journal back ("attempt to write a readonly database"); the audit reads a recovered copy
    (the committed effects only) and leaves the store and its journal as they were."""
    import signal
    import subprocess
    import sys

    db = tmp_path / "store.db"
    writer = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('CREATE TABLE t (marker TEXT)')\n"
        "db.execute(\"INSERT INTO t VALUES ('committed')\")\n"
        "db.execute('PRAGMA cache_size = 1')\n"  # spill: the uncommitted pages reach the file
        "db.execute('BEGIN')\n"
        "for i in range(2000):\n"
        "    db.execute('INSERT INTO t VALUES (?)', ('x' * 500,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", writer, str(db)], check=False)
    assert done.returncode == -signal.SIGKILL
    journal = tmp_path / "store.db-journal"
    assert journal.stat().st_size > 0
    before = (db.read_bytes(), journal.read_bytes())
    readonly = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        readonly.execute("SELECT count(*) FROM t").fetchone()
    readonly.close()
    _, conn = open_store(f"sqlite:///{db}")
    try:
        assert conn.execute("SELECT marker, count(*) FROM t GROUP BY marker").fetchall() == [("committed", 1)]
    finally:
        conn.close()
    assert (db.read_bytes(), journal.read_bytes()) == before
