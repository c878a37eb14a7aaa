"""A server the harness does not start (``target.url``): started by a test fixture, as a deployment
runs it, then driven, faulted through the fault proxy, killed and restarted by the scenario's commands,
and checked by ``contract`` exactly as the same server started by the harness."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.history import EventType, FaultKind, Verdict, read_history
from harness.rundir import HISTORY
from tests.helpers.cli import mcp_chaos
from tests.helpers.processes import RemoteTarget
from tests.helpers.scenarios import EFFECTS_QUERY, invoice_scenario, run_scenario

pytestmark = pytest.mark.integration

SLOW = {"INVOICES_PRE_COMMIT_MS": "100"}
"""As the contract tests run the reference target: concurrent calls arrive while the first is in flight."""


@pytest.fixture
def remote(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RemoteTarget]:
    target = RemoteTarget(tmp_path, INVOICES_MODE=request.param, **SLOW)
    try:
        yield target
    finally:
        target.stop()


def url_scenario(remote: RemoteTarget, **sections: Any) -> dict[str, Any]:
    """The invoices scenario, its target the fixture's server at its URL, killed and restarted by it."""
    data = invoice_scenario(**sections)
    data["target"] = {
        "url": remote.url,
        "kill_command": remote.command("kill"),
        "restart_command": remote.command("start"),
        "restart_delay_s": 0.05,
        "ready_timeout_s": 30,
    }
    data["audit"] = {"effects": {"sql": {"url": f"sqlite:///{remote.db}", "query": EFFECTS_QUERY}}}
    return data


STREAM = [
    {"fault": "sever_response", "tool": "create_invoice", "probability": 0.25, "wait_for_server": True},
    {"fault": "sever_request", "tool": "create_invoice", "probability": 0.05},
]


@pytest.mark.parametrize("remote", ["naive", "atomic"], indirect=True)
def test_a_server_started_outside_runs_with_stream_faults_and_kill_commands(
    tmp_path: Path, remote: RemoteTarget
) -> None:
    first_pid = remote.pid
    data = url_scenario(
        remote,
        intents=40,
        concurrency=1,  # a kill breaks at most the one call in flight
        faults={"kill": {"count": 2, "hold_dispatch": True}, "stream": STREAM},
    )
    result = run_scenario(data, tmp_path / "results")
    summary = result.summary
    events = list(read_history(result.run_dir / HISTORY))
    assert summary.injected(FaultKind.KILL) == 2
    cut = {e["intent"] for e in events if e["type"] == "fault" and e.get("fault") == "sever_response"}
    assert len(cut) >= 3  # a quarter of 40 intents' first attempts, drawn with the seed
    assert sum(e["type"] == EventType.POD_READY for e in events) == 3  # reached, then back after each kill
    # Each kill ran the kill command, each restart the restart command: a new server process each time.
    log = (result.run_dir / "pods" / "pod-0.log").read_text()
    assert log.count("killed invoices server pid") == 2
    assert log.count("started invoices server pid") == 2
    assert remote.pid not in (None, first_pid)
    assert summary.intents.ended == 40
    assert summary.verdicts.get(Verdict.LOST, 0) == 0
    if remote.mode == "naive":
        # A response cut after the commit is an intent the naive server does again on its retry (all
        # but those whose server a kill took down mid-call, one per kill: blamed on the kill).
        assert summary.duplicate_causes.get("sever_response", 0) >= len(cut) - 2
        assert summary.verdicts[Verdict.DUPLICATE] >= summary.duplicate_causes["sever_response"]
    else:
        assert summary.verdicts.get(Verdict.DUPLICATE, 0) == 0
        assert summary.verdicts[Verdict.EXACTLY_ONCE] == 40


def contract(
    tmp_path: Path, data: dict[str, Any], *args: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "contract.json"
    out.unlink(missing_ok=True)
    proc = mcp_chaos("contract", str(path), "--results", str(tmp_path / "r"), "--json", str(out), *args)
    return proc, json.loads(out.read_text()) if out.exists() else None


def verdicts(report: Any) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in report["checks"]}


