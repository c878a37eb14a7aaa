"""The command line as a user meets it: exit codes, one-line errors, cleanup.

``main()`` runs in the test's process (``mcp_chaos``), except where the harness's own process is
what the test signals or kills (``start_cli_run``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.helpers.cli import mcp_chaos, start_cli_run
from tests.helpers.processes import alive
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration


def write(tmp_path: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def pod_pids(run_dir: Path) -> list[int]:
    return [
        e["pid"]
        for e in map(orjson.loads, (run_dir / "history.jsonl").read_bytes().splitlines())
        if e["type"] == "pod_started"
    ]


def test_run_writes_the_run_directory_and_prints_the_table(tmp_path: Path) -> None:
    path = write(tmp_path, invoice_scenario(intents=20, concurrency=4))
    proc = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"), "--run-id", "one")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "r" / "one"
    for name in (
        "scenario.yaml",
        "history.jsonl",
        "intents.csv",
        "summary.json",
        "report.md",
        "pods/pod-0.log",
    ):
        assert (run_dir / name).is_file(), name
    assert "| exactly_once |      20 |" in proc.stdout
    assert proc.stdout.startswith("exactly once: 20 of 20 intents")
    assert "\ngate: passed\n" in proc.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdicts"]["exactly_once"] == 20
    assert not any(alive(pid) for pid in pod_pids(run_dir))

    again = mcp_chaos("audit", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert json.loads((run_dir / "summary.json").read_text()) == summary


def test_gate_fails_the_exit_code(tmp_path: Path) -> None:
    data = invoice_scenario(mode="naive", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    path = write(tmp_path, data)
    proc = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"), "--set", "gate.max_duplicates=0")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("DUPLICATE: 1 of 3 intents")
    assert "gate: FAILED: 1 duplicates > max_duplicates 0" in proc.stdout
    unset = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"))
    assert unset.returncode == 1, unset.stderr  # no gate: every finding fails
    assert "gate: FAILED: 1 duplicate (the default gate fails on any duplicate)" in unset.stdout


def test_bad_scenario_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["workload"]["concurrency"] = -1
    proc = mcp_chaos("run", str(write(tmp_path, data)), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"mcp-chaos: error: {tmp_path / 's.yaml'}: workload.concurrency: "
        "Input should be greater than 0 (got -1)"
    ]
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


def test_missing_scenario_file(tmp_path: Path) -> None:
    proc = mcp_chaos("run", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert "scenario file not found" in proc.stderr


def test_target_that_never_gets_ready(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["command"] = [
        "{python}",
        "-c",
        "import time; print('warming up', flush=True); time.sleep(60)",
    ]
    data["target"]["ready_timeout_s"] = 1.5
    # Without the preflight, which would meet the same target first: the run's own record is tested.
    run = (
        "run",
        str(write(tmp_path, data)),
        "--results",
        str(tmp_path / "r"),
        "--run-id",
        "x",
        "--no-preflight",
    )
    proc = mcp_chaos(*run)
    assert proc.returncode == 3
    lines = proc.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("mcp-chaos: error:"))
    assert lines[error].startswith("mcp-chaos: error: target pod pod-0 did not answer server/discover")
    assert any("warming up" in line for line in lines[error + 1 :])  # the log tail is shown
    run_dir = tmp_path / "r" / "x"
    assert not any(alive(pid) for pid in pod_pids(run_dir))
    ended = orjson.loads((run_dir / "history.jsonl").read_bytes().splitlines()[-1])
    assert (ended["type"], ended["status"]) == ("run_ended", "failed")


def test_target_that_exits_at_once(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["command"] = ["{python}", "-c", "import sys; print('boom: no config'); sys.exit(3)"]
    proc = mcp_chaos("run", str(write(tmp_path, data)), "--results", str(tmp_path / "r"))
    assert proc.returncode == 3
    assert "exited with code 3 before it was ready" in proc.stderr
    assert (
        "if it needs its store made first, see docs/how-to/your-server.md, "
        "'A store made before the server starts'"
    ) in proc.stderr
    assert "boom: no config" in proc.stderr


def test_command_that_does_not_exist(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["command"] = ["/nonexistent/server"]
    proc = mcp_chaos("run", str(write(tmp_path, data)), "--results", str(tmp_path / "r"))
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[-1] == (
        "mcp-chaos: error: cannot start target command '/nonexistent/server': "
        "No such file or directory (check target.command in the scenario)"
    )


def test_audit_of_something_that_is_not_a_run(tmp_path: Path) -> None:
    proc = mcp_chaos("audit", str(tmp_path))
    assert proc.returncode == 2
    assert "is not a run directory" in proc.stderr


def long_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    data = invoice_scenario(intents=100_000, concurrency=8, env={"INVOICES_PRE_COMMIT_MS": "20"})
    return start_cli_run(tmp_path, data, run_id="long", attempts=50, timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_a_partial_run_that_can_be_audited(tmp_path: Path, sig: signal.Signals) -> None:
    proc, run_dir = long_run(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"audit it with: mcp-chaos audit {run_dir}" in err
    assert not any(alive(pid) for pid in pod_pids(run_dir))
    last = orjson.loads((run_dir / "history.jsonl").read_bytes().splitlines()[-1])
    assert (last["type"], last["status"]) == ("run_ended", "interrupted")

    audit = mcp_chaos("audit", str(run_dir))
    assert audit.returncode == 0, audit.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["intents"]["started"] >= 50
    assert summary["verdicts"]["duplicate"] == 0
    assert summary["verdicts"]["incomplete"] <= 8  # at most one per worker was cut off


def test_pods_die_with_a_killed_harness(tmp_path: Path) -> None:
    proc, run_dir = long_run(tmp_path)
    pids = pod_pids(run_dir)
    proc.kill()  # SIGKILL: no cleanup code runs in the harness
    proc.communicate(timeout=10)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)
    # What was observed before the kill is on disk and auditable.
    audit = mcp_chaos("audit", str(run_dir))
    assert audit.returncode == 0, audit.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "unfinished"


def test_reproduce_puts_variants_beside_the_article(tmp_path: Path) -> None:
    data = invoice_scenario(intents=30, concurrency=4, kills={"count": 1})
    data["target"]["env"]["INVOICES_POST_COMMIT_MS"] = "20"
    path = write(tmp_path, data)
    proc = mcp_chaos(
        "reproduce",
        "--scenario",
        str(path),
        "--modes",
        "naive,atomic",
        "--runs",
        "2",
        "--results",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    first_table = proc.stdout.split("\n\n", 1)[0]
    rows = [line for line in first_table.splitlines() if line.startswith(("| naive", "| atomic"))]
    assert len(rows) == 2
    assert "37/2,700 = 1.37%" in rows[0]
    assert rows[1].split("|")[2].strip() == "2"  # two runs pooled
    assert "0/60" in rows[1]  # atomic: no duplicate in 2 x 30 intents
    assert len(list(tmp_path.glob("reproduce-*.md"))) == 1
    run_dirs = sorted(d for d in tmp_path.iterdir() if (d / "summary.json").is_file())
    assert len(run_dirs) == 4
    assert proc.stderr.count("== naive: run") == 2
    assert proc.stderr.count("preflight: 2 calls of create_invoice") == 2  # once per variant
    (pair,) = [line for line in proc.stdout.splitlines() if line.startswith("| naive vs atomic")]
    assert "intents per design to tell apart" in proc.stdout
    assert pair.split("|")[4].strip() in ("different", "not told apart")

    compared = mcp_chaos("compare", *map(str, run_dirs[:2]), "-o", str(tmp_path / "cmp.md"))
    assert compared.returncode == 0, compared.stderr
    assert f"| {run_dirs[0].name} (itest) vs {run_dirs[1].name} (itest) |" in compared.stdout
    assert (tmp_path / "cmp.md").read_text().startswith("# Comparison")
    refused = mcp_chaos("compare", str(tmp_path / "nothing"))
    assert refused.returncode == 2
    assert "has no summary.json: audit it first" in refused.stderr


def test_reproduce_rejects_unknown_modes(tmp_path: Path) -> None:
    proc = mcp_chaos("reproduce", "--modes", "naive,sloppy")
    assert proc.returncode == 2
    assert "--modes must list some of naive, keyed, atomic" in proc.stderr


def test_validate_shows_stream_rules() -> None:
    proc = mcp_chaos("validate", "scenarios/sever-streams.yaml")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  0 pod faults planned" in lines
    assert any(
        line.startswith("  stream rule 0: sever_response on tools/call create_invoice (p=0.05)")
        for line in lines
    )


def test_the_report_says_why_intents_were_rejected(tmp_path: Path) -> None:
    data = invoice_scenario(intents=6, concurrency=2)
    data["workload"]["arguments"]["amount_cents"] = {"random_int": [-9, -1]}
    path = str(write(tmp_path, data))
    proc = mcp_chaos("run", path, "--results", str(tmp_path / "r"), "--run-id", "no", "--no-preflight")
    # (the preflight would refuse this run: it is the point) A run that measured nothing fails its gate.
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("INCONCLUSIVE: 6 of 6 intents never took effect (rejected or given up)")
    assert "most common error: 6× tool_error invalid_amount:" in proc.stdout
    assert "amount_cents must be positive" in proc.stdout
    report = (tmp_path / "r" / "no" / "report.md").read_text()
    assert "| tool_error | invalid\\_amount |        6 |" in report  # a server's code, escaped for Markdown
    summary = json.loads((tmp_path / "r" / "no" / "summary.json").read_text())
    assert summary["verdicts"]["rejected"] == 6
    (error,) = summary["errors"]
    assert (error["outcome"], error["code"], error["count"]) == ("tool_error", "invalid_amount", 6)


def test_an_image_without_an_engine_is_one_line_and_exit_3(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["image"] = "mcp-chaos/invoices:dev"
    del data["target"]["command"]
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = mcp_chaos("run", str(write(tmp_path, data)), "--results", str(tmp_path), env=env)
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[-1].startswith(
        f"mcp-chaos: error: no Docker engine answers at unix://{tmp_path}/no-engine.sock"
    )


def gated(tmp_path: Path, mode: str, *flags: str) -> subprocess.CompletedProcess[str]:
    # One duplicate for naive, deterministically: the target dies right after its 3rd commit (its count
    # is kept in the store: the preflight's two calls commit in a store of their own and never reach it).
    data = invoice_scenario(mode=mode, env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    path = str(write(tmp_path, data, f"{mode}-{len(flags)}.yaml"))
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md")}
    return mcp_chaos("run", path, "--results", str(tmp_path / "r"), "--quiet", *flags, env=env)


def test_gates_from_the_command_line_and_canaries(tmp_path: Path) -> None:
    canary = gated(tmp_path, "naive", "--expect", "duplicate")
    assert canary.returncode == 0, canary.stdout  # the known-bad target showed its duplicate
    broken_canary = gated(tmp_path, "atomic", "--expect", "duplicate")
    assert broken_canary.returncode == 1
    assert "expected duplicate (a canary) and saw none" in broken_canary.stdout
    fail_on = gated(tmp_path, "naive", "--fail-on", "lost,duplicate")
    assert fail_on.returncode == 1
    assert "gate: FAILED: 1 duplicate (fail_on duplicate)" in fail_on.stdout
    rate = gated(tmp_path, "naive", "--max-duplicate-rate", "0.5")
    assert rate.returncode == 0, rate.stdout
    summary = (tmp_path / "step-summary.md").read_text()
    assert summary.count("# Retry-safety report") == 4  # one per run, appended
    assert "Scenario as run" not in summary


def test_a_bad_gate_flag_is_a_usage_error(tmp_path: Path) -> None:
    proc = gated(tmp_path, "naive", "--fail-on", "duplicates")
    assert proc.returncode == 2
    assert "gate.fail_on.0" in proc.stderr


def test_junit_names_the_failing_gate_criterion_and_fault_and_fits_the_schema(tmp_path: Path) -> None:
    import xmlschema

    junit = tmp_path / "run.xml"
    proc = gated(tmp_path, "naive", "--max-duplicates", "0", "--fail-on", "lost", "--junit", str(junit))
    assert proc.returncode == 1
    xmlschema.XMLSchema(str(Path(__file__).parents[1] / "schemas" / "junit.xsd")).validate(str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [
        "gate.unavailable",
        "gate.store_unreadable",
        "gate.lost",
        "gate.applied_despite_error",
        "gate.duplicate",
        "gate.inconclusive",
        "fault.crash",
    ]
    failure = cases["gate.duplicate"].find("failure")
    assert failure is not None
    assert failure.get("message") == "1 duplicates > max_duplicates 0"
    assert cases["gate.lost"].find("failure") is None
    assert cases["gate.unavailable"].find("failure") is None  # every pod answered after its restart
    crash = cases["fault.crash"].find("failure")
    assert crash is not None
    assert (crash.get("message") or "").startswith("1 duplicates, 0 lost among 1 intents hit")
    assert suite.get("failures") == "2"


def test_runs_append_to_a_trend_that_can_be_shown(tmp_path: Path) -> None:
    trend_file = tmp_path / "nights" / "trend.csv"
    for mode, canary in (("naive", ["--expect", "duplicate"]), ("atomic", [])):
        proc = gated(tmp_path, mode, *canary, "--trend", str(trend_file))
        assert proc.returncode == 0, proc.stderr
    shown = mcp_chaos("trend", str(trend_file), "-o", str(tmp_path / "trend.html"))
    assert shown.returncode == 0, shown.stderr  # 1 of 3 against 0 of 3: the intervals overlap
    lines = [line for line in shown.stdout.splitlines() if line.startswith("| itest")]
    assert [line.split("|")[3].strip() for line in lines] == ["1/3", "0/3"]
    assert 'src="data:image/png;base64,' in (tmp_path / "trend.html").read_text()
