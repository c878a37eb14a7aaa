"""``mcp-chaos export --format otlp``: a run's intents and attempts as OpenTelemetry spans, to a collector
or a file.

Each intent is a trace: its root span lasts from ``intent_started`` to
``intent_ended`` and carries what the auditor judged (verdict, cause, effects);
each attempt is a client span under it, with its request id, key and outcome,
and a retry links to the intent's first attempt. The ids are those
:mod:`harness.tracecontext` derives, so the spans of a ``client.trace`` run are
the parents of the server's own spans of each attempt, and a trace backend shows
both sides of a duplicate in one trace. A run made without ``client.trace``
exports the same ids: they depend only on the run and the intent.

The spans are the OpenTelemetry SDK's own (``ReadableSpan``), sent by its OTLP
exporter (HTTP, protobuf) or written as OTLP JSON lines, one
``ExportTraceServiceRequest`` per line with hex ids, as the collector's file
exporter writes them. The history is read once, in order, and spans go out in
batches as intents end, so memory is bounded by the intents in flight, not by
the run. Times are the history's, from its ``epoch_s`` (its ``started_at``,
to the second, in a history from before it).

Only a collector on this machine is accepted: a run's keys and markers are the
user's business data, and sending them elsewhere is a decision to make in a
collector's configuration, not by a typo in a URL.
"""

from __future__ import annotations

import base64
import datetime as dt
import errno
import ipaddress
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import requests
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness import rundir
from harness._version import __version__
from harness.audit.auditor import audit_run
from harness.errors import ExportError, UsageError
from harness.history import EventType, Outcome, Verdict, read_batches
from harness.sanitize import json_safe
from harness.tracecontext import ROOT_SPAN, span_id, trace_id

BATCH = 512
"""Spans per OTLP request (and per line of a file): the SDK's batch processor's default."""
LOOPBACK_NAMES = frozenset({"localhost"})
TRACES_PATH = "/v1/traces"
_SCOPE = InstrumentationScope("mcp-chaos", __version__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_HEX_IDS = frozenset({"traceId", "spanId", "parentSpanId"})


def collector_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector on this machine (``/v1/traces`` when no path is given);
    a UsageError for any other host."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--endpoint must be an http:// URL of an OTLP collector, got {endpoint!r}")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() in LOOPBACK_NAMES
    if not loopback:
        raise UsageError(
            f"--endpoint {host} is not this machine: export --format otlp sends only to a collector on "
            "127.0.0.1, ::1 or localhost (run one there that forwards, or use --file)"
        )
    path = parts.path if parts.path not in ("", "/") else TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass
class _Intent:
    """What the history has said of one intent so far."""

    index: int
    start_ns: int
    marker: str
    key: str
    attempts: dict[Any, dict[str, Any]] = field(default_factory=dict)
    """Request id -> its attempt (start, and once ended its outcome), in the order they started."""


@dataclass
class Export:
    """What was exported: spans and traces (intents)."""

    spans: int = 0
    traces: int = 0

    def add(self, batch: list[ReadableSpan]) -> None:
        self.spans += len(batch)
        self.traces += sum(1 for span in batch if span.parent is None)


