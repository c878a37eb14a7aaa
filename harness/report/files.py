"""Write an audit into its run directory: intents.csv, summary.json, report.md."""

from __future__ import annotations

from pathlib import Path

import orjson

from harness.audit.auditor import AuditResult
from harness.report.summary import render_markdown

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
    "attempts_hit_by_pod_death",
    "faults",
    "cause",
    "first_attempt_s",
    "last_end_s",
]


def write_audit(audit: AuditResult) -> list[Path]:
    run_dir = audit.run_dir
    paths = [run_dir / "intents.csv", run_dir / "summary.json", run_dir / "report.md"]
    # Times are already rounded to microseconds in the history; no float_format (it costs 25%).
    audit.intents[COLUMNS].to_csv(paths[0], index=False)
    paths[1].write_bytes(orjson.dumps(audit.summary, option=orjson.OPT_INDENT_2) + b"\n")
    paths[2].write_text(render_markdown(audit.summary, audit.scenario.dump_yaml()), encoding="utf-8")
    return paths
