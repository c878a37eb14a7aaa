"""Effect counting from a SQL store: the grouped fast path and the general path agree, and the audit's
effect table (bulk read, hash lookup) counts as they do, whatever the hash."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audit import effects as effects_module
from harness.audit import store as store_module
from harness.audit.effects import EffectTable, Hashes, load_effects
from harness.effects.registry import source_of
from harness.errors import AuditError
from harness.scenario import Effects


def store(tmp_path: Path, memos: list[str | None]) -> Path:
    (tmp_path / "data").mkdir(parents=True)
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
    assert dict(source_of(effects(query)).count(store(tmp_path, MEMOS))) == EXPECTED


def test_query_without_marker_column(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="must return a 'marker' column"):
        source_of(effects("SELECT memo FROM invoices")).count(store(tmp_path, MEMOS))


def test_failing_query_and_missing_store(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="audit query failed"):
        source_of(effects("SELECT nope AS marker FROM invoices")).count(store(tmp_path, MEMOS))
    with pytest.raises(AuditError, match="does not exist"):
        source_of(effects("SELECT 1 AS marker")).count(tmp_path / "elsewhere")


def table_for(tmp_path: Path, query: str, memos: list[str | None]) -> EffectTable:
    return load_effects(effects(query), store(tmp_path, memos))


@pytest.fixture(params=["whole", "whole, split by 2", "parts of 3", "parts of 65536"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How SQLite's result is read: concatenated at once (a small store), or in numbered parts; and
    split in pieces of how many markers."""
    kind, _, size = str(request.param).rpartition(" ")
    if kind.startswith("parts"):
        monkeypatch.setattr(store_module, "BULK_BYTES", 0)
    if size.isdigit():
        monkeypatch.setattr(effects_module, "EFFECT_BATCH", int(size))
    return str(request.param)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo",  # concatenated
        "SELECT memo AS marker FROM invoices",  # concatenated, a marker on several rows
        "SELECT COUNT(*) AS effects, memo AS marker FROM invoices GROUP BY memo;",
        "SELECT memo AS marker, NULL AS effects FROM invoices",  # no count: none (row by row)
        "SELECT memo AS marker, 1.5 AS effects FROM invoices",  # not whole: row by row
        "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo HAVING nope",  # fails
    ],
)
@pytest.mark.parametrize(
    "memos", [MEMOS, ["a", "b", "b", None, "", "c\x1fd", "c\x1fd", "é", "a,b", "a,b", "a,b"]]
)
def test_the_effect_table_counts_as_the_counter_does(
    tmp_path: Path, query: str, memos: list[str | None], reading: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if memos is MEMOS and "NULL" not in query and "1.5" not in query:  # no row needs the slow path

        def by_rows(*args: object) -> None:
            raise AssertionError("read row by row: the concatenated read failed on an ordinary result")

        monkeypatch.setattr(effects_module, "_row_pieces", by_rows)
    try:
        expected = source_of(effects(query)).count(store(tmp_path / "counted", memos))
    except AuditError:
        with pytest.raises(AuditError, match="audit query failed"):
            table_for(tmp_path, query, memos)
        return
    table = table_for(tmp_path, query, memos)
    try:
        asked = ["a", "b", "", "c\x1fd", "é", "a,b", "zzz", "c"]
        assert table.lookup(asked).tolist() == [expected.get(m, 0) for m in asked]
        assert table.total == sum(expected.values())
        strangers = sorted(m for m, n in expected.items() if n and m not in asked)
        assert table.foreign() == (sum(expected[m] for m in strangers), strangers[:5])
    finally:
        table.close()


def test_foreign_effects_are_those_no_intent_looked_up(tmp_path: Path, reading: str) -> None:
    query = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
    table = table_for(tmp_path, query, ["m1", "m2", "m2", "x9", "x1", "x1", "x1", "x5", "x2", "x3", "x4"])
    try:
        assert table.lookup(["m2", "m1", "m3"]).tolist() == [2, 1, 0]
        assert table.foreign() == (8, ["x1", "x2", "x3", "x4", "x5"])
    finally:
        table.close()


class Colliding(EffectTable):
    """Every marker's search key is its length: shared keys everywhere, which must change no count."""

    def _digests(
        self, markers: pa.Array, hashes: Hashes | None = None
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64]]:
        _, check = super()._digests(markers, hashes)
        return np.asarray(pc.utf8_length(markers).fill_null(0), dtype=np.uint32), check