class _Spans:
    """Turns history events into the SDK's spans, intent by intent."""

    def __init__(self, run: Mapping[str, Any], verdicts: Mapping[int, Mapping[str, Any]], tool: str) -> None:
        self.namespace = str(run.get("namespace", ""))
        self.epoch_ns = _epoch_ns(run)
        self.verdicts = verdicts
        self.tool = tool
        # Not Resource.create(): no random instance id, nothing read from the environment, so one
        # run directory always exports the same spans.
        self.resource = Resource(
            {
                "service.name": "mcp-chaos",
                "service.version": __version__,
                "mcp_chaos.run_id": str(run.get("run_id", "")),
                "mcp_chaos.scenario": str(run.get("scenario", "")),
            }
        )
        self.open: dict[int, _Intent] = {}
        self.by_request: dict[Any, _Intent] = {}
        self.last_ns = self.epoch_ns

    def ns(self, t: float) -> int:
        return self.epoch_ns + round(t * 1e9)

    def feed(self, ev: Mapping[str, Any]) -> list[ReadableSpan]:
        """The spans this event completes (an ended intent's), usually none."""
        typ = ev.get("type")
        if "t" in ev:
            self.last_ns = max(self.last_ns, self.ns(ev["t"]))
        if typ == EventType.INTENT_STARTED:
            i = ev["intent"]
            self.open[i] = _Intent(i, self.ns(ev["t"]), str(ev.get("marker", "")), str(ev.get("key", "")))
        elif typ == EventType.ATTEMPT_STARTED and ev.get("intent") in self.open:
            intent = self.open[ev["intent"]]
            intent.attempts[ev["id"]] = dict(ev, start_ns=self.ns(ev["t"]))
            self.by_request[ev["id"]] = intent
        elif typ == EventType.ATTEMPT_ENDED and ev.get("id") in self.by_request:
            attempt = self.by_request.pop(ev["id"]).attempts[ev["id"]]
            attempt.update(end_ns=self.ns(ev["t"]), outcome=ev.get("outcome"), detail=ev.get("detail"))
        elif typ == EventType.INTENT_ENDED and ev.get("intent") in self.open:
            return self.spans(self.open.pop(ev["intent"]), self.ns(ev["t"]), str(ev.get("status", "")))
        return []

    def unfinished(self) -> Iterator[ReadableSpan]:
        """The intents the run stopped in, ended where the history ends."""
        for intent in list(self.open.values()):
            yield from self.spans(intent, self.last_ns, "unfinished")
        self.open.clear()

    def spans(self, intent: _Intent, end_ns: int, status: str) -> list[ReadableSpan]:
        trace = trace_id(self.namespace, intent.index)
        root = self._context(trace, span_id(trace, ROOT_SPAN))
        judged = self.verdicts.get(intent.index, {})
        verdict = str(judged.get("verdict", ""))
        attributes: dict[str, str | int] = {
            "mcp_chaos.intent.index": intent.index,
            "mcp_chaos.intent.marker": intent.marker,
            "mcp_chaos.intent.key": intent.key,
            "mcp_chaos.client_status": status,
            "mcp_chaos.verdict": verdict,
        }
        if judged.get("cause"):
            attributes["mcp_chaos.cause"] = str(judged["cause"])
        if "effects" in judged:
            attributes["mcp_chaos.effects"] = int(judged["effects"])
        finding = verdict not in ("", Verdict.EXACTLY_ONCE.value)
        spans = [
            ReadableSpan(
                name=f"intent {self.tool}",
                context=root,
                resource=self.resource,
                attributes=attributes,
                kind=SpanKind.INTERNAL,
                status=Status(StatusCode.ERROR, f"{verdict} ({judged.get('cause')})")
                if finding
                else Status(StatusCode.UNSET),
                start_time=intent.start_ns,
                end_time=max(end_ns, intent.start_ns),
                instrumentation_scope=_SCOPE,
            )
        ]
        first: SpanContext | None = None
        for request_id, attempt in intent.attempts.items():
            number = int(attempt.get("attempt", 0))
            context = self._context(trace, str(attempt.get("span_id") or span_id(trace, number)))
            outcome = attempt.get("outcome")
            attrs: dict[str, str | int] = {
                "mcp.method.name": "tools/call",
                "gen_ai.tool.name": self.tool,
                "jsonrpc.request.id": str(request_id),
                "mcp_chaos.intent.index": intent.index,
                "mcp_chaos.attempt": number,
                "mcp_chaos.intent.key": str(attempt.get("key", "")),
                "mcp_chaos.outcome": str(outcome or "never_ended"),
            }
            for name in ("detail", "pod"):
                if attempt.get(name) is not None:
                    attrs[f"mcp_chaos.{name}"] = str(attempt[name])
            failed = outcome != Outcome.OK.value
            spans.append(
                ReadableSpan(
                    name=f"tools/call {self.tool}",
                    context=context,
                    parent=root,
                    resource=self.resource,
                    attributes=attrs,
                    links=() if first is None else (Link(first),),
                    kind=SpanKind.CLIENT,
                    status=Status(StatusCode.ERROR, str(outcome or "never ended"))
                    if failed
                    else Status(StatusCode.UNSET),
                    start_time=attempt["start_ns"],
                    end_time=max(attempt.get("end_ns", end_ns), attempt["start_ns"]),
                    instrumentation_scope=_SCOPE,
                )
            )
            first = first or context
        return spans

    @staticmethod
    def _context(trace: str, span: str) -> SpanContext:
        return SpanContext(int(trace, 16), int(span, 16), is_remote=False, trace_flags=_SAMPLED)


