"""Trace context through a whole run: the server saw the trace and span ids the report names.

A naive reference target SIGKILLs itself right after the 2nd invoice's commit
(a failpoint, so the duplicate is certain), the driver retries intent 1, and the
retry commits again. The target logs every call's ``traceparent`` on stderr (its
pod log), as a server's tracer would record it: the duplicate's story must name
the trace and the spans of both attempts that reached it, and the pod log must
hold both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import AuditResult
from harness.audit.stories import Story
from harness.history import Verdict, read_history
from harness.report.stories import story_lines
from harness.tracecontext import span_id, trace_id, traceparent
from tests.conftest import invoice_scenario, run_scenario

Run = Callable[[dict[str, Any]], AuditResult]


def traced_crash(**env: str) -> dict[str, Any]:
    data = invoice_scenario(mode="naive", env={"INVOICES_FAILPOINT": "after_business_commit@2", **env})
    data["client"]["trace"] = True
    return data


def namespace(result: AuditResult) -> str:
    run_started = next(read_history(result.run_dir / "history.jsonl"))
    return str(run_started["namespace"])


def duplicate_story(result: AuditResult) -> Story:
    (found,) = [c for c in result.summary.classes if c.verdict is Verdict.DUPLICATE]
    (story,) = found.stories
    return story


def served_attempts(story: Story) -> tuple[str, str]:
    """The spans of the attempt the crash broke (it had committed) and of the retry that succeeded."""
    crashed, *_, succeeded = story.steps
    assert crashed.faults
    assert crashed.outcome == "transport_error"
    assert succeeded.outcome == "ok"
    assert crashed.span_id is not None
    assert succeeded.span_id is not None
    return crashed.span_id, succeeded.span_id


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    return run_scenario(traced_crash(), tmp_path_factory.mktemp("traced") / "results")


@pytest.mark.integration
def test_a_duplicates_story_names_the_traces_the_server_logged(traced_run: AuditResult) -> None:
    result = traced_run
    assert result.summary.verdicts[Verdict.DUPLICATE] == 1
    story = duplicate_story(result)
    trace = trace_id(namespace(result), story.intent)
    assert story.trace_id == trace
    crashed, succeeded = served_attempts(story)
    assert (crashed, succeeded) == (span_id(trace, 1), span_id(trace, len(story.steps)))
    told = "\n".join(story_lines(story))
    assert f"trace {trace}" in told
    assert f"span {crashed}" in told
    assert f"span {succeeded}" in told
    assert f"trace {trace}" in (result.run_dir / "report.md").read_text(encoding="utf-8")
    # The server's own record: both attempts that reached it, under their spans, in the one trace.
    log = (result.run_dir / "pods" / "pod-0.log").read_text(encoding="utf-8")
    assert f"traceparent={traceparent(trace, crashed)}" in log
    assert f"traceparent={traceparent(trace, succeeded)}" in log
    rows = result.intents.set_index("intent")
    assert rows.loc[story.intent, "trace_id"] == trace


@pytest.mark.integration
def test_over_stdio_the_trace_travels_in_meta(tmp_path: Path) -> None:
    data = traced_crash(INVOICES_TRANSPORT="stdio")
    data["target"]["transport"] = "stdio"
    result = run_scenario(data, tmp_path / "results")
    story = duplicate_story(result)
    crashed, succeeded = served_attempts(story)
    log = (result.run_dir / "pods" / "pod-0.log").read_text(encoding="utf-8")
    assert story.trace_id is not None
    assert f"traceparent={traceparent(story.trace_id, crashed)}" in log
    assert f"traceparent={traceparent(story.trace_id, succeeded)}" in log
