"""What the harness's client answers when a server asks it something, as the hosts servers meet do.

A server written for Claude Desktop, VS Code or Cursor expects its client to
answer a few requests: ``roots/list`` (the directories it may work in),
``elicitation/create`` (a form a person fills in), ``ping``; and ``sampling`` only
where the host offers a model. A client that answers none of them is not the
client the server meets: one published server asked for the roots on every
call, was refused each time, and logged a stack trace for each (229k lines of a
run's log). So every client of a run and of a check declares and answers what
those hosts do, the same way over HTTP and stdio:

- ``roots``: declared; ``roots/list`` answers the target's data directory (none
  for a server the harness does not start: its directories are not this machine's).
- ``elicitation`` (form mode): declared; a form is accepted with each field's
  ``default`` (SEP-1034) when every required field has one, as a person pressing
  "accept" on what the form proposes; declined otherwise, or always with
  ``client.elicitation: decline``. A URL-mode request (a page to open) is declined.
- ``sampling``: not declared (most hosts offer no model to servers); a server that
  asks anyway is told "User rejected sampling request", the decline the protocol names.
- logging and progress notifications are taken and never answered (notifications have no answer).

Pure: no I/O. The transports (:mod:`harness.client.http`, :mod:`harness.client.stdio`) put the
answer on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

USER_REJECTED = -1
"""The error code the specification gives a client that declines a sampling request."""
METHOD_NOT_FOUND = -32601


@dataclass(frozen=True, slots=True)
class Declined:
    """An answer that is a JSON-RPC error: the protocol's way to say no."""

    code: int
    message: str


Answer = dict[str, Any] | Declined
"""A request's ``result``, or the error that declines it."""


@dataclass(frozen=True, slots=True)
class Host:
    """The answers of one client: its roots and how it meets a form."""

    roots: Sequence[PurePosixPath] = ()
    """Directories offered as roots (absolute, as the server sees them: ``file://`` URIs); none: an
    empty list, still answered."""
    elicitation: Literal["accept", "decline"] = "accept"
    """``accept``: a form's defaults, when they fill every required field; ``decline``: every form."""
    capabilities: Mapping[str, Any] = field(
        default_factory=lambda: {"roots": {"listChanged": False}, "elicitation": {"form": {}}}
    )
    """What ``initialize`` (and 2026-07-28's ``_meta``) declares."""

    def answer(self, method: str, params: Mapping[str, Any]) -> Answer:
        """The answer to a server's request, whatever its method."""
        if method == "ping":
            return {}
        if method == "roots/list":
            return {"roots": [{"uri": root.as_uri(), "name": root.name} for root in self.roots]}
        if method == "elicitation/create":
            return self._form(params)
        if method == "sampling/createMessage":
            return Declined(USER_REJECTED, "User rejected sampling request")
        return Declined(METHOD_NOT_FOUND, f"Method not found: the client does not answer {method}")

    def member(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The answer as a JSON-RPC response's member: ``{"result": ...}`` or ``{"error": ...}``."""
        answer = self.answer(method, params)
        if isinstance(answer, Declined):
            return {"error": {"code": answer.code, "message": answer.message}}
        return {"result": answer}

    def _form(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A form accepted with its defaults, or declined (URL mode, a required field with no default)."""
        if self.elicitation == "decline" or params.get("mode", "form") != "form":
            return {"action": "decline"}
        schema = params.get("requestedSchema")
        fields = schema.get("properties") if isinstance(schema, Mapping) else None
        fields = fields if isinstance(fields, Mapping) else {}
        content = {
            name: spec["default"]
            for name, spec in fields.items()
            if isinstance(spec, Mapping) and "default" in spec
        }
        required = schema.get("required") if isinstance(schema, Mapping) else None
        if isinstance(required, list) and any(name not in content for name in required):
            return {"action": "decline"}
        return {"action": "accept", "content": content}
