"""MCP messages as the client sees them: versions, typed outcomes, the SSE framing, JSON-RPC answers.

Pure: no sockets, no pipes. Every transport (HTTP in either protocol revision,
stdio) turns what came back into a :class:`CallResult` through
:func:`interpret_message`, so an outcome means the same whichever way it came.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from harness.history import MESSAGE_LIMIT, Detail, Outcome, clip
from harness.replies import reads_as_failure, structured_failure

_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
"""Bytes an event id sent back as ``Last-Event-ID`` cannot hold (a bare CR would start a header)."""

MODERN = "2026-07-28"
"""The stateless protocol revision: one request per exchange, no handshake."""
SESSION_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
"""The 2025 revisions, newest first: what ``initialize`` offers and what a server may choose."""
PROTOCOLS = (MODERN, *SESSION_VERSIONS)
STDIO_VERSIONS = (*SESSION_VERSIONS, "2024-11-05")
"""What a stdio server may choose: the 2025 revisions, and 2024-11-05, which servers that pin an early
SDK (the TypeScript SDK 1.0) answer whatever they are offered. Over stdio its messages are those a run
sends (``initialize``, ``tools/list``, ``tools/call``, cancellation, ``roots/list``, ``ping``); over
HTTP it was another transport (HTTP with SSE), which the harness does not speak."""


@dataclass(slots=True)
class ToolCall:
    """One ``tools/call`` attempt, whatever carries it: what the caller decided, in one value, so that
    every transport has one signature (httpx's ``Request`` as the model). Nothing changes one once it
    is made; it is not ``frozen`` only because that triples its cost, paid on every attempt.

    ``key``: the intent's idempotency key, in the header or ``_meta`` the scenario names.
    ``answer``: MRTR, the ``inputResponses`` and ``requestState`` a call that answers the server's
    question adds to its params (the arguments stay those of the question's call).
    ``traceparent``: the attempt's W3C trace context (``client.trace``), in ``_meta`` and, over
    HTTP, in the header of the same name.
    """

    name: str
    arguments: dict[str, Any]
    request_id: int
    request_progress: bool = False
    key: str | None = None
    answer: dict[str, Any] | None = None
    traceparent: str | None = None
    headers: Mapping[str, str] | None = None
    """Headers of this call alone: 2026-07-28's ``Mcp-Param-*``, the arguments its tool's schema
    marks ``x-mcp-header`` (SEP-2243), which a server checks against the body."""

    def params(self) -> dict[str, Any]:
        """The JSON-RPC ``params`` of the call."""
        return {"name": self.name, "arguments": self.arguments, **(self.answer or {})}


@dataclass(slots=True)
class CallResult:
    """The typed outcome of one attempt."""

    outcome: Outcome
    detail: Detail | None = None
    status: int | None = None
    form: str | None = None
    """``json`` or ``sse``: the response form the server chose."""
    result: dict[str, Any] | None = None
    """The JSON-RPC ``result`` object (ok and tool_error)."""
    error_code: str | int | None = None
    """A tool error contract's ``code``, or a JSON-RPC error's numeric code."""
    retryable: bool | None = None
    retry_after_ms: int | None = None
    notifications: int = 0
    message: str | None = None
    """What the server or the OS said, as an excerpt (tool error text, JSON-RPC error message,
    the start of an HTTP error body): why an intent was rejected, for people."""
    reply: str | None = None
    """The start of an ok result's text (its text blocks, or its structured content where it has no
    text), clipped: what the server answered, for people; the history keeps an excerpt."""
    reads_as_failure: bool = False
    """An ok result whose text says the call failed ("Database error: ..."): a failure answered as a
    success."""
    session: str | None = None
    """The ``Mcp-Session-Id`` the server returned (on ``initialize``)."""
    event_id: str | None = None
    """The last SSE event id of a broken stream: where a 2025 client may resume it from."""
    retry_ms: int | None = None
    """The stream's last ``retry`` field: how long the server asked the client to wait before it
    resumes (2025-11-25: a client MUST respect it)."""
    resumed: bool | None = None
    """True: the broken stream was resumed and this is its answer; False: resuming failed."""
    reconnections: int = 0
    """How many times the client came back for the stream (GET with Last-Event-ID) in this attempt."""
    challenge: str | None = None
    """A 401 or 403's ``WWW-Authenticate``: what an OAuth client answers (step-up on 403)."""


def refused_version(
    chosen: object,
    *,
    status: int | None = None,
    form: str | None = None,
    spoken: tuple[str, ...] = SESSION_VERSIONS,
) -> CallResult | None:
    """The protocol error of an ``initialize`` whose server chose a version the transport does not speak
    (``spoken``: a 2025 session's, or ``STDIO_VERSIONS``); None when it chose one."""
    if chosen in spoken:
        return None
    message = clip(f"initialize: the server chose protocol version {chosen!r}")
    return CallResult(Outcome.PROTOCOL_ERROR, Detail.BAD_RESULT, status=status, form=form, message=message)


class SseParser:
    """Incremental ``text/event-stream`` parser yielding each event's data.

    ``data`` fields make the events; an ``id`` field (2025 servers that support
    resuming a stream) is kept as :attr:`last_id`, what a client sends back as
    ``Last-Event-ID``, and a ``retry`` field as :attr:`retry_ms`, how long the server asked
    a client to wait before it reconnects. Comments (keep-alive pings) and other fields are
    skipped. A line ends at LF, CRLF or a lone CR, as the SSE spec says: a stream is normalised to LF
    as it arrives, and a CR that ends one chunk makes an LF that starts the next its pair, not a
    second, empty line (which would end an event early).
    """

    __slots__ = ("_cr", "_data", "_partial", "last_id", "retry_ms")

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        """Chunks of a line whose end has not arrived: joined once, when it does (a 32 MB line
        arriving in 64 KiB reads would otherwise be copied 500 times)."""
        self._data: list[bytes] = []
        self.last_id: bytes | None = None
        self.retry_ms: int | None = None
        self._cr = False
        """The last chunk ended in CR: an LF that starts the next one is its pair."""

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            if chunk:
                self._partial.append(chunk)
            return []
        if self._partial:
            self._partial.append(chunk)
            buf = b"".join(self._partial)
            self._partial = []
        else:
            buf = chunk
        events: list[bytes] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
                continue
            if line[0] == 0x3A:  # ":" comment
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif name == b"id":
                given = value[1:] if value.startswith(b" ") else value
                if not _CONTROL.search(given):  # as the SSE spec ignores one with a NUL: never a header
                    self.last_id = given
            elif name == b"retry":
                digits = value[1:] if value.startswith(b" ") else value
                if digits.isdigit() and len(digits) <= 9:  # the SSE spec: ASCII digits, else ignored
                    self.retry_ms = int(digits)
        if start < len(buf):
            self._partial.append(buf[start:])
        return events


REPLY_WINDOW = 8 * MESSAGE_LIMIT
"""How much of an ok reply's text a result keeps (a listing can be megabytes): the history keeps
MESSAGE_LIMIT characters of it, cut after redaction, and a secret that starts inside them must be
whole in the window to be redacted."""


WHOLE_JSON = 64 << 10
"""The longest reply text read whole for a structured failure (a JSON object saying ``"success": false``)."""


def text_of(result: dict[str, Any]) -> str:
    """The text blocks of a tool result, joined: what a person reads as the tool's answer."""
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    if len(content) == 1:  # most answers: one block, read without a generator
        block = content[0]
        if isinstance(block, dict) and block.get("type", "text") == "text":
            text = block.get("text")
            return text if isinstance(text, str) else ""
        return ""
    return " ".join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type", "text") == "text"
        and isinstance(block.get("text"), str)
    )


