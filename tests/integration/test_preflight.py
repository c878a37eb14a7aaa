"""Preflight: one real call against the real reference target, and its effect counted exactly once.

Each scenario below is valid, and each is wrong about the target in a way that a
full run would only show as 2,700 lost intents; the preflight must say so in
one line within seconds.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import mcp_chaos
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario
from tests.helpers.third_party import BACKED_UP, CHINESE, LEDGER

pytestmark = pytest.mark.integration


def validate_preflight(
    tmp_path: Path, data: dict[str, Any]
) -> tuple[subprocess.CompletedProcess[str], float]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    proc = mcp_chaos("validate", "--preflight", str(path), "--results", str(tmp_path / "r"))
    return proc, time.monotonic() - started


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mcp-chaos: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def with_query(query: str) -> dict[str, Any]:
    data = invoice_scenario(intents=100)
    data["audit"]["effects"]["sql"]["query"] = query
    return data


def test_a_scenario_that_fits_passes_and_keeps_its_evidence(tmp_path: Path) -> None:
    proc, took = validate_preflight(tmp_path, invoice_scenario(intents=100))
    assert proc.returncode == 0, proc.stderr
    passed = "preflight: 2 calls of create_invoice, 1 effect under each marker (audit.effects.sql)"
    assert passed in proc.stderr
    (kept,) = (tmp_path / "r").iterdir()
    assert kept.name.endswith(".preflight")
    assert (kept / "report.md").is_file()
    assert took < 30


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            with_query(
                "SELECT customer_id AS marker, COUNT(*) AS effects FROM invoices GROUP BY customer_id"
            ),
            "found 0 effects for the preflight marker",
        ),
        (
            with_query("SELECT memo AS marker FROM no_such_table"),
            "; but audit.effects.sql failed: audit query failed",
        ),
        (
            with_query("SELECT memo AS marker FROM invoices UNION ALL SELECT memo FROM invoices"),
            "call 1 of 2 of create_invoice made 2 effects under marker",
        ),
    ],
    ids=["wrong-column", "query-fails", "counts-twice"],
)
def test_a_query_that_does_not_count_one_effect_per_call(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    proc, took = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    assert message in error_line(proc)
    assert took < 30


def backed_up(tmp_path: Path, title: str) -> dict[str, Any]:
    server = tmp_path / "backed_up.py"
    server.write_text(BACKED_UP)
    return {
        "name": "backed-up",
        "target": {"command": ["{python}", str(server)], "transport": "stdio", "env": {"DATA": "{data_dir}"}},
        "workload": {"intents": 20, "tool": "add_note", "arguments": {"title": title}},
        "audit": {"effects": {"files": {"dir": "{data_dir}", "pattern": "*", "marker_in": "content"}}},
    }


def test_a_source_that_counts_a_copy_only_once_the_store_holds_more_than_one(tmp_path: Path) -> None:
    """The store keeps its version before each write beside it (notes.json.bak): the first call's
    effect is counted once, and twice from the second call on. One call would have passed."""
    proc, _ = validate_preflight(tmp_path, backed_up(tmp_path, "{marker}"))
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "call 1 of 2 of add_note made 2 effects under marker" in line
    assert "a log or a journal beside the store" in line


def test_calls_that_overwrite_each_other(tmp_path: Path) -> None:
    """A workload whose calls write the same record: the second call's effect replaced the first's."""
    data = backed_up(tmp_path, "{marker}")
    data["audit"]["effects"]["files"]["pattern"] = "notes.json"
    server = Path(data["target"]["command"][1])
    server.write_text(BACKED_UP.replace("notes.append(", "notes = [];notes.append("))
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "found 0 effects for the preflight marker" in line
    assert "(call 1 of 2)" in line
    assert "it counted the other call's effect but not this one's" in line


def test_a_marker_in_an_argument_the_store_does_not_keep(tmp_path: Path) -> None:
    data = invoice_scenario(intents=100)
    data["workload"]["arguments"].update(customer_id="{marker}", memo="fixed memo")
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "found 0 effects for the preflight marker" in line
    assert "it counted effects only under other markers (1, e.g. 'fixed memo')" in line
    # The reply is quoted, and it reads as a success: the effect source is the more likely culprit.
    assert "create_invoice answered OK: '{" in line
    assert "invoice_id" in line
    assert "the reply reads as a success, so the effect source is more likely wrong" in line


def test_a_tool_that_rejects_the_arguments(tmp_path: Path) -> None:
    data = invoice_scenario(intents=100)
    data["workload"]["arguments"]["amount_cents"] = "a lot"
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "preflight: the call of create_invoice did not succeed: tool_error" in line
    assert "check workload.tool and workload.arguments" in line


def test_a_server_that_dies_on_the_second_call_is_named_not_the_arguments(tmp_path: Path) -> None:
    data = invoice_scenario(intents=100, env={"INVOICES_FAILPOINT": "after_business_commit@2"})
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "did not succeed (call 2 of 2, after the first succeeded): transport_error" in line
    assert "the server did not answer the call: look at its log in" in line
    assert "check workload.tool" not in line


def test_a_call_refused_for_headers_the_listing_did_not_give_blames_the_listing(tmp_path: Path) -> None:
    """The tool marks an argument x-mcp-header, and is listed past the pages a run reads: its call goes
    without the Mcp-Param header and is refused. The arguments were right; the listing is to check."""
    server = tmp_path / "ledger.py"
    server.write_text(LEDGER)
    data = {
        "name": "ledger",
        "target": {
            "command": ["{python}", str(server)],
            "env": {"LEDGER_FILE": "{data_dir}/ledger.jsonl", "LEDGER_FILLER": "41"},
        },
        "workload": {
            "intents": 20,
            "tool": "record_entry",
            "arguments": {"region": "eu-{index}", "memo": "{marker}", "idempotency_key": "{key}"},
        },
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/ledger.jsonl", "marker_field": "memo"}}},
    }
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "Mcp-Param-Region header is missing" in line
    assert "check that tools/list answers and lists record_entry" in line
    assert "check workload.tool and workload.arguments" not in line


def test_a_server_that_needs_a_token(tmp_path: Path) -> None:
    proc, took = validate_preflight(
        tmp_path, invoice_scenario(intents=100, env={"INVOICES_BEARER_TOKEN": "t0k"})
    )
    assert proc.returncode == 3, proc.stderr
    assert "target.headers" in error_line(proc)
    assert took < 30


def test_a_run_starts_with_its_preflight_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(invoice_scenario(intents=5)))
    argv = ["run", str(path), "--results", str(tmp_path / "r"), "--quiet"]
    first = mcp_chaos(*argv, "--run-id", "with")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "r" / "with" / "with.preflight" / "history.jsonl").is_file()
    assert "exactly_once |       5 |" in first.stdout  # the preflight's effect is not the run's
    second = mcp_chaos(*argv, "--run-id", "without", "--no-preflight")
    assert second.returncode == 0, second.stderr
    assert not (tmp_path / "r" / "without" / "without.preflight").exists()
    assert "preflight" not in second.stderr


def test_a_success_that_reads_as_a_failure_is_quoted_and_the_server_blamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes target answers "Database error: no such table: notes (<its file>)" as a success and
    stores nothing: the preflight quotes the reply, with the secret path in it redacted, and says the
    server is the more likely culprit, not the effect source."""
    secret = tmp_path / "s3cr3t-notes.jsonl"
    monkeypatch.setenv("NOTES_SECRET_FILE", str(secret))
    data = {
        "name": "notes",
        "seed": 1,
        "target": {
            "command": ["{python}", str(ROOT / "targets" / "notes" / "server.py")],
            "transport": "stdio",
            "env": {
                "NOTES_FILE": "${NOTES_SECRET_FILE}",
                "NOTES_FLAW": "error_as_success",
                "NOTES_FAIL_EVERY": "1",
            },
        },
        "workload": {"intents": 10, "tool": "add_note", "arguments": {"title": "{marker}", "body": "b"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "title"}}},
    }
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "preflight: add_note answered OK: 'Database error: no such table: notes (***)'" in line
    assert "the reply reads as a failure, so the server most likely stored nothing" in line
    assert "check the query" not in line
    assert str(secret) not in proc.stderr


