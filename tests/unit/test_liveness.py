"""What the liveness watch names when a pod is back and answers nothing: lock files written since the
fault, and the pod's last words said once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.run.liveness import lock_files, said_once


def test_lock_like_files_written_since_the_fault_are_named(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    old = tmp_path / "old.lock"
    old.touch()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fault = time.time() - 1
    for name in (".git/index.lock", "store.db-journal", "notes.jsonl.lock", "notes.jsonl", "server.pid"):
        (tmp_path / name).touch()
    assert lock_files(tmp_path, fault) == [
        "notes.jsonl.lock",
        "server.pid",
        "store.db-journal",
        ".git/index.lock",
    ]


def test_a_log_that_says_the_same_thing_over_is_said_once() -> None:
    tail = "started\nwaiting for x.lock\nwaiting for x.lock\nwaiting for x.lock\n\n"
    assert said_once(tail) == "started\nwaiting for x.lock (x3)"
