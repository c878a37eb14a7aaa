"""Readiness: is a server answering MCP yet, in which protocol, and if it never will, why not.

A probe speaks the scenario's protocol: ``server/discover`` for 2026-07-28, the
``initialize`` handshake for a 2025 revision, and with ``auto`` both in that
order, as current clients do (a 2025-only server refuses ``server/discover``
one way or another: HTTP 400 "unsupported protocol version" or "no session",
JSON-RPC -32601). The answer decides the protocol of the run.

Waiting only makes sense while nothing listens. A server that answers, but
not as needed (401/403, 404 at the path, a protocol it does not speak), will
not change its mind: once the same such answer has held for ``FAIL_FAST_S``,
the wait ends with what the server said and the scenario field that fixes it.
Neither will a refused connection where the caller knows nothing is coming
(``refused``: a URL the harness does not start, a server that listens on
another port than the one it was given): it ends the wait as fast, with why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from harness.client.http import McpHttpClient
from harness.client.messages import MODERN, SESSION_VERSIONS, CallResult
from harness.client.oauth import OAuthTokens
from harness.history import Detail, Outcome, clip

FAIL_FAST_S = 1.0
"""How long one definitive wrong answer must persist before waiting stops."""


@dataclass(slots=True)
class Readiness:
    """What waiting for a server came to."""

    ready: bool
    after_s: float
    protocol: str | None = None
    """The version the server answered in: 2026-07-28, or the 2025 version it chose."""
    last: CallResult | None = None
    """The last probe's result when not ready: what the server did answer, if anything."""
    exited: bool = False
    """The server's process went away while we waited (``alive`` said so)."""
    fatal: str | None = None
    """A definitive wrong answer, with the fix: waiting longer would not help."""


Refused = Callable[[], str | None]
"""Asked while a probe's connection is refused: why waiting will not help, with the fix (nothing will
listen there: the server runs elsewhere, or listens on another port); None while it may yet listen."""


