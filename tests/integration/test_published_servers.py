"""What `init`, the preflight and `contract` say about servers the harness did not write.

The official filesystem server (a directory store; `write_file(path, content)`, a keyless, naturally
idempotent write) and the official memory server (a JSON-lines file it makes at its first write;
`create_entities`, keyless, deduplicating by name), pinned in `tests/servers/` (`make servers`).
Drafted by `init` with no hand edit, each must pass its preflight, and `contract` must judge it by
what it is: no key checks where no key travels, every check finished.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.paths import FILESYSTEM_SERVER, MEMORY_SERVER

pytestmark = pytest.mark.integration

FILESYSTEM = FILESYSTEM_SERVER
MEMORY = MEMORY_SERVER


@pytest.fixture(scope="module")
def node_servers(published_servers: str) -> str:
    """Node.js with the pinned servers installed (the conftest fixture installs them on first use)."""
    return published_servers


def mcp_chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=cwd,
    )


def drafted(tmp_path: Path, command: str, *more: str) -> tuple[dict[str, Any], str, str]:
    """`init` over stdio, then `validate --preflight` on what it wrote, untouched: the scenario, its
    text and init's stderr."""
    made = mcp_chaos(
        "init", "--command", command, "--transport", "stdio", *more, "-o", "s.yaml", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "s.yaml").read_text()
    assert "TODO" not in text
    assert "$PORT" not in text
    checked = mcp_chaos("validate", "--preflight", "s.yaml", "--results", "r", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    return yaml.safe_load(text), checked.stderr, made.stderr


def contract(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "contract.json"
    proc = mcp_chaos("contract", "s.yaml", "--results", "r", "--json", str(out), *args, cwd=tmp_path)
    return proc, json.loads(out.read_text())


def test_the_filesystem_server_a_directory_store_and_a_naturally_idempotent_write(
    tmp_path: Path, node_servers: str
) -> None:
    scenario, preflight, _ = drafted(tmp_path, f"{node_servers} {FILESYSTEM} {{data_dir}}")
    assert scenario["name"] == "secure-filesystem-server-chaos"
    assert scenario["workload"]["tool"] == "write_file"  # not create_directory, edit_file or move_file
    assert scenario["workload"]["arguments"] == {"path": "path-{index}", "content": "{marker}"}
    assert scenario["audit"] == {
        "effects": {
            "files": {"dir": "{data_dir}", "pattern": "**/*", "marker_in": "content", "format": "text"}
        }
    }
    assert "preflight: 2 calls of write_file, 1 effect under each marker (audit.effects.files)" in preflight
    proc, report = contract(tmp_path, "--only", "replay,twins,key_reuse,restart_keeps_keys")
    verdicts = {c["id"]: c["verdict"] for c in report["checks"]}
    assert verdicts == {
        "replay": "pass",
        "twins": "not_applicable",
        "key_reuse": "not_applicable",
        "restart_keeps_keys": "pass",
    }, proc.stdout
    assert report["checks"][0]["why"] == "one effect and the same answer: the call is naturally idempotent"


def test_the_memory_server_a_store_made_at_the_first_write(tmp_path: Path, node_servers: str) -> None:
    scenario, preflight, said = drafted(
        tmp_path, f"{node_servers} {MEMORY}", "--env", "MEMORY_FILE_PATH={data_dir}/memory.jsonl"
    )
    assert "init: create_entities stored entities.0.name in {data_dir}/memory.jsonl, field name" in said
    assert scenario["name"] == "memory-server-chaos"
    # The tool that makes records, not add_observations (it takes an entity that must exist) or a delete.
    assert scenario["workload"]["tool"] == "create_entities"
    assert scenario["workload"]["arguments"]["entities"][0]["name"] == "{marker}"
    assert scenario["audit"] == {
        "effects": {"jsonl": {"path": "{data_dir}/memory.jsonl", "marker_field": "name"}}
    }
    assert (
        "preflight: 2 calls of create_entities, 1 effect under each marker (audit.effects.jsonl)" in preflight
    )
    proc, report = contract(tmp_path)
    by_id = {c["id"]: c for c in report["checks"]}
    assert len(by_id) == 12
    assert "error" not in {c["verdict"] for c in by_id.values()}, proc.stdout
    # It writes a temporary file and renames it over the store, and never fsyncs: with power losses on
    # (the default, as in crashpoints) the check fails on one, though a kill loses nothing (the test
    # below explores both).
    assert by_id["crash_points"]["verdict"] == "fail", by_id["crash_points"]
    assert "power loss" in by_id["crash_points"]["why"], by_id["crash_points"]
    assert by_id["twins"]["verdict"] == "not_applicable"
    # It deduplicates by name (one effect), but the second answer says nothing was created.
    assert by_id["replay"]["verdict"] == "fail"
    assert by_id["replay"]["why"].startswith("one effect, but the same call made again answered differently")
    assert by_id["catalog"]["why"].startswith("create_entities changes state but takes no idempotency key")


def test_the_memory_server_explored_from_its_drafted_scenario_loses_its_store_to_a_power_loss(
    tmp_path: Path, node_servers: str
) -> None:
    """The scenario init drafted, untouched: crash points over stdio, its file operations traced. It
    writes a temporary file (a random name: one point in every call) and renames it over memory.jsonl,
    and never fsyncs: a kill at any point loses nothing, a power loss everything since the start."""
    drafted(tmp_path, f"{node_servers} {MEMORY}", "--env", "MEMORY_FILE_PATH={data_dir}/memory.jsonl")
    done = mcp_chaos("crashpoints", "s.yaml", "--results", "r", "--json", "x.json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    found = json.loads((tmp_path / "x.json").read_text())
    assert found["clean_call"] == ["request", "fs_truncate#1", "fs_write#1", "fs_rename#1", "response"]
    assert "memory.jsonl.*.tmp -> memory.jsonl" in found["clean_call_labels"]
    assert found["inconclusive"] == []
    by_crash = {
        crash: {p["point"]: p["finding"] for p in found["points"] if p["crash"] == crash}
        for crash in ("kill", "power_loss")
    }
    assert set(by_crash["kill"].values()) == {None}, by_crash
    # Nothing is ever fsynced: a power loss at any point leaves the same files, one state, one try.
    (lost,) = [p for p in found["points"] if p["crash"] == "power_loss"]
    assert lost["finding"] == "lost"
    assert "fs_rename#1@power_loss" in lost["same_state"]
    assert "never fsyncs what it writes" in lost["advice"]
