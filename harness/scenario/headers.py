"""What a scenario gives that becomes part of an HTTP request's head: header names and values
(``target.headers``, ``client.key_name`` with ``key_in: header``), the request line's target
(``target.path``) and tool names (sent as ``Mcp-Name``)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP field name (RFC 9110's token)."""

RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "accept",
        "last-event-id",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
    }
)
"""Headers the harness's client writes itself: a scenario cannot set them (or carry a key in them)."""

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Characters no header value may hold: a line break would end the header and start another."""

HEADER_VALUE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""What a header value a user writes may not hold: every control character but the tab (RFC 9110's
field-value allows the tab between words)."""

REQUEST_TARGET_BREAK = re.compile(r"[\x00-\x20\x7f]")
"""What would end a request line's target (``target.path``) early: a space or a control character."""


def _tool_name(value: str) -> str:
    if (bad := CONTROL.search(value)) is not None:
        raise ValueError(
            f"the tool name {value!r} holds the control character {bad.group()!r}: it is sent in the "
            "Mcp-Name header, where a line break would start another header; write the name as the "
            "server lists it"
        )
    return value


ToolName = Annotated[str, Field(min_length=1), AfterValidator(_tool_name)]
"""A tool's name as a scenario gives it: what ``tools/list`` says, sent in ``Mcp-Name``."""