def table_of(kind: type[EffectTable], counts: dict[str, int]) -> EffectTable:
    markers = pa.array(list(counts), pa.string())
    return kind([(markers, np.array(list(counts.values()), np.int64))], lambda: [markers])


@given(
    counts=st.dictionaries(
        st.text(max_size=6), st.sampled_from([0, 1, 2, 3, 254, 255, 256, 10**12, -1]), max_size=40
    ),
    asked=st.lists(st.text(max_size=6), max_size=30),
)
def test_lookups_are_exact_whatever_the_first_hash(counts: dict[str, int], asked: list[str]) -> None:
    for kind in (EffectTable, Colliding):
        table = table_of(kind, counts)
        try:
            wanted = asked + list(counts)[:3]
            assert table.lookup(wanted).tolist() == [counts.get(m, 0) for m in wanted]
            strangers = sorted(m for m, n in counts.items() if n and m not in wanted)
            assert table.foreign() == (sum(counts[m] for m in strangers), strangers[:5])
        finally:
            table.close()


@pytest.mark.parametrize("kind", [EffectTable, Colliding])
def test_a_marker_given_twice_is_added_up(kind: type[EffectTable]) -> None:
    markers = pa.array(["ab", "cd", "ab", "e", "cd", "xy", "xy", "big", "big"])
    counts = np.array([1, 2, 3, 4, 300, 200, 100, 1000, 5], np.int64)
    table = kind([(markers, counts)], lambda: [markers])
    try:
        assert table.lookup(["ab", "cd", "e", "xy", "big", "zz"]).tolist() == [4, 302, 4, 300, 1005, 0]
        assert table.total == int(counts.sum())
    finally:
        table.close()


@pytest.mark.parametrize(
    "values",
    [[1, 1, 2], [0], [-3, 10, 123456789012345678], [7] * 1000],
)
def test_counts_read_in_bulk_are_the_numbers_sqlite_wrote(
    tmp_path: Path, values: list[int], reading: str
) -> None:
    (tmp_path / "data").mkdir()
    with sqlite3.connect(tmp_path / "data" / "s.db") as db:
        db.execute("CREATE TABLE counted (marker TEXT, effects INTEGER)")
        db.executemany("INSERT INTO counted VALUES (?, ?)", [(f"m{i}", n) for i, n in enumerate(values)])
    table = load_effects(effects("SELECT marker, effects FROM counted"), tmp_path)
    try:
        assert table.lookup([f"m{i}" for i in range(len(values))]).tolist() == values
    finally:
        table.close()


@pytest.mark.parametrize(
    "text", [b"", b"1,", b",1", b"1,1.5", b"1,x", b"1,--1", b"1,-", b"1,2,3", b"1,1234567890123456789"]
)
def test_counts_that_are_not_whole_numbers_are_read_row_by_row(text: bytes) -> None:
    with pytest.raises(effects_module._NotConcatenated):
        effects_module._numbers(text, 2)


def test_a_final_read_replaces_a_link_planted_in_its_place_and_never_follows_one(tmp_path: Path) -> None:
    """A target can reach ``{run_dir}``: a link it puts where effects.json goes must not make the final
    read write a file outside the run, nor the audit read one."""
    from collections import Counter

    from harness.effects.base import read_collected, write_collected
    from harness.errors import AuditError

    run_dir, outside = tmp_path / "run", tmp_path / "precious.txt"
    run_dir.mkdir()
    outside.write_text("keep me")
    (run_dir / "effects.json").symlink_to(outside)
    with pytest.raises(AuditError, match="is not the file the run wrote"):
        read_collected(run_dir)
    write_collected(run_dir, Counter({"m": 2}), "sql", "now")
    assert outside.read_text() == "keep me"
    assert not (run_dir / "effects.json").is_symlink()
    assert read_collected(run_dir) == {"m": 2}
    assert [p.name for p in run_dir.iterdir()] == ["effects.json"]  # no temporary file left
