"""The official MCP conformance suite's client scenarios, run against the harness's client as
``make conformance`` runs them (tests/conformance/suite.py): every finding of a run rests on the
client doing what the protocol says, so a failure the expected-failures files do not list fails
the build. Skipped, with what to install, where there is no npm to install the suite with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.history import read_history
from tests.conformance import suite
from tests.helpers.node import npm_lock, require_node
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.integration


def test_the_harness_client_passes_the_conformance_suite_but_for_the_failures_it_lists() -> None:
    require_node("the conformance suite")
    with npm_lock():
        suite.install()
    done = subprocess.run(
        [sys.executable, "-m", "tests.conformance.suite"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " 0 unexpected" in summary, summary
    # Both legs ran: the registry's latest suite and the one with 2026-07-28 scenarios.
    assert "conformance suite 0.1.16" in done.stdout
    assert "conformance suite 0.2.0-alpha.12@2026-07-28" in done.stdout
    assert "conformance suite 0.2.0-alpha.12@2025-03-26" in done.stdout
    assert "✓ sse-retry" in done.stdout
    assert "✓ auth/client-credentials-basic" in done.stdout


def test_a_scenario_the_client_fails_is_a_failure_of_the_suite(tmp_path: Path) -> None:
    """The runner can fail: a client that exits at once without a request fails the scenario, and
    the same scenario listed as expected to fail passes as expected."""
    require_node("the conformance suite")
    with npm_lock():
        suite.install()
    leg = suite.LEGS[0]
    outcome = suite.run(leg, "tools_call", tmp_path, client="true")
    assert not outcome.ok
    assert outcome.failed >= 1
    baseline = tmp_path / "expected.yml"
    baseline.write_text("client:\n  # a client that sends nothing\n  - tools_call\n")
    listed = suite.Leg(leg.name, leg.entry, leg.spec_version, baseline)
    assert suite.run(listed, "tools_call", tmp_path, client="true").ok
    assert suite.expected(listed) == {"tools_call": "a client that sends nothing"}


def test_a_run_with_client_defaults_passes_the_suites_sse_retry_scenario(tmp_path: Path) -> None:
    """Not only the conformance client: ``mcp-chaos run`` itself, the driver and its retry policy, at
    2025-11-25 with the client's defaults, comes back with a GET after the interval the server asked
    for, and the call is one attempt, resumed, not a retry (tests/conformance/sse-retry.yaml)."""
    outcome, results = run_as_client(tmp_path, "sse-retry.yaml", "sse-retry")
    assert outcome.ok, outcome.output[-3000:]
    assert (outcome.passed, outcome.failed) == (3, 0)
    [run_dir] = results.iterdir()
    events = list(read_history(run_dir / "history.jsonl"))
    ended = [e for e in events if e["type"] == "attempt_ended"]
    assert len(ended) == 1, ended  # one attempt: the closed stream was resumed, not sent again
    assert ended[0]["outcome"] == "ok"
    assert ended[0]["resumed"] is True


def test_a_run_answers_the_suites_elicitation_scenario_with_the_form_s_defaults(tmp_path: Path) -> None:
    """``mcp-chaos run`` answers the form the suite's server asks for mid-call (elicitation/create, on
    the call's stream) with each field's default, as the conformance client does
    (tests/conformance/elicitation.yaml); it timed out unanswered before."""
    outcome, results = run_as_client(tmp_path, "elicitation.yaml", "elicitation-sep1034-client-defaults")
    assert outcome.ok, outcome.output[-3000:]
    assert (outcome.passed, outcome.failed) == (outcome.total, 0)
    [run_dir] = results.iterdir()
    ended = [e for e in read_history(run_dir / "history.jsonl") if e["type"] == "attempt_ended"]
    assert [e["outcome"] for e in ended] == ["ok"], ended
    assert ended[0]["reply"].startswith("Elicitation completed: "), ended[0]


def run_as_client(tmp_path: Path, scenario: str, name: str) -> tuple[suite.Outcome, Path]:
    """The suite's scenario ``name`` with ``mcp-chaos run`` of tests/conformance/``scenario`` as its
    client (the suite's server as ``target.url``): how it went, and where the run's directory is."""
    require_node("the conformance suite")
    with npm_lock():
        suite.install()
    results = tmp_path / "results"
    client = tmp_path / "run-client.sh"
    mcp_chaos = ROOT / ".venv" / "bin" / "mcp-chaos"
    path = ROOT / "tests" / "conformance" / scenario
    client.write_text(
        f'#!/bin/sh\nexec "{mcp_chaos}" run "{path}" --set "target.url=$1" --no-preflight --quiet '
        f'--fail-on duplicate --results "{results}"\n'
    )
    client.chmod(0o755)
    return suite.run(suite.LEGS[0], name, tmp_path / "suite", client=str(client)), results
