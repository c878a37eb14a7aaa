"""The bytes of every request the HTTP client sends: one head builder, the JSON-RPC bodies.

Streamable HTTP carries part of MCP in the request head: ``MCP-Protocol-Version``
(from 2025-06-18, once a version is agreed), ``Mcp-Session-Id`` (a 2025 session),
``Mcp-Method`` and ``Mcp-Name`` (2026-07-28, which a server checks against the
body), the intent's idempotency key when the scenario puts it in a header, the
attempt's W3C ``traceparent`` (``client.trace``: also in ``_meta``), and
the scenario's own headers (``Authorization``). Every head, whether a POST, the
GET that resumes a stream or the DELETE that ends a session, a handshake or not,
is built by :meth:`Framing.head`, so no request can miss a header the others
carry. Pure: no I/O; what protocol version and session a request is in is the
caller's to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from harness._version import __version__
from harness.client.messages import MODERN
from harness.scenario.headers import CONTROL

_VERSION_HEADER_SINCE = "2025-06-18"
"""2025-03-26 had no ``MCP-Protocol-Version`` header (versions are dates: they compare as strings)."""
_VERB_HEADERS = {  # what a request says of its body and of the answers it takes, by verb
    "POST": "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
    "GET": "Accept: text/event-stream\r\n",
    "DELETE": "",
}


_LEADS_KEPT = 64
"""How many heads' starts :meth:`Framing._lead` keeps before it starts again."""


class Credentials(Protocol):
    """What holds the ``Authorization`` of every request (:class:`harness.client.oauth.OAuthTokens`)."""

    header: str | None


