"""The GitHub Action's step (.ci/action/run.sh) on a laptop, as the runner runs it: the action's inputs
and the runner's files in the environment, a real run of the reference target, and the outputs,
step summary and JUnit file it leaves, read against the run's own summary.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

RUN_SH = ROOT / ".ci" / "action" / "run.sh"


def step(tmp_path: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    """run.sh with the action's inputs; its exit, its outputs ($GITHUB_OUTPUT) and the step summary."""
    runner = tmp_path / "runner"
    runner.mkdir(exist_ok=True)
    output, summary = runner / "output", runner / "summary.md"
    output.write_text("")
    summary.write_text("")
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        **inputs,
        "MCP_CHAOS": str(bin_dir / "mcp-chaos"),
        "MCP_CHAOS_PYTHON": sys.executable,
        "RUNNER_TEMP": str(runner),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    proc = subprocess.run(
        ["bash", str(RUN_SH)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    lines = output.read_text().splitlines()
    return proc, dict(line.split("=", 1) for line in lines), summary.read_text()


def crashing(tmp_path: Path) -> str:
    """The naive design crashing once right after its commit: one duplicate of three, every time."""
    data = invoice_scenario(mode="naive", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    (tmp_path / "naive.yaml").write_text(yaml.safe_dump(data))
    return "naive.yaml"


def test_a_duplicate_fails_the_step_after_its_outputs_and_files_are_written(tmp_path: Path) -> None:
    # The args input split as a shell would: the quoted override is one argument.
    proc, out, page = step(tmp_path, SCENARIO=crashing(tmp_path), ARGS="--quiet --set 'workload.intents=4'")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads((Path(out["run-dir"]) / "summary.json").read_text())
    assert summary["verdicts"]["duplicate"] == 1
    assert summary["intents"]["planned"] == 4
    assert out == {
        "exit-code": "1",
        "results": out["results"],
        "junit": f"{out['results']}/junit.xml",
        "run-dir": out["run-dir"],
        "artifact": f"mcp-chaos-{summary['run_id']}",
        "verdict": "fail",
        "headline": "duplicate",
        "duplicates": "1",
        "lost": "0",
        "intents": "4",
        "duplicate-rate": "0.25",
    }
    assert Path(out["run-dir"]).parent == Path(out["results"])
    assert Path(out["results"]).parent == tmp_path / "runner"
    assert "**DUPLICATE: 1 of 4 intents" in page
    import xmlschema

    xmlschema.XMLSchema(str(ROOT / "tests" / "schemas" / "junit.xsd")).validate(out["junit"])


def test_fail_on_leaves_the_other_findings_ungated(tmp_path: Path) -> None:
    proc, out, _ = step(tmp_path, SCENARIO=crashing(tmp_path), FAIL_ON="lost", ARGS="--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (out["verdict"], out["headline"], out["duplicates"], out["exit-code"]) == (
        "pass",
        "duplicate",
        "1",
        "0",
    )


def test_a_bad_scenario_still_names_the_artifact_and_the_exit(tmp_path: Path) -> None:
    proc, out, _ = step(tmp_path, SCENARIO="missing.yaml")
    assert proc.returncode == 2
    assert "scenario file not found: missing.yaml" in proc.stderr
    assert out["exit-code"] == "2"
    assert out["artifact"] == Path(out["results"]).name
    assert "verdict" not in out


def test_args_that_cannot_be_split_are_a_usage_error_with_the_outputs_written(tmp_path: Path) -> None:
    proc, out, _ = step(tmp_path, SCENARIO=crashing(tmp_path), ARGS="--quiet --set 'target.env.TOKEN=s3cret")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mcp-chaos action: the args input cannot be split as a shell would (No closing quotation); "
        "balance its quotes"
    ]
    assert out["exit-code"] == "2"  # and the artifact step has its name: it ran with no outputs before
    assert out["artifact"] == Path(out["results"]).name
    assert not list((tmp_path / "runner").glob("mcp-chaos-args.*"))


def test_an_argument_may_hold_a_line_break(tmp_path: Path) -> None:
    # A YAML block scalar: split line by line, its lines became arguments of their own.
    args = "--quiet --set 'description=|\n  line one\n  line two'"
    proc, out, _ = step(tmp_path, SCENARIO=crashing(tmp_path), ARGS=args)
    assert out["exit-code"] == "1", proc.stderr  # the run ran, and found its duplicate
    ran = yaml.safe_load((Path(out["run-dir"]) / "scenario.yaml").read_text())
    assert ran["description"] == "line one\nline two"


@pytest.mark.docker
def test_the_image_input_runs_the_target_from_the_image(tmp_path: Path, docker_image: str) -> None:
    proc, out, _ = step(tmp_path, SCENARIO=crashing(tmp_path), IMAGE=docker_image, ARGS="--quiet")
    assert proc.returncode == 1, proc.stderr
    as_run = yaml.safe_load((Path(out["run-dir"]) / "scenario.yaml").read_text())
    assert as_run["target"]["image"] == docker_image
    assert as_run["target"]["command"] is None
    assert (out["duplicates"], out["headline"]) == ("1", "duplicate")


@pytest.mark.parametrize("kind", ["link-to-dev-zero", "fifo"])
def test_outputs_of_a_summary_that_is_no_file_of_the_run_are_refused_at_once(
    tmp_path: Path, kind: str
) -> None:
    """A summary.json linked to /dev/zero was read for ever (a FIFO: waited for a writer for ever), and the
    step with it: outputs.py reads the file the run wrote, or names what is there instead."""
    summary = tmp_path / "summary.json"
    if kind == "fifo":
        os.mkfifo(summary)
    else:
        summary.symlink_to("/dev/zero")
    proc = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "action" / "outputs.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"outputs.py: {summary} is not the file the run wrote (a link, FIFO or device)\n"
