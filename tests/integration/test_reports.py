"""report.html and the comparison page, from real runs: self-contained, and showing what happened."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.auditing import audit_and_report
from harness.history import FaultKind
from harness.report.compare import Counts, render_comparison_html
from harness.report.html import recovery, timeline_of
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]


def test_a_run_report_is_self_contained_and_marks_every_kill(run: Run) -> None:
    data = invoice_scenario(mode="naive", intents=400, concurrency=8, kills={"count": 3, "min_uptime_s": 0.3})
    data["target"]["env"].update(INVOICES_PRE_COMMIT_MS="10", INVOICES_POST_COMMIT_MS="10")
    result = run(data)
    audited = audit_and_report(result.run_dir)
    page = (result.run_dir / "report.html").read_text()
    assert re.findall(r'(?:src|href)="(https?:)', page) == []  # nothing fetched from a network
    assert page.count('src="data:image/png;base64,') == 4  # timeline, rates, faults, attempts
    headline = page.index('<p class="headline">')
    assert page[headline:].startswith(
        f'<p class="headline">{html.escape(audited.summary.headline.sentence)}</p>'
    )
    assert headline < page.index("<h2>Timeline</h2>")

    timeline = timeline_of(audited.pod_events)
    kills = [t for t, kind in timeline.faults if kind == "kill"]
    assert len(kills) == result.summary.injected(FaultKind.KILL) == 3
    assert len(timeline.down) == 3  # down from each kill until ready again
    rows = recovery(result.intents, timeline)
    assert [r["at"] for r in rows] == kills
    for row in rows:
        assert row["ready_after"] > 0
        assert row["recovered_after"] is not None
        assert row["recovered_after"] >= row["ready_after"]


def test_the_comparison_page(tmp_path: Path) -> None:
    runs = [Counts("naive", 37, 2700), Counts("keyed", 1, 2108), Counts("atomic", 0, 2700)]
    page = render_comparison_html("Reproduction", runs, [(0, 1), (1, 2)], ["a/report.html"])
    assert page.count('src="data:image/png;base64,') == 1
    assert "naive vs keyed" in page
    assert "keyed vs atomic" in page
    assert '<a href="a/report.html">' in page
