"""Write an audit into its run directory: intents.csv (and intents.parquet), summary.json, report.md."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


def _write_csv(audit: AuditResult, columns: list[str], path: Path) -> None:
    """intents.csv, streamed from the audit's judged rows a chunk at a time (Arrow's C++ writer)."""
    options = pa_csv.WriteOptions(quoting_style="needed")
    writer: pa_csv.CSVWriter | None = None
    try:
        for batch in audit.judged.batches(columns):
            if writer is None:
                writer = pa_csv.CSVWriter(str(path), batch.schema, write_options=options)
            writer.write_batch(batch)
        if writer is None:  # no intent started: the header alone
            path.write_text(",".join(f'"{c}"' for c in columns) + "\n", encoding="utf-8")
    finally:
        if writer is not None:
            writer.close()


def _write_parquet(audit: AuditResult, columns: list[str], path: Path) -> None:
    """intents.parquet, streamed likewise; dictionaries for the few-valued columns only (trying one
    on every marker was most of the cost of writing a million rows)."""
    writer: pq.ParquetWriter | None = None
    try:
        for batch in audit.judged.batches(columns):
            if writer is None:
                few = [c for c in batch.schema.names if c in FEW_VALUES]
                # pandas' own description of the columns: read back, the nullable ones are Int64 again.
                empty = pa.Table.from_batches([batch.slice(0, 0)])
                schema = batch.schema.with_metadata(pa.Schema.from_pandas(frame_of(empty)).metadata)
                writer = pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=few)
            writer.write_table(pa.Table.from_batches([batch]).replace_schema_metadata(schema.metadata))
    finally:
        if writer is not None:
            writer.close()


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file and rename it: an interrupted audit leaves no half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_audit(audit: AuditResult, *, html: bool = True) -> list[Path]:
    """intents.csv, summary.json, report.md, intents.parquet for large runs, and (unless ``html`` is False)
    report.html."""
    run_dir = audit.run_dir
    paths = [run_dir / rundir.INTENTS_CSV, run_dir / rundir.SUMMARY_JSON, run_dir / rundir.REPORT_MD]
    summary = orjson.dumps(audit.summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
    markdown = render_markdown(audit.summary, audit.scenario.dump_yaml())
    columns = [*COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in audit.judged.columns)]
    if audit.summary.intents.started >= PARQUET_FROM:
        # Both writers are C++ that let go of the GIL: the Parquet file is written beside the CSV.
        parquet = run_dir / rundir.INTENTS_PARQUET
        with ThreadPoolExecutor(max_workers=1) as pool:
            beside = pool.submit(_replace, parquet, lambda tmp: _write_parquet(audit, columns, tmp))
            _replace(paths[0], lambda tmp: _write_csv(audit, columns, tmp))
            beside.result()
        paths.append(parquet)
    else:
        _replace(paths[0], lambda tmp: _write_csv(audit, columns, tmp))
    _replace(paths[1], lambda tmp: tmp.write_bytes(summary))
    _replace(paths[2], lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    if html:
        page = render_html(audit)
        paths.append(run_dir / REPORT_HTML)
        _replace(paths[-1], lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return paths
