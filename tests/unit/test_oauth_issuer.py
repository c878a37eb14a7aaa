"""The pinned authorization server: which URLs of an OAuth flow may be sent the client's credentials."""

from __future__ import annotations

import pytest

from harness.client.issuer import metadata_off_issuer, request_off_issuer

ISSUER = "https://auth.example.com"


def metadata(**entries: object) -> dict[str, object]:
    """The reference authorization server's metadata for ISSUER, with ``entries`` replaced."""
    return {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "response_types_supported": ["code"],
        "op_policy_uri": "https://docs.example.org/policy",  # a page for people: anywhere
        "service_documentation": "https://docs.example.org/",
    } | entries


@pytest.mark.parametrize(
    "name",
    [
        "issuer",
        "token_endpoint",
        "authorization_endpoint",
        "registration_endpoint",
        "revocation_endpoint",
        "introspection_endpoint",
        "device_authorization_endpoint",
        "pushed_authorization_request_endpoint",
        "userinfo_endpoint",
        "jwks_uri",
    ],
)
@pytest.mark.parametrize(
    ("elsewhere", "shown"),
    [
        ("https://steal.example.net/x", "steal.example.net"),
        ("https://auth.example.com:8443/token", "auth.example.com:8443"),  # another port
        ("http://auth.example.com/token", "auth.example.com"),  # another scheme: a downgrade
        ("https://auth.example.com.evil.net/token", "auth.example.com.evil.net"),
        ("https://user:pw@evil.net/token", "evil.net"),  # the user information is not shown
        ("https://auth.example.com:99999/token", "auth.example.com:99999"),  # no port at all
        ("/token", "/token"),  # relative: no origin
    ],
)
def test_an_endpoint_of_the_metadata_elsewhere_is_refused_naming_both_hosts(
    name: str, elsewhere: str, shown: str
) -> None:
    why = metadata_off_issuer(metadata(**{name: elsewhere}), ISSUER)
    assert why == (
        f"target.auth.issuer: the authorization server's metadata puts {name} on {shown}, not on the "
        "pinned issuer's host auth.example.com: the client's credentials go to the pinned authorization "
        "server only"
    )
    assert "pw" not in why


def test_an_mtls_alias_elsewhere_is_refused() -> None:
    aliases = {"token_endpoint": "https://mtls.example.net/token"}
    why = metadata_off_issuer(metadata(mtls_endpoint_aliases=aliases), ISSUER)
    assert why is not None
    assert "mtls_endpoint_aliases.token_endpoint on mtls.example.net" in why


@pytest.mark.parametrize(
    ("issuer", "endpoint"),
    [
        (ISSUER, f"{ISSUER}/token"),
        (ISSUER, "https://AUTH.example.com:443/oauth/token"),  # the same origin written otherwise
        ("https://auth.example.com/tenant-1", "https://auth.example.com/tenant-1/token"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/token"),
        ("http://[::1]:8080", "http://[::1]:8080/token"),
    ],
)
def test_metadata_whose_endpoints_are_the_issuer_s_is_taken(issuer: str, endpoint: str) -> None:
    document = metadata(issuer=issuer, token_endpoint=endpoint, authorization_endpoint=endpoint)
    assert metadata_off_issuer(document, issuer) is None


def test_a_request_of_the_flow_elsewhere_is_refused_but_discovery() -> None:
    """A token request to the MCP server's own origin (the SDK's fallback without metadata) carries
    the credentials: refused. Discovery is a GET without any, and resource metadata is on the MCP
    server's host."""
    token = "https://mcp.example.com/token?x=1"
    why = request_off_issuer("POST", token, ISSUER, credentials=False)
    assert why == (
        "target.auth.issuer: the OAuth flow would send POST https://mcp.example.com/token to "
        "mcp.example.com, not to the pinned issuer's host auth.example.com: the client's credentials go "
        "to the pinned authorization server only"
    )
    discovery = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    assert request_off_issuer("GET", discovery, ISSUER, credentials=False) is None
    assert request_off_issuer("GET", discovery, ISSUER, credentials=True) is not None
    assert request_off_issuer("POST", f"{ISSUER}/token", ISSUER, credentials=True) is None
