"""What an HTTP exchange came to, as MCP: a :class:`RawResponse` in, a typed :class:`CallResult` out.

Pure: no sockets, so every way an exchange can end (a JSON body, an event stream
with notifications and then the answer, a stream or a connection that ended
first, a gateway's error page, a lost session, a refusal of credentials) is
unit-tested by building the raw response by hand. The transport says how the
exchange ended; this module decides what that means for the attempt. The
JSON-RPC message itself is read by :func:`interpret_message`, the same for
every transport.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.client.messages import CallResult, interpret_message
from harness.client.raw import End, RawResponse
from harness.history import Detail, Outcome, clip

SESSION_HEADER = b"mcp-session-id"
CHALLENGE_HEADER = b"www-authenticate"
KEPT_HEADERS = frozenset({SESSION_HEADER, CHALLENGE_HEADER})
"""The response headers :func:`classify` reads: the ones the transport must keep."""
OK_STATUSES = (200, 202, 204)
"""What a request without an id (a notification, a DELETE) may be answered with."""
_GATEWAY_STATUSES = frozenset({502, 503, 504})
"""Statuses a gateway answers for a replica it could not reach or that failed it."""
_COMPLETE = End.COMPLETE
"""Looked up once: an enum member costs a descriptor call per lookup on Python 3.11."""


def answers(event: bytes) -> bool:
    """Whether one event of a stream carries a JSON-RPC response (the answer, not a notification)."""
    try:
        msg = orjson.loads(event)
    except orjson.JSONDecodeError:
        return False
    return isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg)


def classify(raw: RawResponse, request_id: int | None, *, in_session: bool = False) -> CallResult:
    """The outcome of one exchange.

    ``request_id`` is the JSON-RPC id the answer must carry; None for a request
    that expects none (a notification, a DELETE): then only the status counts.
    ``in_session``: the request carried a 2025 session id, so a 404 (or a 400
    naming the session) means the server no longer knows it.
    """
    # The common case first, inline (this runs once per call): a complete JSON body.
    if raw.end is not _COMPLETE or raw.events is not None:
        return _stream_or_failure(raw, request_id)
    status = raw.status
    body = raw.body
    if status != 200:
        refused = _refused(raw, status, body, in_session)
        if refused is not None:
            return refused
    if request_id is None:  # a notification or a DELETE: only the status matters
        if status in OK_STATUSES:
            return CallResult(Outcome.OK, status=status)
        return CallResult(
            Outcome.PROTOCOL_ERROR, Detail.HTTP_STATUS, status=status, message=_http_text(status, body)
        )
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError:
        if status in _GATEWAY_STATUSES:
            # A balancer's own page, not the server's answer: whether a replica got the request
            # is unknown, as after a broken connection, and the client retries.
            return CallResult(
                Outcome.TRANSPORT_ERROR, Detail.GATEWAY_ERROR, status=status, message=_http_text(status, body)
            )
        return CallResult(
            Outcome.PROTOCOL_ERROR,
            Detail.NOT_JSON if status == 200 else Detail.HTTP_STATUS,
            status=status,
            message=_http_text(status, body),
        )
    res = interpret_message(msg, request_id, status=status, form="json")
    session = raw.headers.get(SESSION_HEADER)
    res.session = None if session is None else session.decode("latin-1")
    if status != 200 and res.message is not None:
        res.message = f"HTTP {status}: {res.message}"  # the status says as much as the body
    if status != 200 and res.outcome is not Outcome.PROTOCOL_ERROR:
        return CallResult(
            Outcome.PROTOCOL_ERROR,
            Detail.HTTP_STATUS,
            status=status,
            form="json",
            message=_http_text(status, body),
        )
    return res


def _stream_or_failure(raw: RawResponse, request_id: int | None) -> CallResult:
    """Anything but a complete body: an event stream, or an exchange that ended without a response."""
    if raw.end in _NOT_ANSWERED:
        return _not_answered(raw)
    if raw.events is not None:
        return _stream(raw, request_id)
    detail = Detail.CLOSED_BEFORE_RESPONSE if raw.received == 0 else Detail.CLOSED_MID_RESPONSE
    return CallResult(Outcome.TRANSPORT_ERROR, detail, status=raw.status)


_NOT_ANSWERED = frozenset({End.TIMEOUT, End.CONNECT_TIMEOUT, End.REFUSED, End.CONNECT_FAILED, End.BAD_HTTP})


def _not_answered(raw: RawResponse) -> CallResult:
    """An exchange that ended without a response to read: a timeout, a failed connect, not HTTP."""
    if raw.end is End.TIMEOUT:
        detail = Detail.TIMEOUT_NO_RESPONSE if raw.status is None else Detail.TIMEOUT_MID_RESPONSE
        said = None
        if raw.events is not None:
            _, notes = _read_stream(raw.events)
            said = f"an event stream that carried no response in time ({notes} notifications)"
        return CallResult(Outcome.TIMEOUT, detail, status=raw.status, message=said)
    if raw.end is End.CONNECT_TIMEOUT:
        return CallResult(Outcome.TIMEOUT, Detail.TIMEOUT_CONNECT)
    if raw.end is End.REFUSED:
        return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED)
    if raw.end is End.CONNECT_FAILED:
        return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_FAILED, message=clip(raw.error or ""))
    return CallResult(
        Outcome.PROTOCOL_ERROR, Detail.BAD_HTTP, status=raw.status, message=clip(raw.error or "bad HTTP")
    )


def _read_stream(events: list[bytes]) -> tuple[dict[str, Any] | None, int]:
    """A stream's last JSON-RPC response (if any) and how many notifications (or requests) it carried."""
    final = None
    notes = 0
    for data in events:
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(msg, dict):
            continue
        if "method" in msg:
            notes += 1
        elif "result" in msg or "error" in msg:
            final = msg
    return final, notes


