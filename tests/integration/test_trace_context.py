"""Trace context through a whole run: the server saw the trace and span ids the report names.

A naive reference target SIGKILLs itself right after the 2nd invoice's commit
(a failpoint, so the duplicate is certain), the driver retries intent 1, and the
retry commits again. The target logs every call's ``traceparent`` on stderr (its
pod log), as a server's tracer would record it: the duplicate's story must name
the trace and the spans of both attempts that reached it, and the pod log must
hold both.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from harness.audit.auditor import AuditResult
from harness.audit.stories import Story
from harness.errors import ExportError
from harness.history import Verdict, read_history
from harness.otlp import export_endpoint
from harness.report.stories import story_lines
from harness.tracecontext import span_id, trace_id, traceparent
from tests.helpers.cli import mcp_chaos
from tests.helpers.scenarios import invoice_scenario, run_scenario

Run = Callable[[dict[str, Any]], AuditResult]


def traced_crash(**env: str) -> dict[str, Any]:
    data = invoice_scenario(mode="naive", env={"INVOICES_FAILPOINT": "after_business_commit@3", **env})
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


# export-otlp: the same run as OTLP spans, read back from a file and from a collector's requests.


def by_span(resource_spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Span id -> span, with its attributes as a plain mapping, from OTLP JSON."""
    found = {}
    for rs in resource_spans:
        for scope in rs["scopeSpans"]:
            for span in scope["spans"]:
                attributes = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                found[span["spanId"]] = {**span, "attributes": attributes}
    return found


def check_duplicate_spans(result: AuditResult, spans: dict[str, dict[str, Any]]) -> None:
    story = duplicate_story(result)
    trace = trace_id(namespace(result), story.intent)
    root = spans[span_id(trace, 0)]
    assert root["traceId"] == trace
    assert "parentSpanId" not in root or not root["parentSpanId"]
    assert root["attributes"]["mcp_chaos.verdict"] == "duplicate"
    assert root["attributes"]["mcp_chaos.cause"] == "crash"
    assert root["attributes"]["mcp_chaos.intent.marker"] == story.marker
    crashed, succeeded = served_attempts(story)
    for step in story.steps:
        span = spans[str(step.span_id)]
        assert span["traceId"] == trace
        assert span["parentSpanId"] == span_id(trace, 0)
        assert span["attributes"]["mcp_chaos.attempt"] in (step.attempt, str(step.attempt))
        assert span["attributes"]["jsonrpc.request.id"] == str(step.request_id)
        assert span["attributes"]["mcp_chaos.outcome"] == step.outcome
    assert [link["spanId"] for link in spans[succeeded].get("links", [])] == [crashed]
    assert int(spans[crashed]["startTimeUnixNano"]) < int(spans[succeeded]["startTimeUnixNano"])
    # One root per intent, and every attempt of the run under one.
    roots = [s for s in spans.values() if not s.get("parentSpanId")]
    assert len(roots) == 3
    assert len(spans) == 3 + int(result.intents["attempts"].sum())


@pytest.mark.integration
def test_export_otlp_writes_otlp_json_lines(traced_run: AuditResult, tmp_path: Path) -> None:
    out = tmp_path / "spans.jsonl"
    done = mcp_chaos("export-otlp", traced_run.run_dir, "--file", out)
    assert done.returncode == 0, done.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    requests = [json.loads(line) for line in lines]
    spans = by_span([rs for r in requests for rs in r["resourceSpans"]])
    check_duplicate_spans(traced_run, spans)
    assert f"exported {len(spans)} spans of 3 intents" in done.stdout
    # The old spelling of `export --format otlp`: it still works, and says what it is now.
    assert (
        done.stderr == "export-otlp is now `mcp-chaos export --format otlp`; the old spelling keeps working\n"
    )


@pytest.mark.integration
def test_export_otlp_sends_protobuf_to_a_local_collector(traced_run: AuditResult) -> None:
    with Collector() as collector:
        done = mcp_chaos(
            "export",
            traced_run.run_dir,
            "--format",
            "otlp",
            "--endpoint",
            f"http://127.0.0.1:{collector.port}",
        )
    assert done.returncode == 0, done.stderr
    assert collector.paths == ["/v1/traces"]
    spans = by_span(
        [
            rs
            for body in collector.bodies
            for rs in MessageToDict(ExportTraceServiceRequest.FromString(body))["resourceSpans"]
        ]
    )
    # protobuf's own JSON mapping writes ids in base64: the same ids, read as OTLP JSON writes them.
    check_duplicate_spans(traced_run, {_hex(k): _hexed(v) for k, v in spans.items()})


@pytest.mark.integration
def test_export_otlp_sends_nowhere_but_this_machine(traced_run: AuditResult) -> None:
    done = mcp_chaos(
        "export", traced_run.run_dir, "--format", "otlp", "--endpoint", "http://collector.example:4318"
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "not this machine" in done.stderr
    with Collector(status=400) as collector:  # a refusal, not a transient error to retry
        refused = mcp_chaos(
            "export",
            traced_run.run_dir,
            "--format",
            "otlp",
            "--endpoint",
            f"http://localhost:{collector.port}/x",
        )
    assert refused.returncode == 5
    assert "did not take the spans" in refused.stderr
    assert collector.paths[0] == "/x"


@pytest.mark.integration
def test_a_collector_that_trickles_or_redirects_is_no_export(traced_run: AuditResult) -> None:
    """Trickled a byte every 0.3 s, the 10 s read timeout never fired and the command waited for ever;
    a 307 was counted as the spans taken."""
    with Collector(trickle_s=0.3) as collector:
        started = time.monotonic()
        with pytest.raises(ExportError, match=r"did not answer within 2s \(after 0 spans sent\)"):
            export_endpoint(traced_run.run_dir, f"http://127.0.0.1:{collector.port}", timeout_s=1.0)
        assert time.monotonic() - started < 6
    with Collector(status=307) as collector:
        moved = mcp_chaos(
            "export",
            traced_run.run_dir,
            "--format",
            "otlp",
            "--endpoint",
            f"http://127.0.0.1:{collector.port}",
        )
    assert moved.returncode == 5, moved.stdout
    assert moved.stderr.count("\n") == 1
    assert "answered 307 (a redirect), not the spans taken" in moved.stderr


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()


def _hexed(span: dict[str, Any]) -> dict[str, Any]:
    ids = {k: _hex(span[k]) for k in ("traceId", "spanId", "parentSpanId") if span.get(k)}
    links = [{**link, "spanId": _hex(link["spanId"])} for link in span.get("links", [])]
    return {**span, **ids, "links": links}


class Collector:
    """A tiny OTLP/HTTP receiver on 127.0.0.1: keeps each request's path and body, answers ``status``."""

    def __init__(self, status: int = 200, *, trickle_s: float | None = None) -> None:
        self.paths: list[str] = []
        self.bodies: list[bytes] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                collector.bodies.append(body)
                if trickle_s is not None:  # a byte of a status line at a time, never a whole head
                    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 40:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(trickle_s)
                    return
                self.send_response(status)
                if status in (301, 302, 307, 308):
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
