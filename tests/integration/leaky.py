"""An MCP server that echoes its bearer token everywhere, in every encoding, with markup and control
characters around it: the corpus of issue #22's secrets and outputs, run as a real target process.

``python leaky.py MODE`` serves MCP 2026-07-28 over HTTP on 127.0.0.1:$PORT. It
takes the token from ``$LEAKY_TOKEN`` (what the scenario's ``${VAR}`` expanded
to) and also quotes whatever ``Authorization`` header it receives. Every text it
sends (serverInfo, tool descriptions, tool error ``code`` and message, content
text, a handle, its log) carries the token raw, JSON-escaped, URL-encoded (``%``
and ``+``), base64 (alone and as ``user:token``), as HTML entities and in hex,
next to ESC sequences (clear screen, an OSC 8 link, a window title),
``<img src=x onerror=...>``, ``![x](http://127.0.0.1/x)``, ``|``, line breaks,
C0 controls, U+FFFE and (``big``) a code of 1 MB.

Modes: ``echo`` (the tool records each call in ``$LEDGER`` and answers every
third call with a tool error, the others OK: a preflight's two calls succeed),
``big`` (as ``echo``, with a 1 MB code), ``deny`` (401 to everything, quoting
the token, after logging it).
"""

from __future__ import annotations

import base64
import html
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus

MODE = sys.argv[1]
TOKEN = os.environ.get("LEAKY_TOKEN", "")
HOSTILE = (
    "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://127.0.0.1/x\x1b\\link\x1b]8;;\x1b\\"
    " <img src=x onerror=alert(1)> ![x](http://127.0.0.1/x) a|b\nc\r\x00\x01\x1f\ufffe\uffff"
)


def encodings(secret: str) -> list[str]:
    raw = secret.encode()
    return [
        secret,
        json.dumps(secret)[1:-1],
        quote(secret, safe=""),
        quote_plus(secret),
        base64.b64encode(raw).decode(),
        base64.b64encode(b"user:" + raw).decode(),
        html.escape(secret),
        raw.hex(),
    ]


def leak(extra: str = "") -> str:
    return " ".join([*encodings(TOKEN), *(encodings(extra) if extra else []), HOSTILE])


class Handler(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        header = self.headers.get("Authorization", "")
        print(f"request with {header!r}: {leak()}", file=sys.stderr, flush=True)
        if MODE == "deny":
            self.answer(401, {"error": f"invalid token {leak(header)}"})
            return
        self.answer(200, {"jsonrpc": "2.0", "id": body.get("id"), "result": self.result(body)})

    def result(self, msg: dict[str, Any]) -> dict[str, Any]:
        method = msg["method"]
        if method == "server/discover":
            info = {"name": f"leaky {leak()}", "version": leak()}
            return {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "serverInfo": info}
        if method == "tools/list":
            schema = {
                "type": "object",
                "properties": {"memo": {"type": "string", "description": leak()}},
                "required": ["memo"],
            }
            return {
                "tools": [
                    {"name": "create_note", "description": f"Creates a note. {leak()}", "inputSchema": schema}
                ]
            }
        arguments = msg["params"].get("arguments") or {}
        with open(os.environ["LEDGER"], "a") as f:
            f.write(json.dumps({"marker": arguments.get("memo")}) + "\n")
        Handler.calls += 1
        if Handler.calls % 3 == 0:
            code = leak() + ("x" * (1 << 20) if MODE == "big" else "")
            return {
                "content": [{"type": "text", "text": f"refused: {leak()}"}],
                "structuredContent": {"code": code, "retryable": False, "handle": leak()},
                "isError": True,
            }
        return {
            "content": [{"type": "text", "text": f"stored {arguments.get('memo')} {leak()}"}],
            "structuredContent": {"handle": leak(), "id": leak()},
            "isError": False,
        }

    def answer(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
