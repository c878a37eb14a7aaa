"""The history keeps what an ok reply said: an excerpt, and whether it reads as a failure.

The notes target's ``error_as_success`` answers every fifth add with "Database error: no
such table: notes" as a success and stores nothing: the intent is lost, and only the reply
says why. Over stdio and over HTTP, as the client reads both the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import rundir
from harness.history import MESSAGE_LIMIT, EventType, Outcome, Verdict, read_history
from tests.helpers.scenarios import run_scenario
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
