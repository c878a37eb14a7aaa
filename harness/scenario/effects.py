"""``audit``: where the auditor finds each intent's effects (exactly one source), and when the run
reads that source while it goes on (checkpoint reads)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.scenario.headers import ToolName
from harness.scenario.placeholders import AUDIT_PLACEHOLDERS, READ_TOOL_PLACEHOLDERS, check_placeholders
from harness.scenario.section import Section
from harness.scenario.sql_guard import single_select


class SqlEffects(Section):
    """Count effects with a SQL query; it must yield ``marker`` and optionally ``effects`` columns."""

    url: str
    """``sqlite:///PATH`` (read by the auditor) or ``postgresql://...`` (read at the end of the run)."""
    query: str
    """One ``SELECT`` (or ``WITH ... SELECT``) giving ``marker`` and, optionally, ``effects`` columns; the
    store is opened read-only."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        check_placeholders(v, AUDIT_PLACEHOLDERS, "audit.effects.sql.url")
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://", "{postgres_url}")):
            raise ValueError(f"unsupported database URL {v!r}; use sqlite:///PATH or postgresql://...")
        return v

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        return single_select(v)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite:///")


class SinkEffects(Section):
    """The harness serves an HTTP endpoint (``{sink_url}``) on 127.0.0.1 that the target calls as its
    downstream (a payment or mail provider); every call is one effect of the marker in its JSON body.
    For black-box images whose store the harness cannot read."""

    marker_field: str = "marker"
    """The field of each record that holds the intent's marker."""
    dedupe_by_key: bool = False
    """Answer a call whose idempotency key (``Idempotency-Key`` header, else an ``idempotency_key``
    field) was seen before as a replay, as a payment provider does: it is recorded, not counted."""


class DownstreamEffects(Section):
    """Count the calls ``services.downstream`` recorded: each call the upstream accepted (a 2xx answer
    that was not a replay, ``Idempotent-Replayed: true``) is one effect of every marker it carried, in
    its path, query or body. Markers are found by their shape, so no field needs naming."""

    methods: list[str] = Field(default_factory=lambda: ["POST", "PUT", "PATCH", "DELETE"], min_length=1)
    """Which calls are effects (a GET that looks a marker up is not)."""
    path: str | None = None
    """Only calls whose path matches this regular expression (``^/v1/charges``); default: every path."""

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        methods = [m.upper() for m in v]
        for m in methods:
            if not m.isalpha():
                raise ValueError(f"{m!r} is not an HTTP method (POST, PUT, ...)")
        return methods

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return v


class ToolEffects(Section):
    """After the run, call a read-only tool of the target for its effects per marker.

    The tool's structured result must hold ``effects``: an object marker -> count,
    or a list of ``{"marker", "effects"}`` objects.
    """

    tool: ToolName
    """A read-only tool of the target, called at the end; it returns ``{"effects": {marker: count}}``."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Its arguments (``{namespace}``: this run's marker prefix)."""

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name, value in v.items():
            if isinstance(value, str):
                check_placeholders(value, READ_TOOL_PLACEHOLDERS, f"audit.effects.tool.arguments.{name}")
        return v


class CommandEffects(Section):
    """After the run, run a command that prints the effects: one ``marker,effects`` CSV line each.

    For stores no SQL reaches (a file of the target's own format, a remote API): the
    command may use the target's placeholders, and a header line ``marker,effects`` is
    allowed. A failing command is an audit error with its stderr.
    """

    command: list[str] = Field(min_length=1)
    """The command, one word per item; it prints ``marker,effects`` CSV lines (a header line is allowed)."""
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """The command is killed after this long, and the read fails."""

    @field_validator("command")
    @classmethod
    def _placeholders(cls, v: list[str]) -> list[str]:
        for part in v:
            check_placeholders(part, AUDIT_PLACEHOLDERS | {"python"}, "audit.effects.command.command")
        return v


class JsonlEffects(Section):
    """Count records per marker in a JSON-lines file the target writes (one effect per line)."""

    path: str
    """The JSON-lines file (``{data_dir}/...``): one effect per line holding a marker."""
    marker_field: str = "marker"
    """The field of each line that holds the intent's marker."""

    @field_validator("path")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        check_placeholders(v, AUDIT_PLACEHOLDERS, "audit.effects.jsonl.path")
        return v


