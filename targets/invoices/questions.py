"""The multi round-trip question ``create_invoice`` asks when a customer_id names two customers.

MCP 2026-07-28 replaced server-initiated requests with Multi Round-Trip
Requests: the tool answers ``resultType: "input_required"`` with
``inputRequests`` (here one elicitation form, ``customer``) and an opaque
``requestState``; the client calls again, with a new request id, the same
arguments, ``inputResponses`` and the exact ``requestState``.

The rule is deterministic so that a scenario can hit it on purpose: a
``customer_id`` that is a key of :data:`AMBIGUOUS` (``acme``) matches two
customers and is asked about; every other ``customer_id`` is taken as it is.
The question is asked at most :data:`MAX_QUESTIONS` times; an answer that still
names none of the choices then ends the call with a terminal tool error
(``customer_ambiguous``), so no client can be kept in an endless loop, unless
the ``endless_questions`` flaw is on.

The state is sealed by the SDK (AES-GCM, bound to the tool and its arguments,
600 s TTL) before it leaves the process, and checked when it comes back, so
the handler only ever reads state it minted. Under which key is the point of
``INVOICES_REQUEST_STATE``: ``process`` is the SDK's default, a key made at
start-up and held only by this process, so a round answered after a restart
(or by another replica) is refused with JSON-RPC ``-32602``; ``shared`` takes
the key from ``INVOICES_REQUEST_STATE_KEY`` or from a file beside the SQLite
store that every start of the pod reads, so the round survives a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

AMBIGUOUS: dict[str, tuple[str, ...]] = {"acme": ("acme-gmbh", "acme-inc")}
"""A customer name that matches more than one customer, and the customers it matches."""
MAX_QUESTIONS = 2
"""Questions per call before a terminal error: the loop is bounded by the server, not the client."""
QUESTION = "customer"
"""The key of the one input request, which the client's ``inputResponses`` must use."""
STATE_MODES = ("process", "shared")


@dataclass(frozen=True)
class Unresolved:
    """The questions ran out and the answer still names none of the customers."""

    name: str
    choices: tuple[str, ...]


def state_security(mode: str, env: dict[str, str], db: str) -> RequestStateSecurity | None:
    """The key ``requestState`` is sealed with: None for the SDK's per-process default.

    ``shared``: ``INVOICES_REQUEST_STATE_KEY`` (at least 32 characters), else a
    key file beside the SQLite store, created by the first pod that starts and
    read by every later one (linked into place whole, so replicas starting at once agree).
    """
    if mode == "process":
        return None
    key = env.get("INVOICES_REQUEST_STATE_KEY", "")
    if not key:
        if "://" in db:
            raise ValueError(
                "INVOICES_REQUEST_STATE=shared with a database URL needs INVOICES_REQUEST_STATE_KEY"
            )
        key = _key_file(db + ".state-key")
    if len(key) < 32:
        raise ValueError("INVOICES_REQUEST_STATE_KEY must be at least 32 characters of secret randomness")
    return RequestStateSecurity(keys=[key])


def _key_file(path: str) -> str:
    """The key in ``path``, made by whichever replica gets there first.

    The key is written to a file of its own and then hard-linked into place, so a
    replica that finds the file finds it whole (created empty with ``O_EXCL`` and
    written after, a twin starting at the same moment read it empty).
    """
    with contextlib.suppress(FileNotFoundError), open(path, encoding="ascii") as f:
        return f.read().strip()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(secrets.token_hex(32))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # a twin was first: use its key
    finally:
        os.unlink(tmp)
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def resolve_customer(
    customer_id: str, responses: dict[str, Any] | None, state: str | None, *, endless: bool
) -> str | InputRequiredResult | Unresolved:
    """The customer the call is for, the question to ask about it, or Unresolved when asked enough."""
    choices = AMBIGUOUS.get(customer_id)
    if choices is None:
        return customer_id
    asked = 0
    if state is not None:
        asked = int(json.loads(state)["asked"])  # the SDK verified it: this process's own words
        answer = (responses or {}).get(QUESTION)
        content = getattr(answer, "content", None) if getattr(answer, "action", None) == "accept" else None
        chosen = content.get("customer_id") if isinstance(content, dict) else None
        if chosen in choices:
            return str(chosen)
    if asked >= MAX_QUESTIONS and not endless:
        return Unresolved(customer_id, choices)
    form = ElicitRequestFormParams(
        message=f"{customer_id!r} matches {len(choices)} customers: which one is the invoice for?",
        requested_schema={
            "type": "object",
            "properties": {"customer_id": {"type": "string", "enum": list(choices)}},
            "required": ["customer_id"],
        },
    )
    return InputRequiredResult(
        input_requests={QUESTION: ElicitRequest(params=form)},
        request_state=json.dumps({"asked": asked + 1}),
    )
