"""What a trial call left behind: which argument's marker the server kept, in which store and field.

``init`` chooses by trying (decision 0076): in a throwaway copy of the target it
calls a candidate tool once, with a marker of its own in every free-text argument
(:func:`trial_arguments`), and then looks for those markers wherever the copy
could have written: the files of its data directory (SQLite tables, JSON-lines
records, any other file's bytes), the harness's PostgreSQL, and the home
directory the copy was given instead of the user's. The tool whose call left a
record holding a marker is the workload's; the argument that carried it gets
``{marker}``, and the field that holds it as written is the one the effect source
counts (``content`` drafted, ``body`` stored: ``body``). A call that left nothing
says so, and where a server may keep its store instead.

The search is bounded: files up to :data:`MAX_FILES`, each read up to
:data:`MAX_BYTES`, tables up to :data:`MAX_ROWS` rows.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.catalog import Leaf, is_free_text, is_identifier, leaves
from harness.effects.base import SeenStore
from harness.effects.files import file_format
from harness.init.draft import Draft, sample_arguments, value_at

MAX_FILES = 2000
MAX_BYTES = 16 << 20
MAX_ROWS = 1000
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
TRIAL_MARKER = re.compile(rb"init\d{4}-m\d{7}")


def trial_marker(n: int) -> str:
    """The ``n``-th argument's marker in a trial call (shaped as a run's are: the files source finds it)."""
    return f"init{n:04d}-m{n:07d}"


def named_values(arguments: Any) -> set[str]:
    """The call's string values that are no marker and long enough to name a file (``path-0``)."""
    if isinstance(arguments, dict):
        return {v for value in arguments.values() for v in named_values(value)}
    if isinstance(arguments, list):
        return {v for value in arguments for v in named_values(value)}
    if isinstance(arguments, str) and len(arguments) >= 4 and not TRIAL_MARKER.fullmatch(arguments.encode()):
        return {arguments}
    return set()


def trial_arguments(schema: Mapping[str, Any], draft: Draft) -> tuple[dict[str, Any], dict[str, Leaf]]:
    """The draft's arguments with a marker of its own in each free-text field (the drafted marker's, the
    other drafted ones, and the optional top-level ones), and which field each marker went in."""
    arguments = sample_arguments(draft.arguments)
    markers: dict[str, Leaf] = {}
    for leaf in leaves(schema):
        drafted = value_at(arguments, leaf.path)
        top = len(leaf.path) == 1
        if not is_free_text(leaf) or is_identifier(leaf) or (drafted is None and not top):
            continue
        if isinstance(drafted, str) and drafted.startswith("TODO"):
            continue
        marker = trial_marker(len(markers) + 1)
        if drafted is None:
            arguments[str(leaf.path[0])] = marker
        elif not _put(arguments, leaf.path, marker):
            continue
        markers[marker] = leaf
    return arguments, markers


def _put(tree: Any, path: tuple[str | int, ...], value: str) -> bool:
    node = tree
    for part in path[:-1]:
        node = (
            node.get(part) if isinstance(node, dict) else node[0] if isinstance(node, list) and node else None
        )
    last = path[-1]
    if isinstance(node, dict) and isinstance(node.get(last), str):
        node[last] = value
        return True
    if isinstance(node, list) and node and isinstance(node[0], str):
        node[0] = value
        return True
    return False


@dataclass(frozen=True, slots=True)
class Kept:
    """A marker a trial call's record holds: the argument that carried it, the store, the field."""

    argument: Leaf
    store: SeenStore
    field: str | None
    """The column or JSON field whose value is the marker as written (None: found in a file's bytes)."""
    home: str | None = None
    """Where under the copy's home directory the store is (``.config/todo/db.json``), if it is there."""


def found_in(
    markers: Mapping[str, Leaf],
    data_dir: Path,
    *,
    home: Path | None = None,
    postgres: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    named: Collection[str] = (),
) -> list[Kept]:
    """Where the markers are now: the data directory's files, then PostgreSQL's rows, then the home
    directory's files; the most telling first (a field that holds one as written). ``named``: the
    call's other values (``path-0``): a file or a directory they name is one of many, one per
    intent, and the directory above it is the store."""
    kept = [*_files(markers, data_dir, "{data_dir}", None, named)]
    for table, rows in (postgres or {}).items():
        for column in _columns(markers, rows):
            kept.append(
                Kept(markers[column[1]], SeenStore("sql", "{postgres_url}", {table: [column[0]]}), column[0])
            )
    if home is not None:
        kept += _files(markers, home, "{data_dir}/home", home, named)
    return sorted(kept, key=lambda k: k.field is None)


