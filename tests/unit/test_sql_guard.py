"""The SQL guard: an effect query is one statement that only reads, whatever its quotes and comments hold."""

from __future__ import annotations

import pytest

from harness.scenario import single_select


@pytest.mark.parametrize(
    "query",
    [
        "SELECT memo AS marker FROM t",
        "select memo as marker, count(*) as effects from t group by memo;",  # one trailing ';'
        "WITH x AS (SELECT memo FROM t) SELECT memo AS marker FROM x",
        "SELECT ';' AS marker, 'DROP TABLE t' AS note FROM t",  # inside a literal
        "SELECT memo AS marker FROM t WHERE note = 'it''s; DELETE'",
        'SELECT "delete" AS marker FROM t',  # a quoted identifier
        "SELECT memo AS marker FROM t -- ; DELETE FROM t",
        "/* ; UPDATE t */ SELECT memo AS marker FROM t",
    ],
)
def test_one_reading_statement_passes_unchanged(query: str) -> None:
    assert single_select(query) == query


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT 1; DROP TABLE t", "must be a single SELECT statement; it has more after a ';'"),
        (
            "DELETE FROM t",
            "must be a single SELECT (or WITH ... SELECT) statement that reads effects; "
            "got one starting with 'DELETE'",
        ),
        (
            "-- only a comment",
            "must be a single SELECT (or WITH ... SELECT) statement that reads effects; "
            "got one starting with 'nothing'",
        ),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "must only read; it uses DELETE"),
        ("SELECT * FROM t; ATTACH 'x' AS y", "must be a single SELECT statement; it has more after a ';'"),
        ("SELECT 1 FROM t WHERE 0 AND (create OR insert)", "must only read; it uses CREATE, INSERT"),
    ],
)
def test_anything_else_is_refused_with_why(query: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^must") as info:
        single_select(query)
    assert str(info.value) == message
