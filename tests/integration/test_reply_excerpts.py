"""The history keeps what an ok reply said: an excerpt, and whether it reads as a failure.

The notes target's ``error_as_success`` answers every fifth add with "Database error: no
such table: notes" as a success and stores nothing: the intent is lost, and only the reply
says why. Over stdio and over HTTP, as the client reads both the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import rundir
from harness.history import MESSAGE_LIMIT, EventType, Outcome, Verdict, read_history
from tests.helpers.cli import mcp_chaos
from tests.helpers.scenarios import run_scenario
from tests.helpers.third_party import UNIQUE_ROWS
from tests.integration.test_checkpoints import notes_scenario

pytestmark = pytest.mark.integration

FAILURE = "Database error: no such table: notes"
SECRET = "s3cr3t-in-a-title"


def ok_replies(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {
        e["intent"]: e
        for e in read_history(run_dir / rundir.HISTORY)
        if e["type"] == EventType.ATTEMPT_ENDED and e["outcome"] == Outcome.OK
    }


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_ok_replies_are_kept_and_failures_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("NOTES_TEST_SECRET", SECRET)
    data = notes_scenario("error_as_success", intents=20, NOTES_FAIL_EVERY="5")
    data["target"]["env"]["NOTES_SECRET"] = "${NOTES_TEST_SECRET}"  # a secret the redactor knows
    if transport == "http":
        data["target"]["transport"] = "http"
        data["target"]["env"]["NOTES_TRANSPORT"] = "http"
    # The add's reply echoes its title: a long one, with the secret in it (the marker is the body).
    data["workload"]["arguments"] = {"title": "{marker} " + SECRET + " " + "x" * 400, "body": "{marker}"}
    data["audit"]["effects"]["jsonl"]["marker_field"] = "body"
    result = run_scenario(data, tmp_path)
    replies = ok_replies(result.run_dir)
    assert sorted(replies) == list(range(20))  # one worker, no fault: one ok each
    failing = [i for i, e in sorted(replies.items()) if e.get("reads_as_failure")]
    assert failing == [4, 9, 14, 19]  # the 5th, 10th, ... add
    assert all(replies[i]["reply"].startswith(FAILURE) for i in failing)
    lost = result.intents[result.intents["verdict"] == Verdict.LOST]["intent"].tolist()
    assert lost == failing
    stored = replies[0]["reply"]
    assert stored.startswith('{"id"')
    assert "reads_as_failure" not in replies[0]
    assert SECRET not in stored
    assert "***" in stored  # redacted before it was cut
    assert len(stored) == MESSAGE_LIMIT
    assert stored.endswith("…")
    assert SECRET.encode() not in (result.run_dir / rundir.HISTORY).read_bytes()


def test_an_ok_that_says_the_call_failed_after_the_effect_was_made_fails_the_gate(tmp_path: Path) -> None:
    """Every first response is cut after the server finished: the retry, with the same key, hits the
    UNIQUE key and is answered ok with "Database error: UNIQUE constraint failed". The payment was made
    once, and the caller was told it failed: not exactly once, and a finding the gate fails on."""
    server = tmp_path / "unique_rows.py"
    server.write_text(UNIQUE_ROWS)
    data = {
        "name": "unique-rows",
        "seed": 1,
        "target": {"command": ["{python}", str(server)], "env": {"DATA": "{data_dir}"}},
        "workload": {
            "intents": 6,
            "tool": "write_query",
            "arguments": {"query": "INSERT INTO payments VALUES ('{marker}', '{key}')"},
        },
        "faults": {
            "stream": [{"fault": "sever_response", "attempt": 1, "probability": 1, "wait_for_server": True}]
        },
        "audit": {
            "effects": {
                "sql": {
                    "url": "sqlite:///{data_dir}/app.db",
                    "query": "SELECT intent AS marker, COUNT(*) AS effects FROM payments GROUP BY intent",
                }
            }
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"), "--quiet", "--no-preflight")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    headline = proc.stdout.splitlines()[0]
    assert headline.startswith("APPLIED DESPITE ERROR: 6 of 6 intents"), proc.stdout
    assert "causes: sever_response 6" in headline
    assert "gate: FAILED" in proc.stdout
    (report,) = (tmp_path / "r").glob("*/report.md")
    text = report.read_text()
    assert "- **Fix:** a retry must get the original result, not an error" in text
    assert "ok: 'Database error: UNIQUE constraint failed: payments.idem' (an ok reply that reads as" in text
