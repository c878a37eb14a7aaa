"""``audit.effects.files``: the markers in the files of a directory the target writes (a directory of
records, a JSON document, a plain-text list), found by their shape, so no field needs naming.

Each file is read in the ``format`` its server reads it in. A file that does not
parse so (a JSON document rewritten in place and killed before its truncate: a
whole document, then the tail of an older, longer one) is a store the server
cannot read again: it is reported (:class:`~harness.effects.base.Unreadable`,
with its parse error) and none of its markers count, so the leftover bytes of an
older version never read as second effects. ``text`` keeps the byte count.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from harness.effects.base import Drafted, EffectSource, Reading, SeenStore, Unreadable, place
from harness.errors import AuditError, StoreNotMade
from harness.history import excerpt
from harness.scenario import FilesEffects
from harness.workload import MARKER_SHAPE

TEXT_MARKER = re.compile(MARKER_SHAPE.pattern.decode())
"""A marker's shape in parsed text (the same pattern as in bytes)."""
ERROR_CHARS = 160
"""Of a parse error, what a finding quotes."""


class FilesSource(EffectSource, field="files"):
    """Each marker in a file is one effect (``marker_in: content``), or each file whose name holds one
    (``name``); a file that does not parse in ``format`` counts none, and is reported."""

    section: FilesEffects

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        read = self.reading(run_dir)
        if torn is not None:  # a checkpoint read: what it did not see may be in a file being rewritten
            torn += [1] * len(read.unreadable)
        return read.counts

    def reading(self, run_dir: Path) -> Reading:
        directory = Path(place(self.section.dir, run_dir, "audit.effects"))
        section = self.section
        return read_files(directory, section.pattern, section.marker_in, section.format, run_dir)

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        """A JSON document (its records counted by the markers in it), another file a trial call's marker
        was found in, read in the format its name or content shows, then a directory of files (in the
        format they share, if one)."""
        for kind, what, rank in (("json", "its records in the JSON file", 2), ("file", "the file", 3)):
            if (document := next((s for s in stores if s.kind == kind), None)) is not None:
                directory, _, name = document.where.rpartition("/")
                fmt = document.format or ("json" if kind == "json" else "text")
                section = {
                    "files": {"dir": directory, "pattern": name, "marker_in": "content", "format": fmt}
                }
                yield Drafted(section, None, f"the server keeps {what} {document.where} ({fmt})", rank=rank)
        if (folder := next((s for s in stores if s.kind == "dir"), None)) is not None:
            fmt = folder.format or "text"
            section = {
                "files": {"dir": folder.where, "pattern": "**/*", "marker_in": "content", "format": fmt}
            }
            yield Drafted(section, None, f"the server writes files into the directory {folder.where}", rank=4)


VERSION_CONTROL = frozenset({".git", ".hg", ".svn"})
"""Directories of a version-control system's own records, which the files source passes over unless
its pattern names them: they keep copies of what the store holds (a git repository logs every
commit's message in ``.git/logs`` and the last in ``COMMIT_EDITMSG``), so a pattern such as ``**/*``
counted every commit two or three times, and the audit blamed the server for duplicates it never
made. A repository's commits are counted by a ``command`` source (``git log``)."""


def count_files(directory: Path, pattern: str, marker_in: str, fmt: str = "text") -> Counter[str]:
    """Markers in the files of a directory that parse in ``fmt`` (see :func:`read_files`)."""
    return read_files(directory, pattern, marker_in, fmt).counts


def read_files(
    directory: Path, pattern: str, marker_in: str, fmt: str, run_dir: Path | None = None
) -> Reading:
    """Markers in the files of a directory: each occurrence in what a file parses to (``content``), or
    each file whose name holds one (``name``); a file that does not parse in ``fmt`` counts none and
    is returned unreadable (named relative to ``run_dir``), and a version-control directory's records
    are not the store's."""
    where = f"audit.effects.files.dir {directory}"
    if not directory.is_dir():
        raise StoreNotMade(f"{where} is not a directory (the target never made it, or another path)")
    named = VERSION_CONTROL & set(Path(pattern).parts)
    counts: Counter[str] = Counter()
    unreadable: list[Unreadable] = []
    for path in sorted(directory.glob(pattern)):
        if not path.is_file() or (VERSION_CONTROL - named) & set(path.relative_to(directory).parts):
            continue
        found: Iterable[str] = ()
        if marker_in == "content" or fmt != "text":
            try:
                data = path.read_bytes()
                changed = path.stat().st_mtime
            except OSError as exc:
                raise AuditError(f"cannot read {path} ({where}): {exc.strerror or exc}") from None
            try:
                found = markers_in(data, fmt)
            except NotParsed as exc:
                held = Counter(m.decode() for m in MARKER_SHAPE.findall(data))
                unreadable.append(Unreadable(_shown(path, run_dir), fmt, exc.args[0], held, changed))
                continue
        if marker_in == "name":
            found = (m.decode() for m in MARKER_SHAPE.findall(path.name.encode()))
        counts.update(found)
    return Reading(counts, tuple(unreadable))


def _shown(path: Path, run_dir: Path | None) -> str:
    if run_dir is not None and path.is_relative_to(run_dir):
        return str(path.relative_to(run_dir))
    return str(path)


SUFFIXES = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".csv": "csv",
    ".txt": "lines",
    ".md": "lines",
    ".list": "lines",
}
"""The format a file's name suggests, taken when its content parses so."""
GUESSED = ("json", "jsonl", "lines")
"""What a file's content is tried as when its name suggests nothing (or the wrong thing)."""


