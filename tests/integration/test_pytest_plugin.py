"""The pytest plugin, run by pytest itself (pytester, each session a real process in an empty folder)
against the reference target: its designs pass and fail the contract checks they should as test
items, and the ``mcp_chaos`` fixture runs scenarios and contracts from a user's own tests."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.contract import CHECKS
from tests.helpers.scenarios import invoice_scenario, pgclients_scenario
from tests.quality.test_file_crash_points import notes_scenario

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.integration

KEY_CHECKS = "replay,twins,key_reuse,concurrent_same_key,restart_keeps_keys"
NOT_APPLICABLE = {"crash_window", "crash_points", "mrtr", "handles", "annotations"}
"""What the plain reference target does not give the contract to test (no failpoint or hold point, question,
handle or annotation): skipped with the reason."""


def scenario(pytester: pytest.Pytester, name: str, mode: str, **env: str) -> Path:
    # 100 ms before the commit: the concurrent calls all arrive while the first is in flight
    # (tests/integration/test_contract.py), so each design answers them the same every time.
    data = invoice_scenario(mode=mode, env={"INVOICES_PRE_COMMIT_MS": "100", **env})
    data["name"] = name
    # Its SQLite file not traced: crash_points has no hold point then (tests/integration/test_contract.py
    # explores the store's file operations).
    data["faults"] = {"crash_points": {"files": False}}
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cases(path: Path) -> dict[str, tuple[str, str]]:
    """JUnit's cases: name -> (outcome, message)."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        assert case.get("classname") == "contract"
        marks = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcome, message = (marks[0].tag, marks[0].get("message", "")) if marks else ("passed", "")
        found[case.get("name", "")] = (outcome, message)
    return found


def contract_reports(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((pytester.path / "results").glob("*/contract.json"))]


def test_a_server_deduplicating_by_payload_fails_twins_and_a_correct_one_passes(
    pytester: pytest.Pytester,
) -> None:
    # The "done when": in an empty folder, no test file, one item per check.
    assert list(pytester.path.iterdir()) == []
    dedup = scenario(pytester, "dedup", "atomic", INVOICES_FLAW="payload_dedup")
    # -W error, as a project with filterwarnings = error: the harness's libraries' deprecations
    # (one where tiktoken loads bpe-openai) must not turn a check into an error.
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", dedup.name, "--junitxml", "dedup.xml", "-W", "error", "-p", "no:cacheprovider"
    )
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=5, failed=2, skipped=5)
    by_check = cases(pytester.path / "dedup.xml")
    assert {c for c, (outcome, _) in by_check.items() if outcome == "failure"} == {"twins", "key_reuse"}
    # The failure is the check's why and its evidence (the two effects the twins should have made).
    result.stdout.fnmatch_lines(
        [
            "*_ contract::twins _*",
            "identical payloads under two keys: two effects: *",
            "evidence:",
        ]
    )
    assert "identical payloads under two keys" in by_check["twins"][1]

    correct = scenario(pytester, "correct", "atomic")
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", correct.name, "--junitxml", "correct.xml", "-rs", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=7, skipped=5)
    by_check = cases(pytester.path / "correct.xml")
    assert list(by_check) == list(CHECKS)  # every check, in the contract's own order
    assert {c for c, (outcome, _) in by_check.items() if outcome == "skipped"} == NOT_APPLICABLE
    # A skip names its check and the reason, located at the scenario rather than in the plugin.
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] correct.yaml:1: crash_window does not apply: needs *"])
    result.stdout.fnmatch_lines(["*results/*-correct-*-contract/contract.md"])
    assert [len(r["checks"]) for r in contract_reports(pytester)] == [12, 12]


@pytest.mark.parametrize(
    ("mode", "failing"),
    [
        ("keyed", {"concurrent_same_key"}),
        ("naive", {"replay", "key_reuse", "concurrent_same_key", "restart_keeps_keys"}),
    ],
)
def test_the_reference_designs_fail_the_checks_they_should(
    pytester: pytest.Pytester, mode: str, failing: set[str]
) -> None:
    path = scenario(pytester, mode, mode)
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", path.name, "--mcp-chaos-only", KEY_CHECKS, "--junitxml", "j.xml"
    )
    assert result.ret == 1
    by_check = cases(pytester.path / "j.xml")
    assert list(by_check) == KEY_CHECKS.split(",")
    assert {c for c, (outcome, _) in by_check.items() if outcome == "failure"} == failing


