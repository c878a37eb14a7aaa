"""Trace context (``client.trace``): the ids, where a request carries them, where a run's files name them."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.client.framing import Framing
from harness.errors import ScenarioError, UsageError
from harness.otlp import collector_url
from harness.report.files import write_audit
from harness.report.stories import story_lines
from harness.scenario import Scenario, parse_scenario
from harness.tracecontext import ROOT_SPAN, span_id, trace_id, traceparent
from tests.unit.histories import History, audit

TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01")


def test_an_intent_is_one_trace_and_each_attempt_one_span_of_it() -> None:
    trace = trace_id("run1", 7)
    assert trace == trace_id("run1", 7)  # derived, not drawn: the same run names the same ids
    assert len({trace, trace_id("run1", 8), trace_id("run2", 7)}) == 3
    spans = [span_id(trace, n) for n in (ROOT_SPAN, 1, 2, 3)]
    assert len(set(spans)) == 4
    assert span_id(trace_id("run1", 8), 1) not in spans
    assert TRACEPARENT.fullmatch(traceparent(trace, spans[1]))
    assert trace != "0" * 32
    assert "0" * 16 not in spans


def parts(raw: bytes) -> tuple[dict[bytes, bytes], dict[str, Any]]:
    head, body = raw.split(b"\r\n\r\n", 1)
    return dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:]), orjson.loads(body) if body else {}


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25", "2025-03-26"])
def test_a_traced_request_carries_traceparent_in_its_head_and_its_meta(version: str) -> None:
    framing = Framing("127.0.0.1", 9, "/mcp", key_meta="idem")
    context = traceparent(trace_id("ns", 0), span_id(trace_id("ns", 0), 1))
    raw = framing.request(
        "tools/call", {"name": "t"}, 5, version=version, session=None, key="k", traceparent=context
    )
    headers, body = parts(raw)
    assert headers[b"traceparent"] == context.encode()
    assert body["params"]["_meta"]["traceparent"] == context
    assert body["params"]["_meta"]["idem"] == "k"  # beside the key, not instead of it
    untraced_headers, untraced = parts(
        framing.request("tools/call", {"name": "t"}, 5, version=version, session=None)
    )
    assert b"traceparent" not in untraced_headers
    assert "traceparent" not in untraced["params"].get("_meta", {})
    # Resuming a broken stream is part of the same attempt.
    resumed, _ = parts(framing.resume("ev-1", version="2025-11-25", session="s", traceparent=context))
    assert resumed[b"traceparent"] == context.encode()


def test_client_trace_is_typed(scenario_data: dict[str, Any]) -> None:
    def client(**policy: Any) -> dict[str, Any]:
        return {**scenario_data, "client": {**scenario_data.get("client", {}), **policy}}

    assert parse_scenario(client(trace=True)).client.trace is True
    assert parse_scenario(scenario_data).client.trace is False
    with pytest.raises(ScenarioError, match=r"client\.trace"):
        parse_scenario(client(trace=[1]))


def traced(h: History, intent: int, attempt: int, **fields: Any) -> int:
    """An attempt as the driver writes it with ``client.trace``."""
    trace = trace_id("ns", intent)
    link = {"link": span_id(trace, 1)} if attempt > 1 else {}
    rid = h.next_id
    h.next_id += 1
    h.add(
        "attempt_started",
        intent=intent,
        attempt=attempt,
        id=rid,
        key=f"k{intent}",
        trace_id=trace,
        span_id=span_id(trace, attempt),
        **link,
        **fields,
    )
    return rid


@pytest.fixture
def scenario(scenario_data: dict[str, Any]) -> Scenario:
    return parse_scenario({**scenario_data, "faults": {}})


def test_a_duplicate_names_its_trace_and_both_attempts_spans(scenario: Scenario, tmp_path: Path) -> None:
    h = History(intents=2)
    h.start(0)
    h.end(0, traced(h, 0, 1))
    h.finish(0)
    h.start(1)
    first = traced(h, 1, 1)
    h.fault("kill")
    h.end(1, first, "transport_error", "closed_before_response")
    h.tick()
    again = traced(h, 1, 2)
    h.end(1, again, attempt=2, reply="Created")
    h.finish(1, attempts=2)
    result = audit(h, {"ns-m0": 1, "ns-m1": 2}, scenario, run_dir=tmp_path)
    (found,) = result.summary.classes
    story = found.stories[0]
    trace = trace_id("ns", 1)
    assert story.trace_id == trace
    assert [s.span_id for s in story.steps] == [span_id(trace, 1), span_id(trace, 2)]
    lines = story_lines(story)
    assert f"trace {trace}" in lines[0]
    assert f"span {span_id(trace, 1)}" in lines[1]
    assert f"span {span_id(trace, 2)}" in lines[2]
    write_audit(result, html=False)
    with (tmp_path / "intents.csv").open(encoding="utf-8") as f:
        rows = {int(r["intent"]): r["trace_id"] for r in csv.DictReader(f)}
    assert rows == {0: trace_id("ns", 0), 1: trace}
    assert trace in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_an_untraced_run_has_no_trace_column(scenario: Scenario) -> None:
    h = History(intents=1)
    h.run_intent(0)
    assert "trace_id" not in audit(h, {"ns-m0": 1}, scenario).intents.columns


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
        ("http://[::1]:4318/otlp/v1/traces", "http://[::1]:4318/otlp/v1/traces"),
        ("http://127.0.0.2:4318/x", "http://127.0.0.2:4318/x"),
    ],
)
def test_export_otlp_sends_to_a_collector_on_this_machine(endpoint: str, url: str) -> None:
    assert collector_url(endpoint) == url


@pytest.mark.parametrize(
    "endpoint",
    ["http://0.0.0.0:4318", "http://collector.example", "http://localhost.example:4318", "ftp://[::1]"],
)
def test_export_otlp_refuses_any_other_host(endpoint: str) -> None:
    with pytest.raises(UsageError) as refused:
        collector_url(endpoint)
    assert "\n" not in refused.value.message