class Framing:
    """Requests to one endpoint, with the scenario's headers and idempotency-key placement."""

    __slots__ = (
        "_capabilities",
        "_client_info",
        "_extra",
        "_key_header",
        "_key_meta",
        "_leads",
        "_meta",
        "_starts",
        "auth",
    )

    def __init__(
        self,
        host: str,
        port: int,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        key_header: str | None = None,
        key_meta: str | None = None,
        capabilities: Mapping[str, Any] | None = None,
        auth: Credentials | None = None,
    ) -> None:
        self._starts = {
            verb: f"{verb} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{accept}"
            for verb, accept in _VERB_HEADERS.items()
        }
        """Each verb's request line and the headers that only depend on the verb."""
        self._leads: dict[tuple[str, str | None, str | None, str | None, str | None], str] = {}
        """Heads' starts already built (:meth:`_lead`)."""
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._key_header = key_header
        self._key_meta = key_meta
        self._client_info = {"name": "mcp-chaos", "version": __version__}
        self._capabilities = dict(capabilities or {})
        """What the client declares it can answer (``elicitation``): none unless it has a handler."""
        self._meta: dict[str, Any] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self._capabilities,
            "io.modelcontextprotocol/clientInfo": self._client_info,
        }
        """2026-07-28's per-request ``_meta``: what a 2025 client said once, in ``initialize``."""
        self.auth = auth
        """Where the ``Authorization`` an OAuth flow found is (``target.auth``): read at each request,
        since it changes during a run (a refresh, a step-up) and every client of the run shares it."""

    def head(
        self,
        verb: str,
        *,
        version: str | None,
        session: str | None,
        length: int | None = None,
        method: str | None = None,
        name: str | None = None,
        key: str | None = None,
        last_event_id: str | None = None,
        traceparent: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> bytes:
        """The request line and headers of one request, up to and including the blank line.

        ``version``: the protocol version agreed (None before one is: ``initialize``).
        ``method``, ``name``: 2026-07-28's ``Mcp-Method`` and ``Mcp-Name`` (a name only with a method).
        ``key``: the intent's idempotency key, sent only if the scenario puts it in a header.
        ``traceparent``: the attempt's W3C trace context (``client.trace``).
        ``extra``: this request's own headers (``Mcp-Param-*``).
        """
        for value in (key, last_event_id, traceparent):
            if value is not None and CONTROL.search(value) is not None:  # a line break starts a header
                raise ValueError(f"a header value holds a control character: {value!r:.200}")
        head = self._leads.get((verb, version, session, method, name))
        if head is None:
            head = self._lead(verb, version, session, method, name)
        if key is not None and self._key_header is not None:
            head += f"{self._key_header}: {key}\r\n"
        if last_event_id is not None:
            head += f"Last-Event-ID: {last_event_id}\r\n"
        if traceparent is not None:
            head += f"traceparent: {traceparent}\r\n"
        if extra:
            for field, value in extra.items():
                if CONTROL.search(field) is not None or CONTROL.search(value) is not None:
                    raise ValueError(f"a header holds a control character: {field!r:.100}: {value!r:.100}")
                head += f"{field}: {value}\r\n"
        head += self._extra
        if self.auth is not None and self.auth.header is not None:
            head += f"Authorization: {self.auth.header}\r\n"
        if length is not None:
            head += f"Content-Length: {length}\r\n"
        return (head + "\r\n").encode()

    def _lead(
        self, verb: str, version: str | None, session: str | None, method: str | None, name: str | None
    ) -> str:
        """The start of a head, up to the headers that change from one call to the next: the same for
        every call of a run to one tool, so it is built (and its values checked) once and kept (a
        handful of sessions, methods and tools: :data:`_LEADS_KEPT` at most)."""
        for value in (session, method, name):
            if value is not None and CONTROL.search(value) is not None:  # a line break starts a header
                raise ValueError(f"a header value holds a control character: {value!r:.200}")
        head = self._starts[verb]
        if version is not None and version >= _VERSION_HEADER_SINCE:
            head += f"MCP-Protocol-Version: {version}\r\n"
        if session is not None:
            head += f"Mcp-Session-Id: {session}\r\n"
        if method is not None:
            head += f"Mcp-Method: {method}\r\n"
            if name is not None:
                head += f"Mcp-Name: {name}\r\n"
        if len(self._leads) >= _LEADS_KEPT:  # sessions come and go across restarts: keep it bounded
            self._leads.clear()
        self._leads[(verb, version, session, method, name)] = head
        return head

    def reauthorized(self, request: bytes) -> bytes:
        """``request`` with the current ``Authorization`` in place of the one it was built with: the
        same request, sent again once an OAuth flow found a new token."""
        head, sep, body = request.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"authorization:")]
        if self.auth is not None and self.auth.header is not None:
            lines.append(f"Authorization: {self.auth.header}".encode())
        return b"\r\n".join(lines) + sep + body

    def request(
        self,
        method: str,
        params: dict[str, Any],
        request_id: int,
        *,
        version: str,
        session: str | None,
        name: str | None = None,
        progress: bool = False,
        key: str | None = None,
        traceparent: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> bytes:
        """A JSON-RPC request as a POST, with the key where the scenario puts it.

        2026-07-28 is stateless: every request carries the ``_meta`` a 2025 client
        sends once, and names its method (and tool) in the head too. A ``traceparent``
        goes in both places a server may read it: the head (HTTP middleware) and
        ``_meta`` (the MCP handler, and stdio, which has no head).
        """
        if version == MODERN:
            meta = {**self._meta, "progressToken": request_id} if progress else self._meta
            if key is not None and self._key_meta is not None:
                meta = {**meta, self._key_meta: key}
            if traceparent is not None:
                meta = {**meta, "traceparent": traceparent}
            params = {**params, "_meta": meta}
            named: str | None = method
        else:
            meta = {"progressToken": request_id} if progress else {}
            if key is not None and self._key_meta is not None:
                meta[self._key_meta] = key
            if traceparent is not None:
                meta["traceparent"] = traceparent
            if meta:
                params = {**params, "_meta": meta}
            named = None
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        head = self.head(
            "POST",
            version=version,
            session=session,
            length=len(body),
            method=named,
            name=name,
            key=key,
            traceparent=traceparent,
            extra=extra,
        )
        return head + body

    def initialize(self, request_id: int, version: str) -> bytes:
        """The 2025 handshake's request, offering ``version``; its head precedes any agreement."""
        params = {
            "protocolVersion": version,
            "capabilities": self._capabilities,
            "clientInfo": self._client_info,
        }
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params})
        return self.head("POST", version=None, session=None, length=len(body)) + body

    def notification(self, method: str, *, version: str, session: str | None) -> bytes:
        """A JSON-RPC notification (no id) as a POST."""
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        return self.head("POST", version=version, session=session, length=len(body)) + body

    def reply(
        self, request_id: object, message: Mapping[str, Any], *, version: str, session: str | None
    ) -> bytes:
        """The client's answer to a server's request (``elicitation/create``), as a POST: ``message`` is
        the JSON-RPC ``result`` or ``error`` member."""
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, **message})
        return self.head("POST", version=version, session=session, length=len(body)) + body

    def resume(
        self, last_event_id: str, *, version: str, session: str | None, traceparent: str | None = None
    ) -> bytes:
        """The GET that asks for the rest of a broken event stream (2025 resumability): part of the
        attempt whose stream broke, so it carries that attempt's ``traceparent``."""
        return self.head(
            "GET", version=version, session=session, last_event_id=last_event_id, traceparent=traceparent
        )

    def delete(self, *, version: str, session: str) -> bytes:
        """The DELETE that ends a 2025 session."""
        return self.head("DELETE", version=version, session=session, length=0)
