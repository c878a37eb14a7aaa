"""`mcp-chaos init`, then `mcp-chaos run`, with no hand edits, for every shape of reference server.

Each case starts a real server through `init` (which lists its tools and looks at
the store it created), runs the drafted scenario (preflight included) on a small
workload, and checks the audit: the atomic target gives exactly one effect per
intent. Where `init` cannot see the store, it leaves the effect source as TODO,
and only that is filled in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import INVOICES, TS_DIR

pytestmark = pytest.mark.integration

ATOMIC = ["--env", "INVOICES_MODE=atomic", "--env", "INVOICES_DB={data_dir}/invoices.db"]


def mcp_chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=cwd,
    )


def init_then_run(tmp_path: Path, *init: str, sets: tuple[str, ...] = ()) -> tuple[dict[str, object], str]:
    made = mcp_chaos("init", *init, "-o", "drafted.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "mcp-chaos run drafted.yaml" in made.stdout
    drafted = yaml.safe_load((tmp_path / "drafted.yaml").read_text())
    assert drafted["gate"] == {"fail_on": ["duplicate", "lost", "applied_despite_error", "inconclusive"]}
    overrides = [
        arg for s in ("workload.intents=150", "workload.concurrency=4", *sets) for arg in ("--set", s)
    ]
    # A few intents, for speed, are too few for the drafted kills: an inconclusive run, which the
    # drafted gate fails, and which is not what these tests check.
    ran = mcp_chaos("run", "drafted.yaml", "--quiet", "--allow-inconclusive", *overrides, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "preflight: 1 call of create_invoice, 1 effect under its marker" in ran.stderr
    assert "exactly_once |     150 |" in ran.stdout, ran.stdout
    return drafted, ran.stdout


def test_an_http_server_of_the_current_protocol(tmp_path: Path) -> None:
    drafted, out = init_then_run(tmp_path, "--command", f"{sys.executable} {INVOICES}", *ATOMIC)
    assert drafted["workload"]["arguments"]["memo"] == "{marker}"  # type: ignore[index]
    assert drafted["workload"]["arguments"]["idempotency_key"] == "{key}"  # type: ignore[index]
    assert drafted["audit"] == {  # found in the table the server created
        "effects": {
            "sql": {
                "url": "sqlite:///{data_dir}/invoices.db",
                "query": 'SELECT "memo" AS marker, COUNT(*) AS effects FROM "invoices" GROUP BY "memo"',
            }
        }
    }
    assert "protocol: 2026-07-28" in out


def test_a_stdio_server(tmp_path: Path) -> None:
    drafted, out = init_then_run(
        tmp_path,
        "--command",
        f"{sys.executable} {INVOICES}",
        "--transport",
        "stdio",
        "--env",
        "INVOICES_TRANSPORT=stdio",
        *ATOMIC,
    )
    assert drafted["target"]["transport"] == "stdio"  # type: ignore[index]
    assert "protocol: 2025-11-25" in out


@pytest.mark.postgres
def test_a_typescript_sdk_server_with_2025_sessions_and_postgres(
    tmp_path: Path, node: str, postgres_server: None
) -> None:
    command = f"{node} {TS_DIR / 'server.mjs'}"
    drafted, out = init_then_run(
        tmp_path, "--command", command, "--env", "INVOICES_MODE=atomic", "--env", "INVOICES_DB={postgres_url}"
    )
    assert drafted["services"] == {"postgres": {}}
    assert drafted["audit"]["effects"]["sql"]["url"] == "{postgres_url}"  # type: ignore[index]
    assert "protocol: 2025-11-25; sessions:" in out


@pytest.mark.docker
def test_an_image(tmp_path: Path, docker_image: str) -> None:
    drafted, _ = init_then_run(tmp_path, "--image", docker_image, *ATOMIC)
    assert drafted["target"]["image"] == docker_image  # type: ignore[index]


def test_a_store_init_cannot_see_leaves_only_the_effect_source_to_fill_in(tmp_path: Path) -> None:
    store = tmp_path / "elsewhere" / "invoices.db"
    store.parent.mkdir()
    made = mcp_chaos(
        "init",
        "--command",
        f"{sys.executable} {INVOICES}",
        "--env",
        "INVOICES_MODE=atomic",
        "--env",
        f"INVOICES_DB={store}",
        "-o",
        "drafted.yaml",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    assert "fill in its 2 TODO value(s)" in made.stdout
    refused = mcp_chaos("validate", "drafted.yaml", cwd=tmp_path)
    assert refused.returncode == 2
    assert "audit.effects.sql.url still says TODO (left by mcp-chaos init): fill it in" in refused.stderr
    store.unlink()  # init's own start created it; the run starts from an empty store
    ran = mcp_chaos(
        "run",
        "drafted.yaml",
        "--quiet",
        "--allow-inconclusive",
        "--set",
        "workload.intents=100",
        "--set",
        f"audit.effects.sql.url=sqlite:///{store}",
        "--set",
        "audit.effects.sql.query=SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo",
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "exactly_once |     100 |" in ran.stdout


def test_init_refuses_to_overwrite_and_names_unknown_tools(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("mine")
    kept = mcp_chaos("init", "--command", f"{sys.executable} {INVOICES}", cwd=tmp_path)
    assert kept.returncode == 2
    assert "scenario.yaml already exists" in kept.stderr
    assert (tmp_path / "scenario.yaml").read_text() == "mine"
    unknown = mcp_chaos(
        "init",
        "--command",
        f"{sys.executable} {INVOICES}",
        *ATOMIC,
        "--tool",
        "nope",
        "-o",
        "x.yaml",
        cwd=tmp_path,
    )
    assert unknown.returncode == 2
    assert "--tool 'nope' is not one of the server's tools: count_invoices, create_invoice" in unknown.stderr


def test_init_against_a_server_that_will_not_start(tmp_path: Path) -> None:
    command = f"{sys.executable} -c 'print(\"no config\"); raise SystemExit(3)'"
    failed = mcp_chaos("init", "--command", command, cwd=tmp_path)
    assert failed.returncode == 3
    assert failed.stderr.count("mcp-chaos: error:") == 1
    assert "  | no config" in failed.stderr  # the log's tail
    assert not (tmp_path / "scenario.yaml").exists()
    # The log the error names is kept (init's throwaway directory stays when the server would not start).
    found = re.search(r"\(log: (\S+)\)", failed.stderr)
    assert found is not None, failed.stderr
    log = Path(found[1])
    try:
        assert "no config" in log.read_text()
    finally:
        shutil.rmtree(log.parents[2])