def test_calls_that_changed_nothing_in_the_store_blame_the_tool_whatever_its_reply_says(
    tmp_path: Path,
) -> None:
    """A server that answers a failure as a success in Chinese ("错误：数据库暂时不可用", isError false)
    and stores nothing: no word the harness reads says it failed, but nothing in {data_dir} changed
    during the calls, so the tool is named first (it was "the reply reads as a success, so the effect
    source is more likely wrong")."""
    server = tmp_path / "zh.py"
    server.write_text(CHINESE)
    data = {
        "name": "zh",
        "seed": 1,
        "target": {"command": ["{python}", str(server)], "env": {"NOTES_FILE": "{data_dir}/notes.jsonl"}},
        "workload": {"intents": 10, "tool": "add_note", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "text"}}},
    }
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "preflight: add_note answered OK: '错误：数据库暂时不可用，笔记未保存'" in line, line
    assert "nothing in {data_dir} changed during the calls, so add_note is the first suspect" in line, line
    assert "under $HOME or a config directory" in line
    assert "the effect source is more likely wrong" not in line


def test_calls_that_changed_the_store_still_point_at_the_effect_source(tmp_path: Path) -> None:
    data = invoice_scenario(intents=10)
    data["audit"]["effects"]["sql"]["query"] = "SELECT 'x' || memo AS marker, 1 AS effects FROM invoices"
    proc, _ = validate_preflight(tmp_path, data)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "the reply reads as a success, so the effect source is more likely wrong" in line, line
    assert "changed during the calls" not in line
