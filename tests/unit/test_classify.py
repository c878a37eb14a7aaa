"""Every way an HTTP exchange can end, read as MCP without a socket: `classify` of hand-built responses."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.client.classify import answers, classify
from harness.client.raw import End, RawResponse
from harness.history import Detail, Outcome

RID = 7


def ok(result: dict[str, Any] | None = None, rid: int = RID) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", "content": [], **(result or {})}}
    )


def error(code: int, message: str, rid: int = RID) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def progress(n: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}})


def json_response(body: bytes, status: int = 200, **kw: Any) -> RawResponse:
    return RawResponse(End.COMPLETE, status=status, body=body, received=100 + len(body), **kw)


def stream(*events: bytes, end: End = End.COMPLETE, last_id: bytes | None = None) -> RawResponse:
    return RawResponse(end, status=200, events=list(events), last_event_id=last_id, received=100)


def outcome(res: Any) -> tuple[Outcome, Detail | None]:
    return res.outcome, res.detail


# -- answers


def test_a_json_body_is_the_answer() -> None:
    res = classify(json_response(ok()), RID)
    assert (res.outcome, res.form, res.status, res.notifications) == (Outcome.OK, "json", 200, 0)
    assert res.result == {"resultType": "complete", "content": []}


def test_the_session_header_comes_back_with_the_answer() -> None:
    raw = json_response(ok(), headers={b"mcp-session-id": b"s-1"})
    assert classify(raw, RID).session == "s-1"
    assert classify(json_response(ok()), RID).session is None
    assert classify(stream(ok(), last_id=None), RID).session is None
    raw = stream(ok())
    raw.headers[b"mcp-session-id"] = b"s-2"
    assert classify(raw, RID).session == "s-2"


def test_a_stream_of_notifications_then_the_answer() -> None:
    res = classify(stream(progress(1), progress(2), b"not json", b"[1]", ok()), RID)
    assert (res.outcome, res.form, res.notifications) == (Outcome.OK, "sse", 2)


@pytest.mark.parametrize("end", [End.COMPLETE, End.STOPPED, End.CLOSED])
def test_a_stream_that_carried_its_answer_counts_however_it_ended(end: End) -> None:
    res = classify(stream(progress(1), ok(), end=end), RID)
    assert (res.outcome, res.notifications) == (Outcome.OK, 1)


def test_a_stream_that_ended_without_the_answer_is_unknown_and_resumable() -> None:
    res = classify(stream(progress(1), progress(2), last_id=b"ev-2"), RID)
    assert outcome(res) == (Outcome.TRANSPORT_ERROR, Detail.SSE_ENDED)
    assert (res.form, res.notifications, res.event_id) == ("sse", 2, "ev-2")


def test_a_stream_cut_mid_way_is_unknown() -> None:
    res = classify(stream(progress(1), end=End.CLOSED, last_id=b"ev-1"), RID)
    assert outcome(res) == (Outcome.TRANSPORT_ERROR, Detail.CLOSED_MID_RESPONSE)
    assert res.event_id == "ev-1"


def test_a_connection_closed_before_any_byte_and_mid_response() -> None:
    assert outcome(classify(RawResponse(End.CLOSED), RID)) == (
        Outcome.TRANSPORT_ERROR,
        Detail.CLOSED_BEFORE_RESPONSE,
    )
    half = RawResponse(End.CLOSED, status=200, body=ok()[:10], received=60)
    assert outcome(classify(half, RID)) == (Outcome.TRANSPORT_ERROR, Detail.CLOSED_MID_RESPONSE)


# -- refusals


def test_404_in_a_session_is_a_lost_session() -> None:
    res = classify(json_response(b"Session not found", 404), RID, in_session=True)
    assert outcome(res) == (Outcome.SESSION_LOST, Detail.SESSION_NOT_FOUND)
    assert res.message == "HTTP 404: Session not found"


def test_400_naming_the_session_is_a_lost_session() -> None:
    body = error(-32000, "Bad Request: No valid session ID provided", rid=RID)
    res = classify(json_response(body, 400), RID, in_session=True)
    assert outcome(res) == (Outcome.SESSION_LOST, Detail.SESSION_REJECTED)


def test_404_and_400_outside_a_session_are_only_statuses() -> None:
    assert outcome(classify(json_response(b"Not Found", 404), RID)) == (
        Outcome.PROTOCOL_ERROR,
        Detail.HTTP_STATUS,
    )
    res = classify(json_response(error(-32600, "no session"), 400), RID)
    assert outcome(res) == (Outcome.PROTOCOL_ERROR, Detail.JSONRPC_ERROR)
    assert res.message == "HTTP 400: JSON-RPC error -32600: no session"
    # In a session, a 400 that does not name it is not a loss either.
    res = classify(json_response(error(-32602, "bad params"), 400), RID, in_session=True)
    assert outcome(res) == (Outcome.PROTOCOL_ERROR, Detail.JSONRPC_ERROR)


@pytest.mark.parametrize(("status", "detail"), [(401, Detail.UNAUTHORIZED), (403, Detail.FORBIDDEN)])
@pytest.mark.parametrize("in_session", [False, True])
def test_401_and_403_are_auth_errors(status: int, detail: Detail, in_session: bool) -> None:
    res = classify(json_response(b'{"error": "invalid_token"}', status), RID, in_session=in_session)
    assert outcome(res) == (Outcome.AUTH_ERROR, detail)
    assert res.message == f'HTTP {status}: {{"error": "invalid_token"}}'


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_page_is_unknown_not_a_protocol_error(status: int) -> None:
    res = classify(json_response(b"<html>502 Bad Gateway</html>", status), RID)
    assert outcome(res) == (Outcome.TRANSPORT_ERROR, Detail.GATEWAY_ERROR)
    assert res.status == status


def test_a_server_that_answers_503_in_json_rpc_said_so_itself() -> None:
    res = classify(json_response(error(-32000, "overloaded"), 503), RID)
    assert (res.outcome, res.detail, res.error_code) == (Outcome.PROTOCOL_ERROR, Detail.JSONRPC_ERROR, -32000)
    assert res.message == "HTTP 503: JSON-RPC error -32000: overloaded"


def test_a_result_under_an_error_status_is_not_a_success() -> None:
    res = classify(json_response(ok(), 500), RID)
    assert (res.outcome, res.detail, res.form) == (Outcome.PROTOCOL_ERROR, Detail.HTTP_STATUS, "json")


# -- what the body says


def test_a_body_that_is_not_json() -> None:
    assert outcome(classify(json_response(b"<html>hello</html>"), RID)) == (
        Outcome.PROTOCOL_ERROR,
        Detail.NOT_JSON,
    )
    assert outcome(classify(json_response(b"oops", 500), RID)) == (Outcome.PROTOCOL_ERROR, Detail.HTTP_STATUS)


def test_a_json_rpc_error() -> None:
    res = classify(json_response(error(-32601, "Method not found")), RID)
    assert (res.outcome, res.detail, res.error_code) == (Outcome.PROTOCOL_ERROR, Detail.JSONRPC_ERROR, -32601)


def test_an_answer_to_another_request() -> None:
    assert outcome(classify(json_response(ok(rid=RID + 1)), RID)) == (
        Outcome.PROTOCOL_ERROR,
        Detail.ID_MISMATCH,
    )
    assert outcome(classify(stream(ok(rid=RID + 1)), RID)) == (Outcome.PROTOCOL_ERROR, Detail.ID_MISMATCH)


def test_a_question_is_input_required() -> None:
    asked = {"resultType": "input_required", "inputRequests": {"q": {"method": "elicitation/create"}}}
    res = classify(json_response(ok(asked)), RID)
    assert res.outcome is Outcome.INPUT_REQUIRED
    assert (res.result or {})["inputRequests"] == asked["inputRequests"]


def test_a_tool_error_with_and_without_a_contract() -> None:
    contract = {"isError": True, "structuredContent": {"code": "quota_exceeded", "retryable": True}}
    res = classify(json_response(ok(contract)), RID)
    assert (res.outcome, res.detail, res.error_code, res.retryable) == (
        Outcome.TOOL_ERROR,
        Detail.ERROR_CONTRACT,
        "quota_exceeded",
        True,
    )
    bare = {"isError": True, "content": [{"type": "text", "text": "Sorry"}]}
    res = classify(stream(progress(1), ok(bare)), RID)
    assert (res.outcome, res.detail, res.error_code, res.message, res.form) == (
        Outcome.TOOL_ERROR,
        Detail.NO_ERROR_CONTRACT,
        None,
        "Sorry",
        "sse",
    )


# -- requests without an id


@pytest.mark.parametrize("status", [200, 202, 204])
def test_a_notification_needs_only_a_good_status(status: int) -> None:
    assert classify(json_response(b"", status), None).outcome is Outcome.OK


def test_a_notification_refused() -> None:
    res = classify(json_response(b"nope", 500), None)
    assert (res.outcome, res.detail, res.message) == (
        Outcome.PROTOCOL_ERROR,
        Detail.HTTP_STATUS,
        "HTTP 500: nope",
    )
    assert outcome(classify(json_response(b"gone", 404), None, in_session=True)) == (
        Outcome.SESSION_LOST,
        Detail.SESSION_NOT_FOUND,
    )


def test_a_notification_answered_with_a_stream_is_a_broken_stream_with_its_status() -> None:
    res = classify(stream(ok()), None)
    assert (res.outcome, res.status) == (Outcome.TRANSPORT_ERROR, 200)


# -- exchanges that did not end in a response


def test_timeouts() -> None:
    assert outcome(classify(RawResponse(End.TIMEOUT), RID)) == (Outcome.TIMEOUT, Detail.TIMEOUT_NO_RESPONSE)
    res = classify(stream(progress(1), progress(2), end=End.TIMEOUT), RID)
    assert outcome(res) == (Outcome.TIMEOUT, Detail.TIMEOUT_MID_RESPONSE)
    assert res.message == "an event stream that carried no response in time (2 notifications)"
    half = RawResponse(End.TIMEOUT, status=200, body=b'{"jsonrpc"', received=80)
    assert outcome(classify(half, RID)) == (Outcome.TIMEOUT, Detail.TIMEOUT_MID_RESPONSE)
    assert outcome(classify(RawResponse(End.CONNECT_TIMEOUT), RID)) == (
        Outcome.TIMEOUT,
        Detail.TIMEOUT_CONNECT,
    )


def test_connection_failures() -> None:
    assert outcome(classify(RawResponse(End.REFUSED), RID)) == (
        Outcome.TRANSPORT_ERROR,
        Detail.CONNECT_REFUSED,
    )
    res = classify(RawResponse(End.CONNECT_FAILED, error="No route to host"), RID)
    assert (res.outcome, res.detail, res.message) == (
        Outcome.TRANSPORT_ERROR,
        Detail.CONNECT_FAILED,
        "No route to host",
    )


def test_bytes_that_are_not_http() -> None:
    raw = RawResponse(End.BAD_HTTP, status=200, body=ok(), error="bad HTTP from server: Invalid header")
    res = classify(raw, RID)
    assert (res.outcome, res.detail, res.message) == (
        Outcome.PROTOCOL_ERROR,
        Detail.BAD_HTTP,
        "bad HTTP from server: Invalid header",
    )


# -- the transport's question


def test_which_event_carries_the_answer() -> None:
    assert answers(ok())
    assert answers(error(-1, "x"))
    assert not answers(progress(1))
    assert not answers(orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}))  # a request to us
    assert not answers(b"not json")
    assert not answers(b"[1, 2]")


# -- total


RAW = st.builds(
    RawResponse,
    end=st.sampled_from(End),
    status=st.none() | st.sampled_from([200, 202, 400, 401, 403, 404, 500, 502, 503]),
    headers=st.dictionaries(st.just(b"mcp-session-id"), st.binary(max_size=8)),
    body=st.sampled_from([b"", b"x", ok(), error(-1, "e"), b"[]", b"session"]) | st.binary(max_size=20),
    events=st.none() | st.lists(st.sampled_from([ok(), progress(1), b"", b"{", b"null", error(1, "e")])),
    last_event_id=st.none() | st.binary(max_size=4),
    received=st.integers(0, 1000),
    error=st.none() | st.text(max_size=10),
)


@given(RAW, st.none() | st.integers(-2, 9), st.booleans())
def test_classify_is_total(raw: RawResponse, request_id: int | None, in_session: bool) -> None:
    # Whatever the transport brings back, the attempt gets an outcome, never an exception.
    res = classify(raw, request_id, in_session=in_session)
    assert isinstance(res.outcome, Outcome)
    if raw.end in (End.TIMEOUT, End.CONNECT_TIMEOUT):
        assert res.outcome is Outcome.TIMEOUT
    if res.outcome is Outcome.SESSION_LOST:
        assert in_session
