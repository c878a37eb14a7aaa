"""A reference MCP server whose effect is a call to a payment API at an ``https://`` host fixed in its code.

Many servers published for an API (a payment provider, a ticket tracker, a mail service) keep no
store of their own: each tool call is one HTTPS request to the provider, whose host is written in
the code. Nothing in the deployment can point such a server at a fake, and TLS verification is on,
as it should be. The harness still reaches it: ``services.downstream`` hands the server
``HTTPS_PROXY`` and a CA to trust, and httpx (like requests and curl) honours both.

Its one tool, ``charge``, POSTs ``/v1/charges`` to ``https://api.payments.example`` and answers
with the charge's id. By default it sends no ``Idempotency-Key``, so a retry of a charge whose
answer was lost is a second charge; ``PAYMENTS_FORWARD_KEY=1`` sends the tool's
``idempotency_key`` as that header, the fix, for a provider that deduplicates by it
(``provider.py`` does). An ordinary MCP server on the official SDK: it never imports the harness.

PORT, HOST          where to listen (Streamable HTTP, 2026-07-28, stateless, JSON responses;
                    HOST must be a loopback address)
PAYMENTS_TRANSPORT  http (default) | stdio
PAYMENTS_FORWARD_KEY  1: send the intent's key as Idempotency-Key (default: none is sent)
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import httpx
import uvicorn
from mcp.server.mcpserver import MCPServer

API = "https://api.payments.example"
"""The provider, fixed in the code as such servers have it."""


def build_server(forward_key: bool) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("reference-payments", version="1.0.0", log_level="WARNING")
    client = httpx.AsyncClient(base_url=API, timeout=10)  # HTTPS_PROXY and SSL_CERT_FILE are honoured

    @server.tool(description="Charges a customer; memo is stored with the charge. Returns the charge id.")
    async def charge(
        customer_id: str, amount_cents: int, memo: str, idempotency_key: str = ""
    ) -> dict[str, str]:
        headers = {"Idempotency-Key": idempotency_key} if forward_key and idempotency_key else {}
        answer = await client.post(
            "/v1/charges",
            json={"customer": customer_id, "amount": amount_cents, "description": memo},
            headers=headers,
        )
        answer.raise_for_status()
        return {"id": str(answer.json()["id"])}

    return server


def main() -> int:
    port = os.environ.get("PORT", "")
    host = os.environ.get("HOST", "127.0.0.1")
    transport = os.environ.get("PAYMENTS_TRANSPORT", "http")
    server = build_server(os.environ.get("PAYMENTS_FORWARD_KEY") == "1")
    if transport == "stdio":
        asyncio.run(server.run_stdio_async())
        return 0
    if not port.isdigit() or not (host.startswith("127.") or host == "::1") or transport != "http":
        print(
            "payments: set PORT to a port number (HOST loopback, PAYMENTS_TRANSPORT http|stdio)",
            file=sys.stderr,
        )
        return 2
    app = server.streamable_http_app(json_response=True, stateless_http=True, host=host)
    uvicorn.run(app, host=host, port=int(port), log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