def guess_format(name: str, data: bytes) -> str:
    """The format a server likely reads a file in (``init``'s draft): its name's, where its content parses
    so, else the first of ``GUESSED`` that parses it, else ``text``."""
    named = SUFFIXES.get(Path(name).suffix.lower())
    if not data:
        return named or "text"
    for fmt in ([named] if named else []) + [f for f in GUESSED if f != named]:
        try:
            markers_in(data, fmt)
        except NotParsed:
            continue
        return fmt
    return "text"


def shared_format(formats: Iterable[str]) -> str:
    """The format every file of a directory reads in (``text`` where they differ, or none was seen)."""
    found = set(formats)
    return found.pop() if len(found) == 1 else "text"


GUESS_BYTES = 1 << 20
"""Of a file, what is read to guess its format (``init``); a larger one is guessed by its name alone."""
GUESS_FILES = 50
"""Of a directory, the files whose formats init compares (the first it finds, at any depth)."""


def file_format(path: Path) -> str:
    """The format its server likely reads a file in, from its name and (up to ``GUESS_BYTES``) content."""
    try:
        with open(path, "rb") as f:
            data = f.read(GUESS_BYTES + 1)
    except OSError:
        return "text"
    if len(data) > GUESS_BYTES:
        return SUFFIXES.get(path.suffix.lower(), "text")
    return guess_format(path.name, data)


def directory_format(directory: Path) -> str:
    """The format the files of a directory share (``text`` where they differ), its version-control
    records passed over as the files source passes them."""
    files = (
        p
        for p in directory.rglob("*")
        if p.is_file() and not VERSION_CONTROL & set(p.relative_to(directory).parts)
    )
    return shared_format(file_format(p) for p in itertools.islice(files, GUESS_FILES))


class NotParsed(Exception):
    """A file does not parse in its format; its one argument says where and why, in one line."""


def markers_in(data: bytes, fmt: str) -> list[str]:
    """The markers in a file's bytes as its server reads them in ``fmt``; NotParsed when it cannot.

    A file of no bytes holds nothing in any format: it is what a truncate leaves, and a
    server reads it as empty (the records it lost are judged lost, not unreadable).
    """
    if fmt == "text":
        return [m.decode() for m in MARKER_SHAPE.findall(data)]
    if not data:
        return []
    if fmt == "json":
        return list(_strings_markers(_json(data)))
    if fmt == "jsonl":
        return _jsonl_markers(data)
    text = _utf8(data)
    if fmt == "yaml":
        return list(_strings_markers(_yaml(text)))
    if fmt == "csv":
        return _csv_markers(text)
    if fmt == "lines":
        if (nul := text.find("\0")) >= 0:
            line = text.count("\n", 0, nul) + 1
            raise NotParsed(f"a NUL byte on line {line} (char {nul}): not a text file, or one a crash cut")
        return [m for line in text.splitlines() for m in _once(TEXT_MARKER.findall(line))]  # a line: a record
    raise AssertionError(f"no reader for the format {fmt!r}")


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotParsed(f"not UTF-8: {exc.reason} at byte {exc.start}") from None


def _json(data: bytes) -> Any:
    """One JSON document, as orjson reads it, or Python's ``json`` (which takes NaN and Infinity too); the
    error is ``json``'s, the words a Python server logs (``Extra data: line 40 column 1 (char 3390)``)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise NotParsed(excerpt(str(exc), ERROR_CHARS)) from None
    except UnicodeDecodeError as exc:
        raise NotParsed(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise NotParsed("nested too deeply to parse") from None


def _jsonl_markers(data: bytes) -> list[str]:
    found: list[str] = []
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            try:
                found += _strings_markers(_json(line))
            except NotParsed as exc:
                raise NotParsed(f"line {number}: {exc.args[0]}") from None
    return found


def _yaml(text: str) -> Any:
    """One YAML document, by the safe loader (C's where built); the error in one line."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader, as a server reading its store would use
    except yaml.YAMLError as exc:
        raise NotParsed(excerpt(" ".join(str(exc).split()), ERROR_CHARS)) from None
    except RecursionError:
        raise NotParsed("nested too deeply to parse") from None


def _csv_markers(text: str) -> list[str]:
    """Markers in the fields of CSV rows; a row of more or fewer fields than the first (a header, as most
    readers take it) does not parse, nor does a quote left open."""
    found: list[str] = []
    width: int | None = None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            if not row:
                continue
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise NotParsed(f"row {reader.line_num} has {len(row)} fields, the first row {width}")
            found += _once(m for field in row for m in TEXT_MARKER.findall(field))  # a row is one record
    except csv.Error as exc:
        raise NotParsed(f"line {reader.line_num}: {exc}") from None
    return found


def _strings_markers(value: Any) -> Iterator[str]:
    """The markers in every string of a parsed document (keys too), each container walked once: an alias
    of a YAML document names one record, and is not counted again where it is repeated. An object is
    one record: a marker in several of its own strings counts once (a task manager that copies the
    request's text into a second field, ``originalRequest`` and ``splitDetails``, stored one request,
    and the preflight called it two effects); its nested objects and lists are records of their own."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield from TEXT_MARKER.findall(item)
        elif isinstance(item, dict | list | tuple | set):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict):
                own = [s for s in (*item.keys(), *item.values()) if isinstance(s, str)]
                yield from _once(m for s in own for m in TEXT_MARKER.findall(s))
                stack += (v for v in item.values() if not isinstance(v, str))
            else:
                stack += item


def _once(markers: Iterable[str]) -> list[str]:
    """Each marker of one record once, in the order first found."""
    return list(dict.fromkeys(markers))
