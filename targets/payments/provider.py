"""A fake payment provider: the upstream a user puts behind ``services.downstream``.

``POST /v1/charges`` with a JSON body creates a charge and answers ``{"id": "ch_N"}``. A call with
an ``Idempotency-Key`` it has seen is answered as the first was, with ``Idempotent-Replayed: true``,
and creates nothing, as Stripe does. ``GET /v1/charges`` lists the charges made. The charges are
kept in memory: the provider is not what the harness kills.

    python provider.py PORT [--cert CERT --key KEY]     (HTTPS with that certificate)
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

charges: list[dict[str, Any]] = []
answered: dict[str, bytes] = {}
lock = threading.Lock()


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: bytes, replayed: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path != "/v1/charges":
            self._send(404, b'{"error":"not found"}')
            return
        with lock:
            body = json.dumps({"data": charges}).encode()
        self._send(200, body)

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/v1/charges" or not isinstance(payload, dict):
            self._send(400, b'{"error":"POST a JSON object to /v1/charges"}')
            return
        key = self.headers.get("Idempotency-Key")
        with lock:
            if key is not None and key in answered:
                self._send(200, answered[key], replayed=True)
                return
            charge = {"id": f"ch_{len(charges) + 1}", **payload}
            charges.append(charge)
            body = json.dumps({"id": charge["id"]}).encode()
            if key is not None:
                answered[key] = body
        self._send(200, body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Provider)
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    print(f"provider listening on 127.0.0.1:{args.port}", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
