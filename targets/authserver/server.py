"""A reference OAuth 2.1 authorization server for the OAuth-protected reference target (``target.auth``).

What a staging deployment's authorization server does for a test client, and nothing more:

- ``GET /.well-known/oauth-authorization-server``: its metadata (RFC 8414);
- ``POST /token``: the ``client_credentials`` grant (``client_secret_basic`` or ``client_secret_post``),
  the ``authorization_code`` grant with PKCE (S256), and ``refresh_token``;
- ``GET /authorize``: approves a registered client at once (no person), redirecting to its
  ``redirect_uri`` with a code, the ``state`` and ``iss`` (RFC 9207).

Access tokens are JWTs (HS256, a key shared with the resource server, which checks them without
asking: a target restarted after a kill still takes the tokens it took before), carrying the client
(``sub``), the resource (``aud``), the scopes and an expiry ``--ttl`` seconds away: short, so a run
refreshes them. Each token issued is appended to ``--issued`` (one per line): what a test looks for
in a run's outputs, where none may appear. Codes and refresh tokens are kept in memory: the
authorization server is not what the harness kills.

What a hostile or broken authorization server does, each switched on for the tests of the client:
``--endpoint NAME=URL`` puts an endpoint of its metadata elsewhere (``token_endpoint`` on another
host: the client's credentials would go there); ``--quote-credentials`` quotes the credentials a
refused client sent (its ``Authorization`` header) in the error it answers; ``--token-bytes N``
issues access tokens of at least N bytes.

    python server.py PORT --key KEY --client ID:SECRET [--client ...] [--ttl S] [--scope S] [--issued FILE]
                     [--endpoint NAME=URL ...] [--quote-credentials] [--token-bytes N]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import secrets
import sys
import threading
import time
from typing import Any
from urllib.parse import unquote_plus, urlencode

import jwt
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route


class Issuer:
    """The server's state: its clients, the codes and refresh tokens it handed out."""

    def __init__(
        self,
        url: str,
        key: str,
        clients: dict[str, str],
        ttl_s: float,
        scope: str,
        issued: str | None,
        *,
        endpoints: dict[str, str] | None = None,
        quote_credentials: bool = False,
        token_bytes: int = 0,
    ) -> None:
        self.url = url
        self.key = key
        self.clients = clients
        self.ttl_s = ttl_s
        self.scope = scope
        self.issued = issued
        self.endpoints = endpoints or {}
        self.quote_credentials = quote_credentials
        self.token_bytes = token_bytes
        self.codes: dict[str, dict[str, Any]] = {}
        self.refresh: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "grant_types_supported": ["client_credentials", "authorization_code", "refresh_token"],
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "scopes_supported": self.scope.split(),
            "authorization_response_iss_parameter_supported": True,
        } | self.endpoints

    def token(self, client: str, resource: str | None, scope: str, *, refreshable: bool) -> dict[str, Any]:
        # Exact expiries (a NumericDate may have a fraction): a whole-second exp would end a token up to
        # a second before the expires_in the client was told, and a client refreshing ahead of it late.
        now = time.time()
        claims = {"iss": self.url, "sub": client, "scope": scope, "iat": now, "exp": now + self.ttl_s}
        claims["jti"] = secrets.token_hex(8)
        if self.token_bytes:
            claims["pad"] = "x" * self.token_bytes
        if resource:
            claims["aud"] = resource
        access = jwt.encode(claims, self.key, algorithm="HS256")
        answer: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": self.ttl_s}
        answer["scope"] = scope
        if refreshable:
            answer["refresh_token"] = refresh = secrets.token_urlsafe(24)
            with self.lock:
                self.refresh[refresh] = {"client": client, "resource": resource, "scope": scope}
        if self.issued is not None:
            with self.lock, open(self.issued, "a") as out:
                out.write(access + "\n")
                if refreshable:
                    out.write(answer["refresh_token"] + "\n")
        return answer


def _error(error: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status)


