"""intents.csv and intents.parquet, written while the audit judges: whole, the same rows, or nothing.

Real audits of synthesised pod-kill runs (the benchmark's generator), written
through ``audit_and_report`` as ``mcp-chaos audit`` writes them, and again from
the judged rows alone (``write_audit`` without the streamed files): both ways
give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from bench import audit as bench_audit
from harness import rundir
from harness.audit import auditor
from harness.audit.auditor import audit_run
from harness.auditing import audit_and_report
from harness.errors import AuditError
from harness.history import Verdict
from harness.report import files
from harness.report.files import IntentFiles, write_audit


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    bench_audit.synthesize(tmp_path / "run", 3_000)
    return tmp_path / "run"


def test_the_files_hold_every_started_intent_once_in_order(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "PARQUET_FROM", 1_000)
    audit = audit_and_report(run_dir, html=False)
    csv = pd.read_csv(run_dir / rundir.INTENTS_CSV, keep_default_na=False)
    assert csv["intent"].tolist() == list(range(3_000))
    assert (csv["verdict"] == "duplicate").sum() == audit.summary.verdicts[Verdict.DUPLICATE] > 0
    parquet = pd.read_parquet(run_dir / rundir.INTENTS_PARQUET)
    assert parquet["first_attempt_ms"].dtype == "Int64"  # pandas' own description travels with it
    assert parquet["intent"].tolist() == csv["intent"].tolist()
    assert parquet["verdict"].tolist() == csv["verdict"].tolist()
    assert not list(run_dir.glob(".*.tmp"))


def test_streamed_and_written_afterwards_are_the_same_bytes(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "PARQUET_FROM", 1_000)
    audit_and_report(run_dir, html=False)
    streamed = (run_dir / rundir.INTENTS_CSV).read_bytes()
    streamed_parquet = pd.read_parquet(run_dir / rundir.INTENTS_PARQUET)
    write_audit(audit_run(run_dir), html=False)  # from the judged rows, after the audit
    assert (run_dir / rundir.INTENTS_CSV).read_bytes() == streamed
    pd.testing.assert_frame_equal(pd.read_parquet(run_dir / rundir.INTENTS_PARQUET), streamed_parquet)


def test_a_small_run_gets_no_parquet(run_dir: Path) -> None:
    audit = audit_and_report(run_dir, html=False)
    assert audit.summary.intents.started == 3_000
    assert (run_dir / rundir.INTENTS_CSV).is_file()
    assert not (run_dir / rundir.INTENTS_PARQUET).exists()  # under PARQUET_FROM


def test_an_audit_stopped_midway_leaves_no_file(run_dir: Path) -> None:
    intents = IntentFiles(run_dir)
    seen: list[int] = []

    def sink(chunk: pa.Table) -> None:
        intents.write(chunk)
        seen.append(chunk.num_rows)
        raise KeyboardInterrupt  # as a Ctrl-C after the first chunk

    with pytest.raises(KeyboardInterrupt):
        audit_run(run_dir, sink=sink)
    intents.discard()
    assert seen
    assert not (run_dir / rundir.INTENTS_CSV).exists()
    assert not list(run_dir.glob(".*.tmp"))


def test_no_intent_started_is_the_header_alone(tmp_path: Path) -> None:
    intents = IntentFiles(tmp_path)
    assert intents.commit() == [tmp_path / rundir.INTENTS_CSV]
    header = (tmp_path / rundir.INTENTS_CSV).read_text(encoding="utf-8").splitlines()
    assert header == [",".join(f'"{c}"' for c in files.COLUMNS)]


def test_an_audit_that_keeps_no_rows_writes_the_same_files_and_report_html(run_dir: Path) -> None:
    """``mcp-chaos audit`` keeps only report.html's columns: the same files, and no row read again."""
    kept = audit_and_report(run_dir, html=True)
    written = {name: (run_dir / name).read_bytes() for name in (rundir.INTENTS_CSV, rundir.SUMMARY_JSON)}
    plotted = kept.judged.frame(list(auditor.PLOTTED))
    lean = audit_and_report(run_dir, html=True, keep_rows=False)
    assert {name: (run_dir / name).read_bytes() for name in written} == written
    pd.testing.assert_frame_equal(lean.judged.frame(list(auditor.PLOTTED)), plotted)
    assert lean.judged.path is None
    with pytest.raises(AuditError, match="keep_rows=True"):
        _ = lean.intents