def _epoch_ns(run: Mapping[str, Any]) -> int:
    """The wall clock at the history's t = 0, in Unix nanoseconds."""
    if "epoch_s" in run:
        return round(float(run["epoch_s"]) * 1e9)
    try:
        started = dt.datetime.fromisoformat(str(run.get("started_at")))
    except ValueError:
        return 0
    return round(started.timestamp() * 1e9)


def _batches(run_dir: Path) -> Iterator[list[ReadableSpan]]:
    """The run's spans, intent by intent, in batches of about :data:`BATCH`."""
    audit = audit_run(run_dir)
    columns = [c for c in ("intent", "verdict", "cause", "effects") if c in audit.intents.columns]
    verdicts = {
        int(row["intent"]): {str(k): v for k, v in row.items()}
        for row in audit.intents[columns].to_dict("records")
    }
    spans: _Spans | None = None
    batch: list[ReadableSpan] = []
    for events in read_batches(run_dir / rundir.HISTORY):
        for ev in events:
            if spans is None:
                if ev.get("type") != EventType.RUN_STARTED:
                    continue
                spans = _Spans(ev, verdicts, audit.scenario.workload.tool)
                continue
            batch += spans.feed(ev)
            if len(batch) >= BATCH:
                yield batch
                batch = []
    if spans is not None:
        batch += spans.unfinished()
    if batch:
        yield batch


def _hex_ids(value: Any) -> Any:
    """OTLP JSON writes trace and span ids as hex, where protobuf's JSON mapping writes base64."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _HEX_IDS and isinstance(v, str) else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(spans: list[ReadableSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` in OTLP JSON (hex ids, enums as integers), one line."""
    message = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    return orjson.dumps(json_safe(_hex_ids(message))) + b"\n"


def export_file(run_dir: Path, path: Path) -> Export:
    """The run's spans as OTLP JSON lines in ``path`` (replaced); ExportError if it does not take them
    (a full disk, a device that refuses writes)."""
    done = Export()
    try:
        out = path.open("wb", buffering=0)  # unbuffered: nothing is left to fail in close()
    except OSError as exc:
        raise _unwritable(path, exc) from None
    with out:
        for batch in _batches(run_dir):
            line = memoryview(otlp_json(batch))
            try:
                while line:
                    written = out.write(line)
                    if not written:  # a non-blocking file that takes no more
                        raise OSError(errno.EAGAIN, "it takes no more")
                    line = line[written:]
            except OSError as exc:
                raise _unwritable(path, exc) from None
            done.add(batch)
    return done


def _unwritable(path: Path, exc: OSError) -> ExportError:
    return ExportError(f"cannot write the spans to {path}: {exc.strerror or exc}")


def export_endpoint(run_dir: Path, endpoint: str, *, timeout_s: float = 10.0) -> Export:
    """The run's spans sent to an OTLP/HTTP collector on this machine (protobuf).

    Each batch's whole exchange (connect, headers, body, the exporter's own retries) must end within
    ``timeout_s`` plus a second: the exporter's timeout bounds each read, so a collector that trickles
    a byte at a time would hold it for ever. A redirect is not a collector taking the spans."""
    url = collector_url(endpoint)
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment must not carry loopback traffic away
    redirected: list[int] = []
    session.hooks["response"].append(
        lambda r, *_, **__: redirected.append(r.status_code) if r.is_redirect else None
    )
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s, session=session)
    done = Export()
    try:
        for batch in _batches(run_dir):
            result = _within(timeout_s + 1.0, partial(exporter.export, batch))
            if result is None:
                raise ExportError(
                    f"the OTLP collector at {url} did not answer within {timeout_s + 1.0:g}s (after "
                    f"{done.spans} spans sent): is it an OTLP collector, and is it alive?"
                )
            if redirected:
                raise ExportError(
                    f"the OTLP collector at {url} answered {redirected[0]} (a redirect), not the spans "
                    f"taken (after {done.spans} sent): give the export the collector's own address"
                )
            if result is not SpanExportResult.SUCCESS:
                raise ExportError(
                    f"the OTLP collector at {url} did not take the spans (after {done.spans} sent); "
                    "is it running, and does it accept OTLP over HTTP with protobuf?"
                )
            done.add(batch)
    finally:
        session.close()
    return done


def _within(seconds: float, call: Callable[[], SpanExportResult]) -> SpanExportResult | None:
    """``call()`` in a thread of its own, or None when it has not returned in ``seconds`` (the thread
    is a daemon: the command ends without it). Its exception, if it raised, is raised here."""
    outcome: list[SpanExportResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name="otlp-export", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        return None
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]
