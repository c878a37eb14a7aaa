"""What one HTTP exchange brought back, before anyone reads it as MCP: the data between the
transport (``pool``) and the protocol layer (``classify``).

Its own module so that the pure side of the cut imports no I/O: ``classify`` and its
unit tests build these by hand, the pool fills them from a socket.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class End(enum.Enum):
    """How an exchange ended."""

    COMPLETE = "complete"
    """The whole response arrived."""
    STOPPED = "stopped"
    """An event stream carried the answer but stayed open; the client stopped reading after a grace."""
    CLOSED = "closed"
    """The connection ended before the response did (or before it began)."""
    BAD_HTTP = "bad_http"
    """What came back was not HTTP; ``error`` says why."""
    TIMEOUT = "timeout"
    """The deadline passed on an open connection (which is then closed)."""
    CONNECT_TIMEOUT = "connect_timeout"
    """The deadline passed before a connection was open."""
    REFUSED = "refused"
    """Nothing listens at the address."""
    CONNECT_FAILED = "connect_failed"
    """The connection could not be opened for another reason; ``error`` is the OS's words."""


@dataclass(slots=True)
class RawResponse:
    """What one exchange brought back, before anyone reads it as MCP."""

    end: End = End.CLOSED
    status: int | None = None
    headers: dict[bytes, bytes] = field(default_factory=dict)
    """The response headers the caller asked to keep, by lower-case name."""
    body: bytes = b""
    """The body of a response that is not an event stream (complete or not)."""
    events: list[bytes] | None = None
    """An event stream's events (each one's ``data``), in order; None when the body is not a stream."""
    last_event_id: bytes | None = None
    """The stream's last ``id`` field: where a client may resume it from."""
    retry_ms: int | None = None
    """The stream's last ``retry`` field, in milliseconds: how long to wait before resuming it."""
    received: int = 0
    """Bytes received: a connection closed after none of them never began a response."""
    error: str | None = None
