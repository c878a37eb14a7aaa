"""How an attempt reaches a server: Streamable HTTP (2026-07-28 stateless, or 2025 sessions) or stdio.

Every transport offers the same :class:`McpClient` interface and returns a
typed :class:`CallResult` for every call, never an exception for a failed one:

``messages``   protocol versions, typed outcomes, SSE framing, JSON-RPC answers (pure)
``pool``       HTTP/1.1 keep-alive connections: request bytes in, a raw response out (no MCP)
``framing``    the bytes of every HTTP request: one head builder, the JSON-RPC bodies (pure)
``classify``   a raw HTTP response as a typed outcome (pure)
``http``       the fast HTTP client, both protocol generations, over the three above
``stdio``      newline-delimited JSON-RPC over a server process's pipes
``readiness``  is a server up, in which protocol, and if it never will be, why
"""

from __future__ import annotations

from typing import Any, Protocol

from harness.client.messages import CallResult


class McpClient(Protocol):
    """What the driver needs of any transport: one attempt per call, a typed result, a close."""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        request_id: int,
        timeout: float,
        request_progress: bool = False,
        key: str | None = None,
        answer: dict[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> CallResult: ...

    """``answer``: MRTR, the ``inputResponses`` and ``requestState`` a call that answers the
    server's question adds to its params (the arguments stay those of the question's call).
    ``traceparent``: the attempt's W3C trace context (``client.trace``), in ``_meta`` and, over
    HTTP, in the header of the same name."""

    async def aclose(self) -> None: ...


__all__ = ["CallResult", "McpClient"]
