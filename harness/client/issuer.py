"""The pinned authorization server (``target.auth.issuer``): which URLs of an OAuth flow may be sent
the client's credentials.

The README promises that the client's credentials go to the authorization server the scenario pins,
and to no other, whatever the MCP server or that authorization server's metadata names. The SDK
checks that the metadata names the pinned issuer, not where its endpoints are: a token endpoint on
another host had the client's secret sent there. So, with an issuer pinned, every URL of the
metadata a client may send something to must be on the issuer's origin (scheme, host and port), and
every request of the flow but discovery must go there; each refusal names both hosts. Pure: the
flow's driver (:mod:`harness.client.oauth`) asks before each request and on each metadata document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def metadata_off_issuer(metadata: Mapping[str, Any], issuer: str) -> str | None:
    """Why authorization server metadata must not be used with ``issuer`` pinned: the first URL it
    names (:func:`endpoints`) on another origin, with both hosts; None when all are on the issuer's."""
    pinned = origin(issuer)
    for name, url in endpoints(metadata):
        if origin(url) != pinned:
            return (
                f"target.auth.issuer: the authorization server's metadata puts {name} on {host(url)}, "
                f"not on the pinned issuer's host {host(issuer)}: the client's credentials go to the "
                "pinned authorization server only"
            )
    return None


def request_off_issuer(method: str, url: str, issuer: str, *, credentials: bool) -> str | None:
    """Why a request of the flow must not be sent with ``issuer`` pinned: one bound for another origin
    (both hosts named). None for one to the issuer's, and for discovery: a GET that carries no
    ``credentials`` (the MCP server's resource metadata is on its own host)."""
    if (method == "GET" and not credentials) or origin(url) == origin(issuer):
        return None
    return (
        f"target.auth.issuer: the OAuth flow would send {method} {plain(url)} to {host(url)}, not to the "
        f"pinned issuer's host {host(issuer)}: the client's credentials go to the pinned authorization "
        "server only"
    )


def endpoints(metadata: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every URL of authorization server metadata a client may send something to, by name: its
    issuer, each ``*_endpoint`` (token, authorization, registration, revocation, introspection,
    device, pushed authorization, userinfo…), ``jwks_uri``, and each of ``mtls_endpoint_aliases``.
    Pages for people (``op_policy_uri``, ``service_documentation``) are not among them."""
    for name, value in metadata.items():
        if isinstance(value, str) and (name in ("issuer", "jwks_uri") or name.endswith("_endpoint")):
            yield name, value
    aliases = metadata.get("mtls_endpoint_aliases")
    for name, value in aliases.items() if isinstance(aliases, dict) else ():
        if isinstance(value, str):
            yield f"mtls_endpoint_aliases.{name}", value


def origin(url: str) -> tuple[str, str, int | None] | None:
    """``url``'s scheme, host and port (the scheme's default when none is written); None when it has
    no host or an invalid port, which no origin equals."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    return None if not parts.hostname else (scheme, parts.hostname, port)


def host(url: str) -> str:
    """The host (and port) of ``url`` as a message names it, without user information."""
    return urlsplit(url).netloc.rpartition("@")[2] or url


def plain(url: str) -> str:
    """``url`` for a message: without user information, query or fragment (a code, a state)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, host(url), parts.path, "", ""))
