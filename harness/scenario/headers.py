"""HTTP header names a scenario may give (``target.headers``, ``client.key_name`` with ``key_in: header``)."""

from __future__ import annotations

import re

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
