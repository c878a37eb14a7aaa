"""A reference MCP server whose one tool does nothing: the benchmark target.

It measures what the protocol stack costs (SDK, uvicorn, HTTP) and nothing
else, so that a client's throughput against it shows the client's limits, not
the tool's. The tool is async, which saves the SDK a worker-thread hop per call.

PORT, HOST (loopback only) as for every reference target; NOOP_TRANSPORT is
``json`` (default), ``sse`` or ``stdio`` (MCP on stdin and stdout, no PORT);
NOOP_SESSIONS ``stateless`` (default) or ``stateful`` (2025 clients get a session).
NOOP_LEDGER, when set, names a JSON-lines file each call appends ``{"memo", "n"}``
to (buffered, no fsync): the fastest server with an effect a harness can count,
for the tests of fault pacing against a server that answers in well under 1 ms.
NOOP_PARAM_HEADER, when set, marks ``memo`` ``x-mcp-header`` with that token (SEP-2243): a
2026-07-28 client must then mirror it in an ``Mcp-Param-<token>`` header, and the SDK refuses a
call that does not (what a server routing on an argument does).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated, Any, TextIO

import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import Field


def build_server(ledger: TextIO | None = None, param_header: str | None = None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("reference-noop", version="1.0.0", log_level="WARNING")

    said = (
        "Does nothing and returns its argument n. For benchmarks; memo is ignored."
        if ledger is None
        else "Records memo in the ledger and returns its argument n."
    )

    async def noop(n: int = 0, memo: str = "") -> dict[str, int]:
        if ledger is not None:
            ledger.write(json.dumps({"memo": memo, "n": n}) + "\n")
            ledger.flush()  # in the kernel's hands before the answer: a kill cannot lose it
        return {"n": n}

    if param_header:  # the annotation is a value, not a string: the module's annotations are postponed
        noop.__annotations__["memo"] = Annotated[str, Field(json_schema_extra={"x-mcp-header": param_header})]
    server.tool(description=said)(noop)
    return server


def main() -> int:
    port = os.environ.get("PORT", "")
    host = os.environ.get("HOST", "127.0.0.1")
    transport = os.environ.get("NOOP_TRANSPORT", "json")
    sessions = os.environ.get("NOOP_SESSIONS", "stateless")
    path = os.environ.get("NOOP_LEDGER")
    param_header = os.environ.get("NOOP_PARAM_HEADER") or None
    ledger = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (open while serving)
    if transport == "stdio":
        asyncio.run(build_server(ledger, param_header).run_stdio_async())
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
    server = build_server(ledger, param_header)
    app = server.streamable_http_app(
        json_response=transport == "json", stateless_http=sessions == "stateless", host=host
    )
    uvicorn.run(app, host=host, port=int(port), log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
