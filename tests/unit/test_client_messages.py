"""The client's pure parts: SSE framing, JSON-RPC interpretation, the tool error contract, request bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.client.framing import Framing
from harness.client.http import McpHttpClient
from harness.client.messages import SseParser, interpret_message
from harness.history import MESSAGE_LIMIT, Detail, Outcome, excerpt

EVENTS = [
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
    {"jsonrpc": "2.0", "id": 3, "result": {"content": [], "isError": False, "resultType": "complete"}},
]


LINE_ENDS = (b"\n", b"\r\n", b"\r")
"""What ends a line in a stream, as the SSE spec lists them."""


def sse_stream(line_ends: list[bytes]) -> bytes:
    """The events as a stream whose n-th line ends with ``line_ends[n % len]`` (an empty line after a
    lone CR ends with a CR: an LF there would pair with it, one CRLF, as the SSE spec reads it)."""
    lines = [b": ping", b""]
    for ev in EVENTS:
        lines += [b"event: message", b"data: " + orjson.dumps(ev), b""]
    out, before = b"", b""
    for n, line in enumerate(lines):
        end = line_ends[n % len(line_ends)]
        if before == b"\r" and not line and end == b"\n":
            end = b"\r"
        out, before = out + line + end, end
    return out


@given(
    st.lists(st.sampled_from(LINE_ENDS), min_size=1, max_size=7), st.lists(st.integers(1, 400), max_size=20)
)
def test_sse_parser_is_independent_of_chunking_and_line_ends(line_ends: list[bytes], cuts: list[int]) -> None:
    """LF, CRLF and a lone CR each end a line, mixed in one stream, cut anywhere: a CRLF cut between
    its two bytes is one line end, not an empty line that would end an event early."""
    stream = sse_stream(line_ends)
    parser = SseParser()
    events: list[Any] = []
    pos = 0
    for cut in sorted(c % len(stream) for c in cuts):
        events += parser.feed(stream[pos:cut]) if cut > pos else []
        pos = max(pos, cut)
    events += parser.feed(stream[pos:])
    assert [orjson.loads(e) for e in events] == EVENTS


def test_multiline_data_is_joined() -> None:
    assert SseParser().feed(b"data: a\ndata: b\n\n") == [b"a\nb"]


def ok(result: dict[str, Any], rid: int = 3) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", **result}}


def test_ok_result() -> None:
    res = interpret_message(ok({"content": [], "isError": False}), 3, status=200, form="json")
    assert res.outcome is Outcome.OK


def test_tool_error_contract_in_text_after_prefix() -> None:
    text = 'Error executing tool x: {"code": "quota_exceeded", "retryable": true, "retry_after_ms": 250}'
    res = interpret_message(
        ok({"isError": True, "content": [{"type": "text", "text": text}]}), 3, status=200, form="json"
    )
    assert (res.outcome, res.error_code, res.retryable, res.retry_after_ms) == (
        Outcome.TOOL_ERROR,
        "quota_exceeded",
        True,
        250,
    )


def test_tool_error_contract_in_structured_content() -> None:
    msg = ok({"isError": True, "content": [], "structuredContent": {"code": "x", "retryable": False}})
    res = interpret_message(msg, 3, status=200, form="json")
    assert (res.error_code, res.retryable) == ("x", False)


def test_tool_error_without_contract() -> None:
    msg = ok({"isError": True, "content": [{"type": "text", "text": "Sorry, something went wrong"}]})
    res = interpret_message(msg, 3, status=200, form="json")
    assert (res.outcome, res.detail) == (Outcome.TOOL_ERROR, Detail.NO_ERROR_CONTRACT)
    assert res.error_code is None
    assert res.retryable is None
    assert res.message == "Sorry, something went wrong"  # why it was rejected, for the report


def test_error_text_is_kept_as_said_until_redacted_then_one_line_without_control_bytes() -> None:
    text = "line one\nline two\x00\x1b[31m " + "x" * 1000
    msg = ok({"isError": True, "content": [{"type": "text", "text": text}]})
    res = interpret_message(msg, 3, status=200, form="json")
    assert res.message == text  # collapsed and cut only when written, after secrets are redacted
    assert excerpt(res.message).startswith("line one line two??[31m xxx")
    assert len(excerpt(res.message)) == MESSAGE_LIMIT
    err = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "Method not found"}}
    res = interpret_message(err, 3, status=200, form="json")
    assert res.message == "JSON-RPC error -32601: Method not found"


def test_jsonrpc_error_and_id_mismatch_are_protocol_errors() -> None:
    err = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32020, "message": "HeaderMismatch"}}
    res = interpret_message(err, 3, status=400, form="json")
    assert (res.outcome, res.error_code) == (Outcome.PROTOCOL_ERROR, -32020)
    assert interpret_message(ok({}, rid=4), 3, status=200, form="json").outcome is Outcome.PROTOCOL_ERROR
    assert interpret_message([1], 3, status=200, form="json").outcome is Outcome.PROTOCOL_ERROR


def test_input_required_is_a_question_not_a_success() -> None:
    asked = {"resultType": "input_required", "inputRequests": {"q": {"method": "elicitation/create"}}}
    res = interpret_message(ok(asked, rid=3), 3, status=200, form="json")
    assert (res.outcome, res.result) == (Outcome.INPUT_REQUIRED, asked)
    state_only = {"resultType": "input_required", "requestState": "s"}
    assert (
        interpret_message(ok(state_only, rid=3), 3, status=200, form="json").outcome is Outcome.INPUT_REQUIRED
    )


@pytest.mark.parametrize(
    "result",
    [
        {"resultType": "input_required", "inputRequests": {}},
        {"resultType": "input_required", "inputRequests": [], "requestState": "s"},
        {"resultType": "input_required", "requestState": 7},
        {"resultType": "maybe"},
    ],
)
def test_a_malformed_question_is_a_protocol_error(result: dict[str, object]) -> None:
    res = interpret_message(ok(result, rid=3), 3, status=200, form="json")
    assert (res.outcome, res.detail) == (Outcome.PROTOCOL_ERROR, Detail.BAD_RESULT)


def test_request_bytes_carry_the_required_headers_and_meta() -> None:
    client = McpHttpClient("http://127.0.0.1:9/mcp")
    raw = client.build_request(
        "tools/call", {"name": "t", "arguments": {"a": 1}}, 41, name="t", request_progress=True
    )
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /mcp HTTP/1.1"
    headers = dict(line.split(b": ", 1) for line in lines[1:])
    assert headers[b"MCP-Protocol-Version"] == b"2026-07-28"
    assert headers[b"Mcp-Method"] == b"tools/call"
    assert headers[b"Mcp-Name"] == b"t"
    assert headers[b"Accept"] == b"application/json, text/event-stream"
    assert int(headers[b"Content-Length"]) == len(body)
    payload = orjson.loads(body)
    assert payload["id"] == 41
    meta = payload["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    assert meta["progressToken"] == 41


def request_parts(raw: bytes) -> tuple[dict[bytes, bytes], dict[str, Any]]:
    head, body = raw.split(b"\r\n\r\n", 1)
    return dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:]), orjson.loads(body)


def test_a_2025_request_carries_the_session_and_the_agreed_version() -> None:
    client = McpHttpClient(
        "http://127.0.0.1:9/mcp",
        protocol="2025-06-18",
        headers={"Authorization": "Bearer t"},
        key_header="Idem",
    )
    client.session = "s-1"
    headers, body = request_parts(
        client.build_request("tools/call", {"name": "t", "arguments": {}}, 5, key="k")
    )
    assert headers[b"MCP-Protocol-Version"] == b"2025-06-18"
    assert headers[b"Mcp-Session-Id"] == b"s-1"
    assert headers[b"Authorization"] == b"Bearer t"
    assert headers[b"Idem"] == b"k"
    assert b"Mcp-Method" not in headers  # a 2026-07-28 header
    assert "_meta" not in body["params"]  # nothing to say in it


def test_the_key_in_meta_in_either_protocol() -> None:
    for protocol in ("2026-07-28", "2025-03-26"):
        client = McpHttpClient("http://127.0.0.1:9/mcp", protocol=protocol, key_meta="idem")
        headers, body = request_parts(client.build_request("tools/call", {"name": "t"}, 5, key="k"))
        assert body["params"]["_meta"]["idem"] == "k"
        assert (b"MCP-Protocol-Version" in headers) == (protocol == "2026-07-28")  # 2025-03-26 had none


def head_of(raw: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, body = raw.split(b"\r\n\r\n", 1)
    line, *rest = head.split(b"\r\n")
    return line, dict(h.split(b": ", 1) for h in rest), body


FRAMING = Framing("127.0.0.1", 9, "/mcp", headers={"Authorization": "Bearer t"}, key_header="Idem")


def test_the_handshake_precedes_any_version_and_session() -> None:
    line, headers, body = head_of(FRAMING.initialize(-1, "2025-11-25"))
    assert line == b"POST /mcp HTTP/1.1"
    assert b"MCP-Protocol-Version" not in headers
    assert b"Mcp-Session-Id" not in headers
    assert headers[b"Authorization"] == b"Bearer t"
    assert int(headers[b"Content-Length"]) == len(body)
    params = orjson.loads(body)["params"]
    assert (params["protocolVersion"], params["clientInfo"]["name"]) == ("2025-11-25", "mcp-chaos")


@pytest.mark.parametrize(
    ("raw", "verb"),
    [
        (FRAMING.notification("notifications/initialized", version="2025-11-25", session="s-1"), b"POST"),
        (FRAMING.request("tools/list", {}, 3, version="2025-11-25", session="s-1", key="k"), b"POST"),
        (FRAMING.resume("ev-4", version="2025-11-25", session="s-1"), b"GET"),
        (FRAMING.delete(version="2025-11-25", session="s-1"), b"DELETE"),
    ],
)
def test_every_request_in_a_session_carries_its_headers(raw: bytes, verb: bytes) -> None:
    # One head builder: a GET that resumes a stream or a DELETE cannot forget what a POST carries.
    line, headers, body = head_of(raw)
    assert line == verb + b" /mcp HTTP/1.1"
    assert headers[b"Host"] == b"127.0.0.1:9"
    assert headers[b"MCP-Protocol-Version"] == b"2025-11-25"
    assert headers[b"Mcp-Session-Id"] == b"s-1"
    assert headers[b"Authorization"] == b"Bearer t"
    if verb == b"GET":
        assert (headers[b"Accept"], headers[b"Last-Event-ID"]) == (b"text/event-stream", b"ev-4")
        assert b"Content-Length" not in headers
    else:
        assert int(headers[b"Content-Length"]) == len(body)
    assert (b"Content-Type" in headers) == (verb == b"POST")


def test_a_notification_has_no_id() -> None:
    _, _, body = head_of(
        FRAMING.notification("notifications/initialized", version="2025-03-26", session=None)
    )
    assert orjson.loads(body) == {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_2026_names_the_method_and_the_tool_in_the_head_and_only_then() -> None:
    _, headers, _ = head_of(FRAMING.request("server/discover", {}, 0, version="2026-07-28", session=None))
    assert headers[b"Mcp-Method"] == b"server/discover"
    assert b"Mcp-Name" not in headers
    _, headers, _ = head_of(
        FRAMING.request("tools/call", {"name": "t"}, 1, version="2025-11-25", session=None, name="t")
    )
    assert b"Mcp-Method" not in headers
    assert b"Mcp-Name" not in headers


def test_a_name_that_would_break_the_head_is_never_sent() -> None:
    """A tool a server lists as ``t\\r\\nX-Evil: 1`` (the contract's handles check calls listed tools)
    cannot add a header: the request is refused before a byte is written."""
    with pytest.raises(ValueError, match="a header value holds a control character"):
        FRAMING.request(
            "tools/call", {"name": "t"}, 1, version="2026-07-28", session=None, name="t\r\nX-Evil: 1"
        )


def test_an_event_id_with_a_control_byte_is_ignored_not_sent_back() -> None:
    sse = SseParser()
    sse.feed(b"id: 7\n\nid: 8\x0bX-Evil: 1\ndata: {}\n\n")
    assert sse.last_id == b"7"


def test_a_lone_cr_ends_a_line_so_an_event_id_cannot_carry_one() -> None:
    """``id: 8<CR>X-Evil: 1``: two lines (an id and a field nobody knows), as the SSE spec reads them;
    the id sent back is ``8``, and nothing after the CR."""
    sse = SseParser()
    assert sse.feed(b"id: 8\rX-Evil: 1\rdata: {}\r\r") == [b"{}"]
    assert sse.last_id == b"8"


def test_the_retry_field_is_kept_only_as_ascii_digits() -> None:
    parser = SseParser()
    parser.feed(b"id: 7\nretry: 500\ndata:\n\n")
    assert (parser.last_id, parser.retry_ms) == (b"7", 500)
    parser.feed(b"retry: 5s\n\nretry: -1\n\nretry: 99999999999\n\n")  # ignored, as the SSE spec says
    assert parser.retry_ms == 500


class _Token:
    header: str | None = None


def test_a_refused_request_is_sent_again_with_the_token_found_since_and_only_that_changes() -> None:
    token = _Token()
    framing = Framing("127.0.0.1", 9, "/mcp", auth=token)
    params = {"name": "t", "arguments": {}}
    first = framing.request("tools/call", params, 7, version="2026-07-28", session=None)
    assert b"authorization:" not in first.lower()
    token.header = "Bearer new"
    again = framing.reauthorized(first)
    assert again.count(b"Authorization: Bearer new\r\n") == 1
    token.header = "Bearer newer"
    twice = framing.reauthorized(again)
    assert b"Bearer new\r\n" not in twice
    assert twice.count(b"Authorization: Bearer newer\r\n") == 1
    # The rest of the request is what it was: the same body, the same length.
    assert twice.partition(b"\r\n\r\n")[2] == first.partition(b"\r\n\r\n")[2]
    assert [h for h in twice.split(b"\r\n") if not h.startswith(b"Authorization")] == first.split(b"\r\n")


def test_a_call_carries_its_own_headers_and_none_that_would_break_the_head() -> None:
    framing = Framing("127.0.0.1", 9, "/mcp")
    raw = framing.request(
        "tools/call",
        {"name": "t", "arguments": {"region": "eu"}},
        1,
        version="2026-07-28",
        session=None,
        extra={"Mcp-Param-Region": "eu"},
    )
    assert b"\r\nMcp-Param-Region: eu\r\n" in raw
    with pytest.raises(ValueError, match="control character"):
        framing.request("tools/call", {}, 1, version="2026-07-28", session=None, extra={"X": "a\r\nB: c"})