StoreFormat = Literal["json", "jsonl", "yaml", "csv", "lines", "text"]
"""How a ``files`` source's server reads each of its files (see :class:`FilesEffects`)."""


class FilesEffects(Section):
    """Count markers in the files of a directory the target writes (a directory store, a JSON document).

    ``marker_in: content``: every occurrence of a marker in a file is one effect (a file of a
    directory store, a record of a JSON document), and a record (an object, a CSV row, a line) that
    holds one in several of its fields is one; ``name``: every file whose name holds a marker
    is one. Markers are found by their shape, so no field needs naming.

    ``format`` is how the server reads each file: a file that does not parse so is a store the
    server cannot read again (``store_unreadable``), and none of its markers count; one that does
    is searched for markers in what it parsed to, not in leftover bytes. ``text`` (the default)
    parses nothing: every marker in the bytes counts.
    """

    dir: str
    """The directory of the store (``{data_dir}``), or of the JSON document."""
    pattern: str = Field(default="**/*", min_length=1)
    """Which files, as a glob relative to ``dir`` (``**`` enters subdirectories)."""
    marker_in: Literal["content", "name"] = "content"
    """``content``: each marker found in a file's bytes is one effect; ``name``: each file whose name
    holds one."""
    format: StoreFormat = "text"
    """``json`` (one document), ``jsonl`` (a document per line), ``yaml`` (one document), ``csv`` (rows
    of as many fields as the first), ``lines`` (UTF-8 text, no NUL byte) or ``text`` (bytes, unparsed)."""

    @field_validator("dir")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        check_placeholders(v, AUDIT_PLACEHOLDERS, "audit.effects.files.dir")
        return v

    @field_validator("pattern")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"audit.effects.files.pattern {v!r} must stay inside dir (relative, no '..')")
        return v


SOURCES = ("sql", "sink", "downstream", "tool", "command", "jsonl", "files")


class Effects(Section):
    """Where the auditor finds the effects: exactly one source."""

    sql: SqlEffects | None = None
    """A SQL query over a SQLite file or a PostgreSQL database."""
    sink: SinkEffects | None = None
    """The harness's effect sink (``{sink_url}``): each call the target makes to it is one effect."""
    downstream: DownstreamEffects | None = None
    """The calls the downstream proxy (``services.downstream``) recorded and its upstream accepted."""
    tool: ToolEffects | None = None
    """A read-only tool of the target, called once at the end."""
    command: CommandEffects | None = None
    """A command of yours, run at the end, that prints the counts."""
    jsonl: JsonlEffects | None = None
    """A JSON-lines file the target writes."""
    files: FilesEffects | None = None
    """The files of a directory store or a JSON document, counted by the markers in them."""

    @model_validator(mode="after")
    def _one_source(self) -> Effects:
        chosen = [name for name in SOURCES if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(
                f"audit.effects needs exactly one of {', '.join(SOURCES)} (got {chosen or 'none'})"
            )
        return self

    @property
    def chosen(self) -> tuple[str, Section]:
        """The one source named: its field and its section (``harness.effects.source_of`` makes it a
        source)."""
        return next((name, section) for name in SOURCES if (section := getattr(self, name)) is not None)


class CheckpointReads(Section):
    """Reads of the effect source during the run: just before each injected kill or rollout step
    (the pod still up) and once each restarted pod is ready again. They show effects that were
    stored and later vanished (a store a crash erased). ``audit.checkpoints: false`` turns them off,
    for a source whose reads are expensive; ``true`` is the default."""

    enabled: bool = True
    """``false`` (or ``checkpoints: false``): no reads during the run, for a source whose reads are
    expensive."""
    timeout_s: float = Field(default=5.0, gt=0, le=300)
    """A read that takes longer is abandoned and recorded as such; the run goes on."""

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v


class Audit(Section):
    """How the run is judged: where its effects are counted, and when they are read during the run."""

    effects: Effects
    """The effect source: exactly one of its kinds."""
    checkpoints: CheckpointReads = Field(default_factory=CheckpointReads)
    """Reads of the source during the run: before each kill or rollout step and after each restart."""
