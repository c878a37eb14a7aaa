"""Effect counting from a SQL store: the grouped fast path and the general path agree."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.audit.effects import count_effects
from harness.errors import AuditError
from harness.scenario import Effects


def store(tmp_path: Path, memos: list[str | None]) -> Path:
    (tmp_path / "data").mkdir()
    with sqlite3.connect(tmp_path / "data" / "s.db") as db:
        db.execute("CREATE TABLE invoices (memo TEXT)")
        db.executemany("INSERT INTO invoices VALUES (?)", [(m,) for m in memos])
    return tmp_path


def effects(query: str) -> Effects:
    return Effects.model_validate({"sql": {"url": "sqlite:///{data_dir}/s.db", "query": query}})


MEMOS = ["a", "b", "b", None, "c", "c", "c", None]
EXPECTED = {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize(
    "query",
    [
        "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo",  # grouped: fast path
        "SELECT memo AS marker FROM invoices",  # one row per effect
        "SELECT memo AS marker, 1 AS effects FROM invoices",  # repeated markers: general path
        "SELECT COUNT(*) AS effects, memo AS marker FROM invoices GROUP BY memo",  # other column order
    ],
)
def test_every_query_shape_counts_the_same(tmp_path: Path, query: str) -> None:
    assert dict(count_effects(effects(query), store(tmp_path, MEMOS))) == EXPECTED


def test_query_without_marker_column(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="must return a 'marker' column"):
        count_effects(effects("SELECT memo FROM invoices"), store(tmp_path, MEMOS))


def test_failing_query_and_missing_store(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="audit query failed"):
        count_effects(effects("SELECT nope AS marker FROM invoices"), store(tmp_path, MEMOS))
    with pytest.raises(AuditError, match="does not exist"):
        count_effects(effects("SELECT 1 AS marker"), tmp_path / "elsewhere")
