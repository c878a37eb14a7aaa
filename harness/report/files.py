"""Write an audit into its run directory: intents.csv, summary.json, report.md."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from harness import rundir
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

CSV_CHUNK_ROWS = 100_000


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Arrow's CSV writer, fed in chunks so the copy it makes stays small."""
    options = pa_csv.WriteOptions(quoting_style="needed")
    first = pa.RecordBatch.from_pandas(frame.iloc[:CSV_CHUNK_ROWS], preserve_index=False)
    with pa_csv.CSVWriter(str(path), first.schema, write_options=options) as writer:
        writer.write_batch(first)
        for start in range(CSV_CHUNK_ROWS, len(frame), CSV_CHUNK_ROWS):
            chunk = frame.iloc[start : start + CSV_CHUNK_ROWS]
            writer.write_batch(pa.RecordBatch.from_pandas(chunk, schema=first.schema, preserve_index=False))


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file and rename it: an interrupted audit leaves no half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_audit(audit: AuditResult, *, html: bool = True) -> list[Path]:
    """intents.csv, summary.json, report.md, and (unless ``html`` is False) report.html."""
    run_dir = audit.run_dir
    paths = [run_dir / rundir.INTENTS_CSV, run_dir / rundir.SUMMARY_JSON, run_dir / rundir.REPORT_MD]
    summary = orjson.dumps(audit.summary.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
    markdown = render_markdown(audit.summary, audit.scenario.dump_yaml())
    columns = [*COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in audit.intents.columns)]
    _replace(paths[0], lambda tmp: _write_csv(audit.intents[columns], tmp))
    _replace(paths[1], lambda tmp: tmp.write_bytes(summary))
    _replace(paths[2], lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    if html:
        page = render_html(audit)
        paths.append(run_dir / REPORT_HTML)
        _replace(paths[3], lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return paths