@pytest.mark.parametrize("remote", ["naive", "atomic"], indirect=True)
def test_contract_judges_a_url_target_as_the_same_server_started_by_the_harness(
    tmp_path: Path, remote: RemoteTarget
) -> None:
    mode = remote.mode
    started = invoice_scenario(mode=mode, env=SLOW)
    proc_started, by_harness = contract(tmp_path / "started", started, "--skip", "crash_points")
    proc_url, at_url = contract(tmp_path / "url", url_scenario(remote), "--skip", "crash_points")
    assert verdicts(at_url) == verdicts(by_harness), proc_url.stdout
    assert proc_url.returncode == proc_started.returncode == (1 if mode == "naive" else 0)
    failing = {check for check, verdict in verdicts(at_url).items() if verdict == "fail"}
    expected = {"replay", "key_reuse", "concurrent_same_key", "restart_keeps_keys"}
    assert failing == (expected if mode == "naive" else set())


@pytest.mark.parametrize("remote", ["atomic"], indirect=True)
def test_what_contract_cannot_do_to_a_url_target_is_no_pass(tmp_path: Path, remote: RemoteTarget) -> None:
    """Without a kill command nothing restarts it; with one, no crash point but the response is reachable:
    each check says why it has no verdict, and neither passes."""
    data = url_scenario(remote)
    del data["target"]["kill_command"], data["target"]["restart_command"]
    proc, report = contract(tmp_path, data, "--only", "restart_keeps_keys,crash_points")
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["restart_keeps_keys"]["verdict"] == "error", proc.stdout
    assert "target.url has no kill_command" in by_id["restart_keeps_keys"]["why"]
    assert by_id["crash_points"]["verdict"] not in ("pass", "fail")
    assert "target.url is a server the harness does not start" in by_id["crash_points"]["why"]
    assert proc.returncode == 1


@pytest.mark.parametrize("remote", ["naive"], indirect=True)
def test_a_crash_at_the_response_of_a_url_target(tmp_path: Path, remote: RemoteTarget) -> None:
    """The server committed and answered; its answer is withheld and the kill command kills it there: the
    naive server does the retry again, as the same hold does to a server the harness starts."""
    data = url_scenario(
        remote, intents=3, faults={"crash_points": {"holds": [{"at": "response", "intents": [1]}]}}
    )
    result = run_scenario(data, tmp_path / "results")
    events = list(read_history(result.run_dir / HISTORY))
    kills = [e for e in events if e["type"] == "fault" and e.get("fault") == "kill"]
    assert [e.get("point") for e in kills] == ["response"]
    assert "killed invoices server pid" in (result.run_dir / "pods" / "pod-0.log").read_text()
    assert result.summary.verdicts[Verdict.DUPLICATE] == 1
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 2


@pytest.mark.parametrize("remote", ["atomic"], indirect=True)
def test_init_drafts_a_url_scenario_that_runs_once_its_todos_are_done(
    tmp_path: Path, remote: RemoteTarget
) -> None:
    made = mcp_chaos("init", "--url", remote.url, "-o", "drafted.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "drafted.yaml").read_text()
    drafted = yaml.safe_load(text)
    assert drafted["target"]["url"] == remote.url
    assert drafted["target"]["kill_command"][0].startswith("TODO: the command that kills this server")
    assert drafted["faults"]["stream"] == [{"fault": "sever_response", "probability": 0.05}]
    assert "The server already runs: the harness starts nothing." in text
    refused = mcp_chaos("validate", "drafted.yaml", cwd=tmp_path)
    assert refused.returncode != 0
    assert "TODO" in refused.stderr
    done = [
        f"target.kill_command={json.dumps(remote.command('kill'))}",
        f"target.restart_command={json.dumps(remote.command('start'))}",
        f"audit.effects.sql.url=sqlite:///{remote.db}",
        f"audit.effects.sql.query={EFFECTS_QUERY}",
        "workload.intents=60",
        "workload.concurrency=2",
    ]
    sets = [arg for s in done for arg in ("--set", s)]
    # What the user does: the TODO comments done (the --set values above), then deleted.
    kept = [line for line in text.splitlines() if not (line.startswith("#") and "TODO" in line)]
    (tmp_path / "drafted.yaml").write_text("\n".join(kept) + "\n")
    ran = mcp_chaos("run", "drafted.yaml", "--quiet", "--allow-inconclusive", *sets, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert "exactly_once |      60 |" in ran.stdout, ran.stdout
