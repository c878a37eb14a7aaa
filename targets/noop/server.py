"""A reference MCP server whose one tool does nothing: the benchmark target.

It measures what the protocol stack costs (SDK, uvicorn, HTTP) and nothing
else, so that a client's throughput against it shows the client's limits, not
the tool's. The tool is async, which saves the SDK a worker-thread hop per call.

PORT, HOST (loopback only) as for every reference target; NOOP_TRANSPORT is
``json`` (default), ``sse`` or ``stdio`` (MCP on stdin and stdout, no PORT);
NOOP_SESSIONS ``stateless`` (default) or ``stateful`` (2025 clients get a session).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer


def build_server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("reference-noop", version="1.0.0", log_level="WARNING")

    @server.tool(description="Does nothing and returns its argument n. For benchmarks; memo is ignored.")
    async def noop(n: int = 0, memo: str = "") -> dict[str, int]:
        return {"n": n}

    return server


def main() -> int:
    port = os.environ.get("PORT", "")
    host = os.environ.get("HOST", "127.0.0.1")
    transport = os.environ.get("NOOP_TRANSPORT", "json")
    sessions = os.environ.get("NOOP_SESSIONS", "stateless")
    if transport == "stdio":
        asyncio.run(build_server().run_stdio_async())
        return 0
    loopback = host.startswith("127.") or host == "::1"
    if (
        not port.isdigit()
        or not loopback
        or transport not in ("json", "sse")
        or sessions not in ("stateless", "stateful")
    ):
        print(
            "noop: set PORT to a port number (HOST loopback, NOOP_TRANSPORT json|sse|stdio, "
            "NOOP_SESSIONS stateless|stateful)",
            file=sys.stderr,
        )
        return 2
    server = build_server()
    app = server.streamable_http_app(
        json_response=transport == "json", stateless_http=sessions == "stateless", host=host
    )
    uvicorn.run(app, host=host, port=int(port), log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
