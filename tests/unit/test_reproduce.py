"""The reproduction table: pooling, and the comparison with the article's figures."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.audit.stats import Rate
from harness.errors import UsageError
from harness.reproduce import TITLE, VariantResult, article_inside, plan, render, table, write_reports
from harness.scenario import parse_scenario
from tests.unit.histories import History, audit


def run_with(scenario_data: dict[str, Any], duplicates: int, intents: int, kills: int = 8) -> AuditResult:
    """The audit of a synthetic run: ``intents`` intents, the first ``duplicates`` of them twice."""
    h = History(intents=intents)
    for _ in range(kills):
        h.add("fault", fault="kill", pod="pod-0", pid=1, counted=True)
        h.add("pod_started", pod="pod-0", pid=2)
    for i in range(intents):
        h.run_intent(i)
    effects = {f"ns-m{i}": 2 if i < duplicates else 1 for i in range(intents)}
    return audit(h, effects, parse_scenario(scenario_data))


def test_runs_are_pooled(scenario_data: dict[str, Any]) -> None:
    v = VariantResult("naive", [run_with(scenario_data, 30, 2700), run_with(scenario_data, 40, 2700)])
    assert (v.duplicates, v.intents, v.kills) == (70, 5400, 16)
    table = render([v])
    assert "| naive   |    2 |    16 |  30, 40 |   70/5,400 | 1.30% |" in table
    assert "37/2,700 = 1.37%" in table


def test_article_inside() -> None:
    assert article_inside("naive", Rate(37, 2700)) == "yes"
    assert article_inside("naive", Rate(5, 2700)) == "no"
    assert article_inside("keyed", Rate(1, 2700)) == "yes"
    assert article_inside("atomic", Rate(0, 2700)) == "yes"
    assert article_inside("atomic", Rate(1, 2700)) == "no"


@pytest.mark.parametrize(
    ("modes", "runs", "error"),
    [
        (["naive", "sloppy"], 1, "--modes must list some of naive, keyed, atomic; got 'naive,sloppy'"),
        ([], 1, "--modes must list some of"),
        (["naive"], 0, "--runs must be at least 1, got 0"),
    ],
)
def test_a_plan_the_target_cannot_run_is_refused_before_loading(
    tmp_path: Path, modes: list[str], runs: int, error: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(error)):
        plan(tmp_path / "missing.yaml", modes, runs, [])


def test_the_reports_are_the_table_and_a_page_linking_each_run(
    tmp_path: Path, scenario_data: dict[str, Any]
) -> None:
    variants = [
        VariantResult("naive", [run_with(scenario_data, 30, 2700)]),
        VariantResult("atomic", [run_with(scenario_data, 0, 2700)]),
    ]
    saved = write_reports(tmp_path, variants, 12.4)
    assert saved.parent == tmp_path
    assert saved.name.startswith("reproduce-")
    text = saved.read_text()
    assert text.startswith(f"# {TITLE}\n\n{table(variants)}\n\n")
    assert "| naive vs atomic |" in text
    assert text.endswith("Runs: run, run\nWall time: 12s\n")
    page = saved.with_suffix(".html").read_text()
    assert page.count('src="data:image/png;base64,') == 1
    assert page.count('<a href="run/report.html">') == 2
