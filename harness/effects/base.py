"""What every effect source is: the protocol, the live I/O it is given, and what all of them share.

An effect source is where the auditor finds the side effects of each intent,
counted by marker. Some can be read any time after the run from files in the run
directory (a SQLite store, a JSON-lines file, a directory, the effect sink's
record); others need a live service (PostgreSQL, a read tool of the target, a
command that asks an API), so the run reads them once at its end (the *final
read*, into ``effects.json``) and the auditor reads that file. Both kinds are also
read during the run (checkpoint reads) and by contract checks, and ``init``
drafts a source from the stores it saw a server write.

A source never opens a socket or starts a process itself: a live read is handed
a :class:`LiveIO` (the run's wiring gives one, :mod:`harness.run.final_read`), so
this package stays offline like the auditor that imports it.
"""

from __future__ import annotations

import abc
import contextlib
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from harness import rundir
from harness.errors import AuditError
from harness.history import excerpt
from harness.scenario import AUDIT_PLACEHOLDERS
from harness.template import render_text


class LiveIO(Protocol):
    """The network and process I/O a live source's read needs, given by whoever reads it (a run's
    wiring): the source renders its arguments and reads the answer, the I/O only carries them."""

    @property
    def namespace(self) -> str:
        """The run's namespace (a read tool's ``{namespace}``)."""
        ...

    @property
    def postgres_url(self) -> str | None:
        """The harness's PostgreSQL, where the scenario has one (``{postgres_url}``)."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The structured content of a tool's answer; AuditError when the call did not succeed."""
        ...

    async def query(self, url: str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A read-only query's column names and rows; AuditError when it fails."""
        ...

    async def run(self, argv: list[str], timeout_s: float) -> tuple[int, bytes, bytes]:
        """A command's exit code, standard output and standard error; AuditError when it cannot be
        started, TimeoutError when it ran longer than ``timeout_s`` (it is then killed)."""
        ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at an effect source: effects per marker, and whether it was caught mid-write."""

    counts: Counter[str]
    torn: bool = False
    """Lines of a JSON-lines store did not parse: a rewrite in progress (its absences prove nothing)."""


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A file of the store that does not parse in the format its server reads it in: the server cannot
    read its store again, so none of its markers count, and those it held are the effects it lost."""

    path: str
    """The file, relative to the run directory where it is inside it."""
    format: str
    error: str
    """The parse error, in one line (``Extra data: line 40 column 1 (char 3390)``)."""
    held: Counter[str]
    """The markers in its bytes: the effects it held, now lost."""
    changed: float | None = None
    """When it was last written (Unix seconds): the write the fault that tore it cut short, or after."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What an audit reads of a source: effects per marker, and the store's files that do not parse."""

    counts: Counter[str]
    unreadable: tuple[Unreadable, ...] = ()


@dataclass(frozen=True, slots=True)
class SeenStore:
    """A store ``init`` saw the server write, as a scenario names it."""

    kind: str
    """``sql`` (a SQLite file or PostgreSQL), ``jsonl``, ``json`` (one document), ``file`` (another file a
    trial call's marker was found in: YAML, CSV, a text list), ``dir`` (a directory) or ``api`` (an HTTP
    API whose base URL the server is given)."""
    where: str
    """``sqlite:///{data_dir}/x.db``, ``{postgres_url}``, ``{data_dir}/x.jsonl``, ``{data_dir}``, an API's
    ``https://host``."""
    tables: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Of a SQL store: its tables and their columns."""
    format: str | None = None
    """Of a file, or the files of a directory: how its server reads it, as a ``files`` source's
    ``format`` says (``json``, ``yaml``, ``csv``, ``lines``, ``text``); None where no file was seen."""


@dataclass(frozen=True, slots=True)
class Drafted:
    """An ``audit.effects`` section drafted from a store, what the user must still do, and why."""

    section: dict[str, Any]
    todo: str | None
    why: str
    rank: int = 0
    """Lower is more specific: ``init`` takes the draft of lowest rank among all sources'."""


class EffectSource(abc.ABC):
    """One kind of effect source (the scenario's ``audit.effects`` section, exactly one of them).

    Subclasses are registered in :mod:`harness.effects` and must pass the conformance kit
    (``tests/integration/test_source_conformance.py``).
    """

    kind: ClassVar[str]
    """Its name in messages and tests: ``sqlite``, ``postgres``, ``sink``, ``jsonl``, ``files``, ``tool``,
    ``command``."""
    field: ClassVar[str]
    """The field of ``audit.effects`` that configures it (``sql`` for both SQL stores)."""
    live: ClassVar[bool] = False
    """Read once at the end of a run (the final read, into ``effects.json``): it needs a live service."""

    def __init_subclass__(
        cls, *, field: str | None = None, kind: str | None = None, live: bool | None = None, **more: Any
    ) -> None:
        """``class ToolSource(EffectSource, field="tool", live=True)``: its section's field, its name
        (the field's, unless given) and whether it is read live."""
        super().__init_subclass__(**more)
        if field is not None:
            cls.field = field
        if kind is not None or field is not None:
            cls.kind = kind or cls.field
        if live is not None:
            cls.live = live

    section: Any
    """Its section of ``audit.effects`` (each kind names its own type)."""

    def __init__(self, section: Any) -> None:
        self.section = section

    def describe(self) -> str:
        """What was read, for ``effects.json`` and messages."""
        return self.field

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        """Effects per marker, read from the run directory: the store itself, or for a live source the
        final read it left (``effects.json``). ``torn`` collects the numbers of lines of a JSON-lines
        store that did not parse. AuditError, in one line, when it cannot be read."""
        return read_collected(run_dir)

    def reading(self, run_dir: Path) -> Reading:
        """What an audit reads: :meth:`count`, and the files of the store that do not parse as its server
        reads them (only a source that parses files, ``files``, has any)."""
        return Reading(self.count(run_dir))

    async def read_live(self, run_dir: Path, io: LiveIO) -> Counter[str]:
        """Effects per marker of a live source now, through ``io``; AuditError when it cannot be read."""
        raise NotImplementedError(f"{self.kind} is read from files, not live")

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        """Sections ``init`` could draft for this kind of source from the stores it saw (none by default:
        a sink, a read tool and a command are the user's to choose)."""
        return ()


class RecordSource(EffectSource):
    """A source read from the record a service of the run wrote into its directory (the effect sink's,
    the downstream proxy's), never followed through a link the target may have planted there."""

    record: ClassVar[str]
    """The record's name in the run directory."""
    writer: ClassVar[str]
    """Who writes it, for messages: ``effect sink``."""
    missing: ClassVar[str]
    """Why it may be missing, for the message that says so."""

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        path = run_record(
            run_dir,
            self.record,
            not_ours=f"is not the record the {self.writer} wrote (a link, a FIFO or a directory is there)",
            missing=f"no {self.writer} record at {run_dir / self.record} ({self.missing})",
        )
        return self.tally(path)

    @abc.abstractmethod
    def tally(self, path: Path) -> Counter[str]:
        """Effects per marker in the record at ``path``."""


def place(text: str, run_dir: Path, where: str, postgres_url: str | None = None) -> str:
    """A source's path or URL with its placeholders filled in for ``run_dir`` (``{scenario_dir}`` was
    resolved when the scenario was loaded; ``{postgres_url}`` is known to a live read only)."""
    values = {
        "data_dir": run_dir / rundir.DATA,
        "run_dir": run_dir,
        "scenario_dir": "{scenario_dir}",
        "postgres_url": postgres_url or "{postgres_url}",
    }
    return render_text(text, values, AUDIT_PLACEHOLDERS, where)


def count_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]], source: str) -> Counter[str]:
    """Effects per marker from a query's rows: a ``marker`` column, and ``effects`` (else 1 per row)."""
    columns = [c.lower() for c in columns]
    if "marker" not in columns:
        raise AuditError(
            f"the effects query on {source} must return a 'marker' column (and optionally 'effects'); "
            f"it returned {columns}"
        )
    mi = columns.index("marker")
    counts: Counter[str] = Counter()
    if "effects" in columns:
        ei = columns.index("effects")
        for row in rows:
            if row[mi] is not None:
                counts[str(row[mi])] += 0 if row[ei] is None else int(row[ei])  # NULL: no effect
    else:
        counts.update(str(row[mi]) for row in rows if row[mi] is not None)
    return counts


