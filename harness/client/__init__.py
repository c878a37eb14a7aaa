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

from typing import Protocol

from harness.client.messages import CallResult, ToolCall


class McpClient(Protocol):
    """What the driver needs of any transport: one attempt per call, a typed result, a close."""

    async def call_tool(self, call: ToolCall, *, timeout: float) -> CallResult: ...

    async def aclose(self) -> None: ...


__all__ = ["CallResult", "McpClient", "ToolCall"]