def _stream(raw: RawResponse, request_id: int | None) -> CallResult:
    """An event stream that ended (or was stopped after its answer): its answer, or a broken stream."""
    assert raw.events is not None
    final, notes = _read_stream(raw.events)
    if final is not None and request_id is not None:
        res = interpret_message(final, request_id, status=raw.status, form="sse")
        res.notifications = notes
        res.session = _session(raw)
        return res
    # No answer: the server may still have done the work (outcome unknown), and a 2025 client
    # may resume the stream from its last event id.
    return CallResult(
        Outcome.TRANSPORT_ERROR,
        Detail.SSE_ENDED if raw.end is End.COMPLETE else Detail.CLOSED_MID_RESPONSE,
        status=raw.status,
        form="sse",
        notifications=notes,
        event_id=raw.last_event_id.decode("utf-8", "replace") if raw.last_event_id is not None else None,
        retry_ms=raw.retry_ms,
    )


def _refused(raw: RawResponse, status: int | None, body: bytes, in_session: bool) -> CallResult | None:
    """401/403 (credentials, with the challenge an OAuth client answers) and, for a request in a
    session, 404 or a 400 naming the session."""
    if status in (401, 403):
        detail = Detail.UNAUTHORIZED if status == 401 else Detail.FORBIDDEN
        challenge = raw.headers.get(CHALLENGE_HEADER)
        return CallResult(
            Outcome.AUTH_ERROR,
            detail,
            status=status,
            message=_http_text(status, body),
            challenge=None if challenge is None else challenge.decode("latin-1"),
        )
    if in_session and (status == 404 or (status == 400 and b"session" in body.lower())):
        detail = Detail.SESSION_NOT_FOUND if status == 404 else Detail.SESSION_REJECTED
        return CallResult(Outcome.SESSION_LOST, detail, status=status, message=_http_text(status, body))
    return None


def _session(raw: RawResponse) -> str | None:
    session = raw.headers.get(SESSION_HEADER)
    return None if session is None else session.decode("latin-1")


def _http_text(status: int | None, body: bytes) -> str:
    return clip(f"HTTP {status}: {body[:4096].decode('utf-8', 'replace')}")