def run_record(run_dir: Path, name: str, *, not_ours: str, missing: str) -> Path:
    """A record the run wrote into its directory, checked before it is read: a link or anything but a
    regular file there is refused by name (``{path} not_ours``), never followed (a target can reach
    ``{run_dir}``); AuditError ``missing`` when there is none."""
    path = run_dir / name
    if os.path.lexists(path) and not rundir.own_regular_file(path, run_dir):
        raise AuditError(f"{path} {not_ours}")
    if not path.is_file():
        raise AuditError(missing)
    return path


def read_collected(run_dir: Path) -> Counter[str]:
    """The final read a live source left in the run directory (``effects.json``)."""
    path = run_record(
        run_dir,
        rundir.COLLECTED,
        not_ours="is not the file the run wrote (a link, a FIFO or a directory is there): its final read "
        "of effects cannot be trusted; restore it from a copy of the run directory",
        missing=f"no {rundir.COLLECTED} in {run_dir}: this source is read once at the end of a run, and "
        "this run ended before that final read (its history can still be read; its effects cannot)",
    )
    try:
        counts = orjson.loads(path.read_bytes())["effects"]
        effects = Counter({str(k): int(v) for k, v in counts.items()})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AuditError(
            f"{path} is damaged ({type(exc).__name__}: {excerpt(str(exc), 120)}): it holds the final read "
            "of effects, which cannot be taken again; restore it from a copy of the run directory"
        ) from None
    if any(v < 0 for v in effects.values()):
        raise AuditError(f"{path} is damaged: it holds a negative count of effects")
    return effects


def write_collected(run_dir: Path, counts: Counter[str], source: str, collected_at: str) -> None:
    """Record a final read in the run directory, where :func:`read_collected` finds it: written to a new
    file of the run's, then renamed over the name, so a link a target planted there (it can reach
    ``{run_dir}``) is replaced, never followed to a file outside the run."""
    record = {"source": source, "collected_at": collected_at, "effects": dict(counts)}
    fd, tmp = tempfile.mkstemp(prefix=".effects-", dir=run_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(record))
        os.chmod(tmp, 0o644)  # as every other file of the run (mkstemp makes it 0600)
        os.replace(tmp, run_dir / rundir.COLLECTED)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def whole_count(value: Any) -> int:
    """A count of effects as a live source gives it; ValueError for anything but a whole number >= 0."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{excerpt(repr(value), 60)} is not a count of effects (a whole number >= 0)")
    return value