def app(issuer: Issuer) -> Starlette:
    async def metadata(request: Request) -> Response:
        return JSONResponse(issuer.metadata())

    async def authorize(request: Request) -> Response:
        q = request.query_params
        client, redirect, challenge = q.get("client_id"), q.get("redirect_uri"), q.get("code_challenge")
        if client not in issuer.clients or not redirect or not challenge:
            return _error("invalid_request")
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256":
            return _error("unsupported_response_type")
        code = secrets.token_urlsafe(16)
        with issuer.lock:
            issuer.codes[code] = {
                "client": client,
                "redirect": redirect,
                "challenge": challenge,
                "resource": q.get("resource"),
                "scope": q.get("scope") or issuer.scope,
            }
        query = {"code": code, "iss": issuer.url} | ({"state": q["state"]} if "state" in q else {})
        return RedirectResponse(f"{redirect}?{urlencode(query)}", status_code=302)

    async def token(request: Request) -> Response:
        form = await request.form()
        client, secret = _client(request, form)
        if client is None or issuer.clients.get(client) != secret:
            if issuer.quote_credentials:
                said = f"refused credentials: {request.headers.get('authorization', 'none')}"
                return JSONResponse({"error": "invalid_client", "error_description": said}, status_code=401)
            return _error("invalid_client", 401)
        grant = form.get("grant_type")
        if grant == "client_credentials":
            scope = str(form.get("scope") or issuer.scope)
            resource = form.get("resource")
            return JSONResponse(issuer.token(client, _text(resource), scope, refreshable=False))
        if grant == "authorization_code":
            with issuer.lock:
                granted = issuer.codes.pop(str(form.get("code")), None)
            verifier = str(form.get("code_verifier") or "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if granted is None or granted["client"] != client or granted["challenge"] != digest:
                return _error("invalid_grant")
            return JSONResponse(issuer.token(client, granted["resource"], granted["scope"], refreshable=True))
        if grant == "refresh_token":
            with issuer.lock:
                held = issuer.refresh.pop(str(form.get("refresh_token")), None)
            if held is None or held["client"] != client:
                return _error("invalid_grant")
            return JSONResponse(issuer.token(client, held["resource"], held["scope"], refreshable=True))
        return _error("unsupported_grant_type")

    return Starlette(
        routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/authorize", authorize),
            Route("/token", token, methods=["POST"]),
        ]
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _client(request: Request, form: Any) -> tuple[str | None, str | None]:
    """The client and its secret: from HTTP Basic (client_secret_basic) or the form (client_secret_post)."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            client, _, secret = base64.b64decode(encoded).decode().partition(":")
        except ValueError:
            return None, None
        return unquote_plus(client), unquote_plus(secret)
    return _text(form.get("client_id")), _text(form.get("client_secret"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--key", required=True, help="the HS256 key shared with the resource server")
    parser.add_argument("--client", action="append", default=[], help="ID:SECRET of a registered client")
    parser.add_argument("--ttl", type=float, default=300, help="seconds an access token lives")
    parser.add_argument("--scope", default="invoices", help="the scopes it grants (space-separated)")
    parser.add_argument("--issued", help="append each token issued to this file")
    parser.add_argument("--endpoint", action="append", default=[], help="NAME=URL: a metadata entry replaced")
    parser.add_argument("--quote-credentials", action="store_true", help="a refusal quotes the credentials")
    parser.add_argument("--token-bytes", type=int, default=0, help="access tokens of at least N bytes")
    args = parser.parse_args()
    clients = dict(entry.split(":", 1) for entry in args.client)
    issuer = Issuer(
        f"http://127.0.0.1:{args.port}",
        args.key,
        clients,
        args.ttl,
        args.scope,
        args.issued,
        endpoints=dict(entry.split("=", 1) for entry in args.endpoint),
        quote_credentials=args.quote_credentials,
        token_bytes=args.token_bytes,
    )
    print(f"authserver: listening on {issuer.url}", file=sys.stderr, flush=True)
    uvicorn.run(app(issuer), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