def test_the_checks_share_one_target_and_deselected_ones_do_not_run(pytester: pytest.Pytester) -> None:
    path = scenario(pytester, "keyed", "keyed")
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", path.name, "-k", "replay or concurrent", "-v", "-p", "no:cacheprovider"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*collected 12 items / 10 deselected / 2 selected"])
    result.stdout.fnmatch_lines(["contract::replay PASSED*", "contract::concurrent_same_key FAILED*"])
    # One contract run (one directory, one pod start) for both items, of the two checks selected.
    (report,) = contract_reports(pytester)
    assert [c["id"] for c in report["checks"]] == ["replay", "concurrent_same_key"]
    (log,) = (pytester.path / "results").glob("*/pods/pod-0.log")
    assert log.read_text().count("--- pod-0: start #") == 1


def test_a_target_that_never_comes_up_is_an_error_of_each_item(pytester: pytest.Pytester) -> None:
    data = invoice_scenario()
    data["target"]["command"] = ["{python}", "-c", "print('no server here'); raise SystemExit(3)"]
    (pytester.path / "dead.yaml").write_text(yaml.safe_dump(data))
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", "dead.yaml", "--mcp-chaos-only", "replay,twins"
    )
    assert result.ret == 1
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of contract::replay*", "mcp-chaos: target pod pod-0 exited with code 3 before *"]
    )
    assert "Traceback" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()


def test_usage_errors_name_the_option(pytester: pytest.Pytester) -> None:
    path = scenario(pytester, "atomic", "atomic")
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", path.name, "--mcp-chaos-only", "twins,nope"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: mcp-chaos: unknown check nope; the checks are: replay, twins, *"])
    result = pytester.runpytest_subprocess("--mcp-chaos-contract", "missing.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: mcp-chaos: scenario file not found: *missing.yaml*"])
    result = pytester.runpytest_subprocess("--mcp-chaos-only", "twins")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_fixture_runs_scenarios_and_contracts_from_users_tests(pytester: pytest.Pytester) -> None:
    scenario(pytester, "naive", "naive", INVOICES_FAILPOINT="after_business_commit@3")
    scenario(pytester, "keyed", "keyed")
    pytester.makepyfile(
        test_users_server="""
        import pathlib

        import yaml
        from harness.history import Verdict
        from harness.contract import CheckVerdict

        def test_a_crash_after_the_commit_makes_a_duplicate(mcp_chaos):
            summary = mcp_chaos.run("naive.yaml", workload__intents=3)
            assert summary.verdicts[Verdict.DUPLICATE] == 1
            assert summary.verdicts[Verdict.EXACTLY_ONCE] == 2
            assert summary.rates[Verdict.DUPLICATE].count == 1
            assert summary.causes[Verdict.DUPLICATE] == {"crash": 1}
            assert summary.headline.kind == "duplicate"
            assert not summary.gate.passed

        def test_overrides_are_scenario_fields(mcp_chaos):
            summary = mcp_chaos.run("naive.yaml", target__env__INVOICES_MODE="atomic", preflight=False)
            assert summary.verdicts[Verdict.DUPLICATE] == 0
            assert summary.headline.kind == "exactly_once"

        def test_each_check_runs_once_per_session(mcp_chaos):
            first = mcp_chaos.contract("keyed.yaml", only="replay,concurrent_same_key")
            assert [(r.id, r.verdict) for r in first] == [
                ("replay", CheckVerdict.PASS), ("concurrent_same_key", CheckVerdict.FAIL)
            ]
            again = mcp_chaos.contract("keyed.yaml", only=["twins", "replay"])
            assert [r.id for r in again] == ["replay", "twins"]
            assert again[0] is first[0]

        def test_a_scenario_may_be_given_as_parsed_yaml(mcp_chaos):
            data = yaml.safe_load(pathlib.Path("keyed.yaml").read_text())
            (replay,) = mcp_chaos.contract(data, only="replay")
            assert replay.verdict is CheckVerdict.PASS
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)
    # Two runs (and their preflight), and three contract runs: the second of the one check not run
    # yet for the file, the third for the parsed YAML (another scenario, for all the plugin knows).
    results = pytester.path / "results"
    assert len([d for d in results.iterdir() if not d.name.endswith("-contract")]) == 2
    assert sorted([c["id"] for c in r["checks"]] for r in contract_reports(pytester)) == [
        ["replay"],
        ["replay", "concurrent_same_key"],
        ["twins"],
    ]


def test_the_plugin_does_nothing_unless_asked(pytester: pytest.Pytester) -> None:
    # Loaded by every pytest session of an environment that has mcp-chaos: it adds no item, no
    # directory and none of the harness's modules (they cost half a second) to a session that
    # uses neither its options nor its fixture.
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_nothing_of_the_harness_is_loaded(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("mcp_chaos")
            loaded = sorted(m for m in sys.modules if m.startswith("harness"))
            assert loaded == [  # and the exploration's option table (standard library only)
                "harness",
                "harness._version",
                "harness.crashpoints",
                "harness.crashpoints.options",
                "harness.errors",
                "harness.pytest_plugin",
            ]
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "results").exists()
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    for option in ("--mcp-chaos-contract=SCENARIO", "--mcp-chaos-only=CHECK,...", "--mcp-chaos-results=DIR"):
        assert option in help_text
    for option in (
        "--mcp-chaos-repeat=R",
        "--mcp-chaos-budget=SECONDS",
        "--mcp-chaos-power-loss",
        "--mcp-chaos-jobs=N",
    ):
        assert option in help_text  # crash_points: the options of crashpoints and contract


def test_crash_points_passes_a_correct_server_with_the_default_options(pytester: pytest.Pytester) -> None:
    """A SQLite store made durable at each commit (synchronous=EXTRA): 19 file operations a call, each
    crashed as a kill and as a power loss, as crashpoints does by default. The item was an error, "8 of
    19 points covered", on a server with nothing wrong."""
    data = notes_scenario({"NOTES_SQLITE_SYNC": "extra"}, sqlite=True)
    (pytester.path / "notes.yaml").write_text(yaml.safe_dump(data))
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", "notes.yaml", "--mcp-chaos-only", "crash_points", "-p", "no:cacheprovider"
    )
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    (report,) = contract_reports(pytester)
    (check,) = report["checks"]
    assert check["evidence"]["coverage"].endswith("distinct states"), check["evidence"]
    refused = pytester.runpytest_subprocess("--mcp-chaos-contract", "notes.yaml", "--mcp-chaos-repeat", "0")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        ["ERROR: mcp-chaos: --mcp-chaos-repeat '0': give the tries per crash state*"]
    )