def _files(
    markers: Mapping[str, Leaf], root: Path, shown: str, home: Path | None, named: Collection[str]
) -> Iterator[Kept]:
    if not root.is_dir():
        return
    for count, path in enumerate(sorted(p for p in root.rglob("*") if p.is_file())):
        if count >= MAX_FILES:
            return
        relative = path.relative_to(root).as_posix()
        where = f"{shown}/{relative}"
        under = relative if home is not None else None
        if relative.startswith((".npm/", ".cache/")):
            continue  # a package manager's, not the server's
        if path.name.endswith(SQLITE_SIDE_FILES):
            continue  # read through the database they belong to
        with contextlib.suppress(OSError):
            with open(path, "rb") as f:
                head = f.read(MAX_BYTES)
            if head.startswith(SQLITE_HEADER):
                yield from _sqlite(markers, path, where, under)
                continue
            present = {m.decode() for m in TRIAL_MARKER.findall(head)} & set(markers)
            if not present:
                continue
            if path.suffix == ".jsonl":
                fields = list(_jsonl_fields(head, present))
                for field, marker in fields:
                    yield Kept(markers[marker], SeenStore("jsonl", where), field, under)
                if fields:
                    continue
            leaf = markers[sorted(present)[0]]
            parts = relative.split("/")
            per_call = next((i for i, part in enumerate(parts) if any(v in part for v in named)), None)
            if per_call is None and any(value in relative for value in named):  # a value with a slash
                per_call = len(parts) - 1
            if per_call is not None:  # a file (or a directory) per call: the directory above it is the store
                store = "/".join(parts[:per_call])
                folder = f"{shown}/{store}" if store else shown
                inside = None if under is None else store or "."
                # Its files hold what each call wrote, not a store the server parses: read as bytes.
                yield Kept(leaf, SeenStore("dir", folder), None, inside)
                continue
            kind = "json" if path.suffix == ".json" else "file"
            yield Kept(leaf, SeenStore(kind, where, format=file_format(path)), None, under)


def _jsonl_fields(data: bytes, present: set[str]) -> Iterator[tuple[str, str]]:
    """(field, marker) for each top-level field of a JSON-lines record that is a marker as written."""
    for line in data.splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            record = orjson.loads(line)
            if isinstance(record, dict):
                yield from _columns_of(record, present)


def _sqlite(markers: Mapping[str, Leaf], path: Path, where: str, home: str | None) -> Iterator[Kept]:
    """The columns of a SQLite file's tables whose value is a marker as written."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in names:
                cur = db.execute(f'SELECT * FROM "{table}" LIMIT {MAX_ROWS}')
                columns = [d[0] for d in cur.description or ()]
                rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
                for column, marker in _columns(markers, rows):
                    store = SeenStore("sql", f"sqlite:///{where}", {table: columns})
                    yield Kept(markers[marker], store, column, home)
    except sqlite3.Error:
        return


def _columns(markers: Mapping[str, Leaf], rows: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """(column, marker) for each column that holds a marker as its whole value, once."""
    seen: set[str] = set()
    for row in rows:
        for column, value in _columns_of(row, markers):
            if column not in seen:
                seen.add(column)
                yield column, value


def _columns_of(row: Mapping[str, Any], markers: Mapping[str, Any] | set[str]) -> Iterator[tuple[str, str]]:
    for column, value in row.items():
        if isinstance(value, str) and value in markers:
            yield column, value


def best(kept: Sequence[Kept], drafted: Leaf | None) -> Kept | None:
    """The record to draft from: where the drafted marker's field landed, if it did; else the first."""
    for found in kept:
        if drafted is not None and found.argument == drafted:
            return found
    return kept[0] if kept else None


OUTSIDE = re.compile(r"^(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|redis|sqlite)://", re.IGNORECASE)
STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3", ".json", ".jsonl", ".txt", ".csv")


def store_outside(values: Sequence[str]) -> str | None:
    """A value of the command line or environment that names a store outside ``{data_dir}`` (a
    database URL, an absolute path to a data file or a directory): where a trial call would leave a
    record in the user's own store. None: init may try."""
    for value in values:
        text = value.partition("=")[2] if value.startswith("-") and "=" in value else value
        if "{data_dir}" in text or "{postgres_url}" in text:
            continue
        if OUTSIDE.match(text):
            return value
        if text.startswith("/") and (text.lower().endswith(STORE_SUFFIXES) or Path(text).is_dir()):
            return value
    return None