async def probe(
    url: str,
    *,
    protocol: str,
    headers: Mapping[str, str] | None,
    timeout: float,
    auth: OAuthTokens | None = None,
) -> tuple[str | None, CallResult]:
    """One probe: the protocol the server answered in (None if it did not) and its last answer (with
    ``auth``, a 401 is answered by the OAuth flow first, as every request of the run is)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if protocol in ("auto", MODERN):
        async with McpHttpClient(url, protocol=MODERN, headers=headers, auth=auth) as modern:
            res = await modern.discover(timeout=timeout)
        if res.outcome is Outcome.OK:
            supported = (res.result or {}).get("supportedVersions")
            if not isinstance(supported, list) or MODERN in supported:
                return MODERN, res
            res = CallResult(
                Outcome.PROTOCOL_ERROR,
                Detail.BAD_RESULT,
                status=res.status,
                message=clip(f"server/discover lists supportedVersions {supported}, without {MODERN}"),
            )
        if protocol == MODERN or res.outcome is not Outcome.PROTOCOL_ERROR:
            return None, res
    version = SESSION_VERSIONS[0] if protocol == "auto" else protocol
    async with McpHttpClient(url, protocol=version, headers=headers, auth=auth) as session:
        failed = await session.initialize(timeout=max(0.001, deadline - loop.time()))
        if failed is not None:
            return None, failed
        await session.end_session()  # the probe's session; the driver opens its own
        return session.protocol, CallResult(Outcome.OK)


TRANSIENT_STATUSES = frozenset({408, 425, 429})
"""Answers that say "not now": waited out like a server that does not listen yet (as are 5xx)."""


def diagnose(protocol: str, res: CallResult) -> tuple[str, str] | None:
    """(kind, the fix) for an answer that waiting will not change; None when the server may yet come up.

    The kind (auth, path, protocol, refused) is what must persist for the wait to
    end: a server that puts a request id in every answer still answers the same.
    """
    said = res.message or f"{res.outcome.value} {res.detail or ''}".strip()
    status = res.status
    if res.outcome is Outcome.AUTH_ERROR and "(OAuth: " in said:
        return "auth", f"it answered {said}: check target.auth (its client, secret and scope)"
    if res.outcome is Outcome.AUTH_ERROR:
        return "auth", (
            f"it answered {said}: it wants credentials; set target.headers "
            '(for example Authorization: "Bearer ${TOKEN}", with TOKEN in the environment)'
        )
    if res.outcome is not Outcome.PROTOCOL_ERROR:
        return None  # not listening yet (transport errors, timeouts)
    if status is not None and (status >= 500 or status in TRANSIENT_STATUSES):
        return None  # a server error or "not now" that may pass
    if status == 404:
        return "path", f"it answered {said}: nothing serves MCP at this path; check target.path"
    refuses_protocol = res.detail in (Detail.JSONRPC_ERROR, Detail.BAD_RESULT, Detail.NOT_JSONRPC) or any(
        word in said.lower() for word in ("version", "session", "initializ")
    )
    if not refuses_protocol:
        return "refused", f"it answered {said}: check the target (its URL, headers and what it expects)"
    if protocol == MODERN:
        return "protocol", (
            f"it answered {said} to server/discover: it does not speak 2026-07-28; "
            "set client.protocol: auto (or the 2025 version it speaks)"
        )
    return "protocol", (
        f"it answered {said} to initialize: check client.protocol "
        "(auto tries 2026-07-28 and then the 2025 handshake)"
    )


async def wait_ready(
    url: str,
    *,
    timeout_s: float,
    protocol: str = MODERN,
    headers: Mapping[str, str] | None = None,
    alive: Callable[[], bool] = lambda: True,
    interval_s: float = 0.05,
    probe_timeout_s: float = 2.0,
    auth: OAuthTokens | None = None,
    refused: Refused | None = None,
) -> Readiness:
    """Probe ``url`` until it answers, ``alive()`` turns false, a wrong answer persists, or time is up.

    A refused connection is waited out (a server starting up), unless ``refused`` says why it will
    stay refused: that, persisting as a wrong answer must, ends the wait.

    The deadline bounds the whole wait, probes included (each is cut at
    ``probe_timeout_s`` and at the deadline), so no server can hold it longer.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    last: CallResult | None = None
    fatal_since: tuple[str, float] | None = None
    while True:
        now = time.monotonic()
        if not alive():
            return Readiness(False, now - started, last=last, exited=True)
        left = deadline - now
        if left <= 0:
            return Readiness(False, now - started, last=last)
        spoken, result = await probe(
            url, protocol=protocol, headers=headers, timeout=min(probe_timeout_s, left), auth=auth
        )
        now = time.monotonic()
        if spoken is not None:
            return Readiness(True, now - started, protocol=spoken)
        if result.detail is Detail.CONNECT_REFUSED:
            result = replace(result, message=result.message or f"connection refused: {_nothing_at(url)}")
        # What the server last said is kept when a later probe got no answer at all: the last
        # probe is often cut short by the deadline, and "timeout" would hide the 429 before it.
        if last is None or result.status is not None or last.status is None:
            last = result
        fatal = diagnose(protocol, result)
        if fatal is None and refused is not None and result.detail is Detail.CONNECT_REFUSED:
            why = refused()
            fatal = None if why is None else ("refused connection", why)
        if fatal is None:
            fatal_since = None
        elif fatal_since is None or fatal_since[0] != fatal[0]:
            fatal_since = (fatal[0], now)
        elif now - fatal_since[1] >= FAIL_FAST_S:
            return Readiness(False, now - started, last=last, fatal=fatal[1])
        await asyncio.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def _nothing_at(url: str) -> str:
    """Where nothing listens, for a refused connection's message."""
    parts = urlsplit(url)
    return f"nothing listens on {parts.hostname}:{parts.port}"