def test_a_server_echoing_its_token_leaks_it_nowhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #22's server: its token in every field and encoding, with ESC sequences and markup. The
    # items' failures, skips and errors, the JUnit file pytest writes and the contract's reports hide
    # it; handles is deselected as it would wait for the server's handle to expire.
    from tests.integration.test_leaks import ENV, assert_nothing_leaked, leaky, token_forms

    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    (pytester.path / "leaky.yaml").write_text(yaml.safe_dump(leaky()))
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract", "leaky.yaml", "-k", "not handles", "-rA", "--junitxml", "out/leaky.xml"
    )
    assert result.ret == 1, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) > 0
    written = assert_nothing_leaked(pytester.path / "results", result.stdout.str(), result.stderr.str())
    assert any(path.name == "contract.md" for path in written)
    junit = (pytester.path / "out" / "leaky.xml").read_text(encoding="utf-8")
    for form in token_forms():
        assert form not in junit
    ET.fromstring(junit)


@pytest.mark.postgres
def test_concurrent_same_key_fails_as_an_item_with_the_races_finding_and_its_reproduce_line(
    pytester: pytest.Pytester, postgres_server: None
) -> None:
    """The pooled keyed target on the harness's PostgreSQL: the check runs the races, and the item fails
    with the ordering and the line that tries it alone, as crash_points' items carry its findings."""
    data = pgclients_scenario("keyed", PGCLIENTS_POOL="2")
    (pytester.path / "pooled.yaml").write_text(yaml.safe_dump(data))
    result = pytester.runpytest_subprocess(
        "--mcp-chaos-contract",
        "pooled.yaml",
        "--mcp-chaos-only",
        "concurrent_same_key",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*races: retry sent at *of the original gave duplicate (2 effects)*", '*"method": "races"*']
    )
    assert "reproduce with: mcp-chaos races SCENARIO --only original:" in result.stdout.str()
