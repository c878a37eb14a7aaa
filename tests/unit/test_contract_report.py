"""What a contract run leaves for people and CI when a check could not finish: an error, not a pass."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.contract import CheckResult, CheckVerdict
from harness.contract.report import all_kept, as_json, junit, render_markdown, summary_line

RESULTS = [
    CheckResult("replay", "the same key twice", CheckVerdict.PASS, "one effect"),
    CheckResult("twins", "two keys", CheckVerdict.NOT_APPLICABLE, "no key travels"),
    CheckResult("crash_window", "a crash", CheckVerdict.ERROR, "the check could not finish: no pod"),
]


def test_a_check_that_could_not_finish_fails_the_contract_and_is_said_apart() -> None:
    assert not all_kept(RESULTS)
    assert all_kept(RESULTS[:2])
    assert summary_line(RESULTS, 1.0) == (
        "contract: 1 passed, 0 failed, 1 not applicable, 1 could not finish, in 1.0s"
    )
    assert as_json(RESULTS, scenario="s", seconds=1.0)["passed"] is False
    assert "## crash_window: ERROR" in render_markdown(RESULTS, scenario="s", seconds=1.0)


def test_junit_reports_it_as_an_error() -> None:
    suite = ET.fromstring(junit(RESULTS, scenario="s", seconds=1.0)).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "3",
        "0",
        "1",
        "1",
    )
    error = suite.find("testcase[@name='crash_window']/error")
    assert error is not None
    assert error.get("message") == "the check could not finish: no pod"
