"""``faults.kill.power_loss`` in an ordinary run: kills at seeded moments, each followed by the pod's data
directory rolled back to what it had fsynced, as a node failure leaves a pod's volume.

``targets/notes`` saves its JSON-lines file by a temporary file and a rename, with or without the
fsyncs that make it durable. A kill alone loses nothing of either; a power loss loses every note the
unsynced one acknowledged since it started, and nothing of the durable one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.history import FaultKind, Verdict
from tests.helpers.paths import ROOT
from tests.helpers.scenarios import fault_row, run_scenario

pytestmark = pytest.mark.integration

NOTES = ROOT / "targets" / "notes" / "server.py"


def notes_under_power_losses(save: str, *, power_loss: bool = True) -> dict[str, Any]:
    return {
        "name": "notes-power-loss",
        "seed": 7,
        "target": {
            "command": ["{python}", str(NOTES)],
            "env": {"NOTES_TRANSPORT": "http", "NOTES_FILE": "{data_dir}/notes.jsonl", "NOTES_SAVE": save},
            "ready_timeout_s": 30,
            "restart_delay_s": 0.05,
        },
        "workload": {
            "intents": 40,
            "concurrency": 2,
            "tool": "write_note",
            "arguments": {"name": "{marker}", "content": "note {index}"},
        },
        "client": {
            "attempt_timeout_s": 10,
            "max_attempts": 100,
            "backoff": {"initial_s": 0.02, "max_s": 0.2},
        },
        "faults": {"kill": {"count": 1, "window": [0.45, 0.55], "power_loss": power_loss}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "name"}}},
    }


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run_dir / "history.jsonl").read_bytes().splitlines()
    return [e for e in map(orjson.loads, lines) if e["type"] == kind]


def test_a_power_loss_loses_what_a_rename_without_fsync_acknowledged(tmp_path: Path) -> None:
    result = run_scenario(notes_under_power_losses("rename"), tmp_path / "results")
    summary = result.summary
    assert fault_row(summary, FaultKind.KILL).injected == 1
    (kill,) = events(result.run_dir, "fault")
    assert kill["power_loss"] is True
    (rollback,) = events(result.run_dir, "data_rolled_back")
    assert rollback["changed"]  # the notes file was not durable: it is rolled back
    # Every note acknowledged before the power loss (about half the run) is gone with it.
    assert summary.verdicts[Verdict.LOST] >= 10, summary.verdicts
    assert summary.verdicts[Verdict.DUPLICATE] == 0


def test_the_same_kill_loses_nothing_when_the_save_is_durable_or_no_power_is_lost(tmp_path: Path) -> None:
    durable = run_scenario(notes_under_power_losses("durable"), tmp_path / "durable")
    assert durable.summary.verdicts[Verdict.EXACTLY_ONCE] == 40, durable.summary.verdicts
    assert len(events(durable.run_dir, "data_rolled_back")) == 1
    killed = run_scenario(notes_under_power_losses("rename", power_loss=False), tmp_path / "killed")
    assert killed.summary.verdicts[Verdict.EXACTLY_ONCE] == 40, killed.summary.verdicts
    assert events(killed.run_dir, "data_rolled_back") == []
    assert not any(e["service"] == "file_tracer" for e in events(killed.run_dir, "service_started"))


LAYOUT = """
d="$1"; shift
if [ ! -d "$d/v1" ]; then  # a fresh store: its version, the link to it, a FIFO and a socket, made durable
  mkdir "$d/v1" && ln -s v1 "$d/current" && mkfifo "$d/pipe" &&
  (cd "$d" && "$1" -c 'import socket; socket.socket(socket.AF_UNIX).bind("ctl.sock")') &&
  sync "$d" || exit 1
fi
exec "$@"
"""


def test_a_store_behind_a_link_beside_a_fifo_and_a_socket_loses_nothing_durable(tmp_path: Path) -> None:
    """The rollback keeps a link, a FIFO and a socket as entries and never opens them: a FIFO used to
    block it (the run failed after 30 s), a socket to fail it, and a link to be deleted, so that the
    notes saved durably behind it read as lost."""
    layout = tmp_path / "layout.sh"
    layout.write_text(LAYOUT)
    data = notes_under_power_losses("durable")
    data["target"]["command"] = ["sh", str(layout), "{data_dir}", "{python}", str(NOTES)]
    data["target"]["env"]["NOTES_FILE"] = "{data_dir}/current/notes.jsonl"
    data["audit"]["effects"]["jsonl"]["path"] = "{data_dir}/current/notes.jsonl"
    result = run_scenario(data, tmp_path / "results")
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 40, result.summary.verdicts
    (rollback,) = events(result.run_dir, "data_rolled_back")
    assert not {"current", "pipe", "ctl.sock"} & set(rollback["changed"])
    store = result.run_dir / "data"
    assert os.readlink(store / "current") == "v1"
    assert stat.S_ISFIFO((store / "pipe").lstat().st_mode)
    assert stat.S_ISSOCK((store / "ctl.sock").lstat().st_mode)