def _tool_error_contract(result: dict[str, Any], text: str) -> tuple[str | None, bool | None, int | None]:
    """Read ``code``/``retryable``/``retry_after_ms`` from a tool error, if it follows the contract.

    The contract may sit in ``structuredContent`` or as a JSON object in the text
    (possibly after a prefix such as the SDK's ``Error executing tool``).
    """
    contract: Any = result.get("structuredContent")
    if not isinstance(contract, dict) or "code" not in contract:
        contract = None
        if (brace := text.find("{")) >= 0:
            try:
                contract = orjson.loads(text[brace:])
            except orjson.JSONDecodeError:
                contract = None
    if not isinstance(contract, dict):
        return None, None, None
    code = contract.get("code")
    retryable = contract.get("retryable")
    after = contract.get("retry_after_ms")
    return (
        str(code) if code is not None else None,
        retryable if isinstance(retryable, bool) else None,
        after if isinstance(after, int) and not isinstance(after, bool) else None,
    )


def interpret_message(msg: Any, request_id: int, *, status: int | None, form: str) -> CallResult:
    """Turn one JSON-RPC response message into a CallResult."""
    if type(msg) is dict and msg.get("jsonrpc") == "2.0" and msg.get("id") == request_id:
        result = msg.get("result")  # the common case first: a plain answer, each thing checked once
        if isinstance(result, dict) and "error" not in msg and "resultType" not in result:
            plain = result.get("isError") is not True
            if plain:
                return _answered(result, status, form)

    def protocol_error(detail: Detail, message: str, **kw: Any) -> CallResult:
        return CallResult(
            Outcome.PROTOCOL_ERROR, detail, status=status, form=form, message=clip(message), **kw
        )

    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return protocol_error(Detail.NOT_JSONRPC, "not a JSON-RPC 2.0 message")
    if "error" in msg:
        err = msg["error"] if isinstance(msg["error"], dict) else {}
        code = err.get("code")
        return protocol_error(
            Detail.JSONRPC_ERROR,
            f"JSON-RPC error {code}: {err.get('message', '')}",
            error_code=code if isinstance(code, int) else None,
        )
    if msg.get("id") != request_id:
        return protocol_error(Detail.ID_MISMATCH, f"response id {msg.get('id')!r} != request id {request_id}")
    result = msg.get("result")
    if not isinstance(result, dict):
        return protocol_error(Detail.BAD_RESULT, "result is not an object")
    result_type = result.get("resultType", "complete")
    if result_type == "input_required":
        requests, state = result.get("inputRequests", {}), result.get("requestState")
        # The spec's MUST: a question (a map of input requests) or a state to echo, or both.
        if not isinstance(requests, dict) or not isinstance(state, str | None) or not (requests or state):
            return protocol_error(Detail.BAD_RESULT, "input_required without inputRequests or requestState")
        return CallResult(Outcome.INPUT_REQUIRED, status=status, form=form, result=result)
    if result_type != "complete":
        return protocol_error(Detail.BAD_RESULT, f"unknown resultType {result_type!r}", result=result)
    if result.get("isError") is True:
        text = text_of(result)
        code, retryable, after = _tool_error_contract(result, text)
        return CallResult(
            Outcome.TOOL_ERROR,
            Detail.ERROR_CONTRACT if code is not None else Detail.NO_ERROR_CONTRACT,
            status=status,
            form=form,
            result=result,
            error_code=code,
            retryable=retryable,
            retry_after_ms=after,
            message=clip(text) if text else None,
        )
    return _answered(result, status, form)


def _answered(result: dict[str, Any], status: int | None, form: str) -> CallResult:
    """An ok answer (``result`` complete, not an error), with the start of its text."""
    text = text_of(result)
    structured = result.get("structuredContent")
    if not text and structured is not None:  # structured only: that is the reply
        text = orjson.dumps(structured).decode()
    if not text:
        return CallResult(Outcome.OK, status=status, form=form, result=result)
    reply = clip(text[:REPLY_WINDOW])
    # Structure says it whole (a JSON text cut to the reply's excerpt no longer parses); words, at the start.
    failing = structured_failure(structured) or reads_as_failure(text if len(text) <= WHOLE_JSON else reply)
    return CallResult(
        Outcome.OK,
        status=status,
        form=form,
        result=result,
        reply=reply,
        reads_as_failure=failing,
    )
