"""The fix for a pod that answers nothing after a fault, chosen from what its log and data directory show
(a port in use, a parse error, a migration, a lock file), saying which; never a stale lock's fix for a
server whose log is a parse error."""

from __future__ import annotations

import pytest

from harness.audit.fixes import unavailable_fix
from harness.history import log_end

TRACEBACK = log_end(
    "--- pod-0: start #2 ---\nTraceback (most recent call last):\n"
    '  File "/srv/tasks.py", line 11, in <module>\n    tasks = json.load(f)["tasks"]\n'
    '  File "/usr/lib/python3.11/json/decoder.py", line 340, in decode\n'
    '    raise JSONDecodeError("Extra data", s, end)\n'
    "json.decoder.JSONDecodeError: Extra data: line 1 column 952 (char 951)\n"
)
"""A pod log's last lines as the history keeps them: one line, its end kept."""


@pytest.mark.parametrize(
    ("log", "locks", "shows", "fix"),
    [
        (TRACEBACK, [], 'its log shows a parse error: "…', "its store did not parse after the fault"),
        (
            "Error: listen EADDRINUSE: address already in use 127.0.0.1:8080",
            ["app.lock"],  # the log says what stopped it: the port, not the lock
            'its log shows a port in use: "Error: listen EADDRINUSE',
            "could not listen",
        ),
        (
            "applying migration 0007_add_index ... killed\nrefusing to start: dirty database",
            [],
            'its log shows a migration: "applying migration 0007_add_index',
            "stopped on its schema migration",
        ),
        (
            "items: waiting for notes.jsonl.lock (x5)",
            ["notes.jsonl.lock"],
            'its log shows a lock file: "items: waiting for notes.jsonl.lock (x5)"',
            "remove stale locks at start-up",
        ),
        (
            "fatal: Unable to create '/data/.git/index.lock': File exists.",
            [],
            "its log shows a lock file",
            "remove stale locks at start-up",
        ),
        (
            "serving on :8080",
            [".git/index.lock"],
            "its data directory shows a lock file: .git/index.lock",
            "stale",
        ),
    ],
)
def test_the_fix_is_chosen_from_the_evidence_and_says_which(
    log: str, locks: list[str], shows: str, fix: str
) -> None:
    said = unavailable_fix(log, locks)
    assert said.startswith(f"({shows}"), said
    assert fix in said.split("): ", 1)[1]


def test_the_last_error_of_a_traceback_is_quoted() -> None:
    said = unavailable_fix(TRACEBACK)
    quoted = said.removeprefix('(its log shows a parse error: "').split('"): ')[0]
    assert quoted.endswith("json.decoder.JSONDecodeError: Extra data: line 1 column 952 (char 951)")
    assert "remove stale locks" not in said


def test_a_store_that_does_not_parse_is_evidence_from_the_data_directory() -> None:
    said = unavailable_fix("serving on :8080", [], ["data/tasks.json"])
    assert said.startswith("(its data directory shows a parse error: data/tasks.json does not parse): ")


def test_no_evidence_says_so_and_blames_nothing_it_did_not_see() -> None:
    said = unavailable_fix("serving on :8080\nrequest received")
    assert said.startswith("(neither its log nor its data directory shows why")
    assert "stale locks" not in said
