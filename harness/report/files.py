"""An audit written into its run directory: intents.csv (and .parquet), summary.json, report.md, report.html.

Every file is written through a temporary one and renamed, so an interrupted audit leaves no half a
report. The audit itself is started by :func:`harness.auditing.audit_and_report`.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from harness import rundir
from harness.audit.accumulators import frame_of
from harness.audit.auditor import AuditResult
from harness.report.html import REPORT_HTML, render_html
from harness.report.text import render_markdown

COLUMNS = [
    "intent",
    "marker",
    "key",
    "verdict",
    "effects",
    "client_status",
    "attempts",
    "n_ok",
    "n_tool_error",
    "n_transport_error",
    "n_timeout",
    "n_protocol_error",
    "n_session_lost",
    "n_auth_error",
    "n_input_required",
    "attempts_hit_by_pod_fault",
    "faults",
    "cause",
    "vanished_after",
    "code",
    "reply",
    "first_attempt_ms",
    "last_end_ms",
]

OPTIONAL_COLUMNS = ("first_pod", "pods", "trace_id")
"""Columns only some runs have: each intent's replicas (several replicas) and its trace
(``client.trace``); runs without them leave them out."""

FEW_VALUES = frozenset({"verdict", "client_status", "faults", "cause", "vanished_after", "code", "first_pod"})
PARQUET_FROM = 100_000
"""Runs of at least this many intents also get intents.parquet: the same rows, a tenth of the size,
and read by column (pandas, DuckDB, Polars) without parsing text."""


class IntentFiles:
    """intents.csv and intents.parquet, written a judged chunk at a time while the audit judges the next.

    Each file has a thread of its own (Arrow's C++ writers let go of the GIL) and
    a temporary name until :meth:`commit` renames it into place, so an interrupted
    audit leaves no half a file. At most ``AHEAD`` chunks wait for a writer: a
    slow disk slows the judging, it does not fill memory.
    """

    AHEAD = 1

    def __init__(self, run_dir: Path) -> None:
        self.csv = run_dir / rundir.INTENTS_CSV
        self.parquet = run_dir / rundir.INTENTS_PARQUET
        self._temps = [path.with_name(f".{path.name}.tmp") for path in (self.csv, self.parquet)]
        self._pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-chaos-write") for _ in range(2)
        ]
        self._pending: deque[Future[None]] = deque()
        self._csv: pa_csv.CSVWriter | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._sinks: list[pa.NativeFile] = []
        self._schema: pa.Schema | None = None
        self.columns: list[str] = []
        self.rows = 0

    def write(self, chunk: pa.Table) -> None:
        """Queue a judged chunk (in intent order) for both files."""
        if not self.columns:
            self.columns = [*COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in chunk.column_names)]
        table = chunk.select(self.columns)
        self.rows += table.num_rows
        while len(self._pending) >= 2 * self.AHEAD:
            self._pending.popleft().result()
        self._pending.append(self._pools[0].submit(self._write_csv, table))
        self._pending.append(self._pools[1].submit(self._write_parquet, table))

    def _write_csv(self, table: pa.Table) -> None:
        if self._csv is None:
            options = pa_csv.WriteOptions(quoting_style="needed")
            self._csv = pa_csv.CSVWriter(self._sink(self._temps[0]), table.schema, write_options=options)
        self._csv.write_table(table)

    def _write_parquet(self, table: pa.Table) -> None:
        """Dictionaries for the few-valued columns only (trying one on every marker was most of the cost
        of writing a million rows); pandas' own description of the columns, so that the nullable ones
        read back as Int64."""
        if self._parquet is None:
            few = [c for c in table.column_names if c in FEW_VALUES]
            pandas = pa.Schema.from_pandas(frame_of(table.slice(0, 0))).metadata
            self._schema = table.schema.with_metadata(pandas)
            self._parquet = pq.ParquetWriter(
                self._sink(self._temps[1]), self._schema, compression="zstd", use_dictionary=few
            )
        assert self._schema is not None
        self._parquet.write_table(table.replace_schema_metadata(self._schema.metadata))

    def _sink(self, path: Path) -> pa.NativeFile:
        """A file written through a buffer: Arrow's writers write each page or piece with a call of its
        own (4,000 system calls for a million intents)."""
        sink = pa.BufferedOutputStream(pa.OSFile(str(path), "wb"), buffer_size=1 << 20)
        self._sinks.append(sink)
        return sink

    def _finish(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            for pool in self._pools:
                pool.shutdown(wait=True)
            csv, parquet, self._csv, self._parquet = self._csv, self._parquet, None, None
            sinks, self._sinks = self._sinks, []
            for writer in (csv, parquet, *sinks):
                if writer is not None:
                    writer.close()

    def commit(self) -> list[Path]:
        """Wait for the writers; put intents.csv in place, and intents.parquet for a run of at least
        ``PARQUET_FROM`` intents. Their paths."""
        try:
            self._finish()
            if not self.rows:  # no intent started: the header alone
                header = self.columns or COLUMNS
                self._temps[0].write_text(",".join(f'"{c}"' for c in header) + "\n", encoding="utf-8")
            _put_in_place(self._temps[0], self.csv)
            if self.rows < PARQUET_FROM:
                return [self.csv]
            _put_in_place(self._temps[1], self.parquet)
            return [self.csv, self.parquet]
        finally:
            self.discard()

    def discard(self) -> None:
        """Stop, and remove what was not committed."""
        with contextlib.suppress(Exception):  # the audit's own error is the one to report
            self._finish()
        for temp in self._temps:
            temp.unlink(missing_ok=True)


def _put_in_place(tmp: Path, path: Path) -> None:
    """Rename the finished ``tmp`` to ``path``, removing the file of an earlier audit first.

    On ext4 (``auto_da_alloc``, its default) a rename over an existing file
    writes the new file out to disk before it returns: 0.1 s of waiting for the
    118 MB intents.csv of a million intents, every time a run was audited again.
    Removed first, the rename is a plain one and the file is written out later,
    as any other. A reader between the two steps finds no file; it never finds
    half of one.
    """
    path.unlink(missing_ok=True)
    os.replace(tmp, path)


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file and rename it: an interrupted audit leaves no half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        _put_in_place(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_audit(audit: AuditResult, *, html: bool = True, intents: IntentFiles | None = None) -> list[Path]:
    """intents.csv, summary.json, report.md, intents.parquet for large runs, and (unless ``html`` is False)
    report.html. ``intents``: those two files as the audit wrote them while it judged; without it,
    they are written now from the judged rows."""
    run_dir = audit.run_dir
    if intents is None:
        intents = IntentFiles(run_dir)
        try:
            for batch in audit.judged.batches():
                intents.write(pa.Table.from_batches([batch]))
        except BaseException:
            intents.discard()
            raise
    written = intents.commit()
    paths = [written[0], run_dir / rundir.SUMMARY_JSON, run_dir / rundir.REPORT_MD, *written[1:]]
    summary = orjson.dumps(audit.summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
    markdown = render_markdown(audit.summary, audit.scenario.dump_yaml())
    _replace(paths[1], lambda tmp: tmp.write_bytes(summary))
    _replace(paths[2], lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    if html:
        page = render_html(audit)
        paths.append(run_dir / REPORT_HTML)
        _replace(paths[-1], lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return paths
