"""``mcp-chaos conformance-client``: input the suite (or a person) gives it that it cannot act on ends in
one line and a non-zero exit, before any request, never in a traceback."""

from __future__ import annotations

import pytest

from tests.helpers.cli import mcp_chaos

URL = "http://127.0.0.1:9/mcp"  # nothing listens there: every case is refused before a request


@pytest.mark.parametrize(
    ("context", "scenario", "message"),
    [
        ("{not json", "initialize", "MCP_CONFORMANCE_CONTEXT is not JSON (Expecting property name"),
        ("[1, 2]", "initialize", "MCP_CONFORMANCE_CONTEXT must be a JSON object, not an array"),
        ('"text"', "initialize", "MCP_CONFORMANCE_CONTEXT must be a JSON object, not a string"),
        ('{"client_id": 5}', "auth/metadata-default", "client_id must be a JSON string, not a number"),
        ('{"client_secret": {}}', "auth/basic-cimd", "client_secret must be a JSON string, not an object"),
        (
            '{"client_id": "c", "private_key_pem": true}',
            "auth/client-credentials-jwt",
            "private_key_pem must be a JSON string, not a boolean",
        ),
        ('{"toolCalls": 5}', "http-custom-headers", "toolCalls must be a JSON array, not a number"),
        (
            '{"client_id": "c", "client_secret": "s", "idp_id_token": 7, "idp_token_endpoint": "http://i/t"}',
            "auth/cross-app-access-complete-flow",
            "idp_id_token must be a JSON string, not a number",
        ),
    ],
)
def test_a_context_the_client_cannot_act_on_is_one_line(context: str, scenario: str, message: str) -> None:
    done = mcp_chaos(
        "conformance-client", URL, "--scenario", scenario, env={"MCP_CONFORMANCE_CONTEXT": context}
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mcp-chaos: error: conformance-client: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "http://127.0.0.1/mcp",
        "https://127.0.0.1:8443/mcp",
        "127.0.0.1:3000",
        "http://:80/",
    ],
)
def test_a_url_that_is_not_an_http_endpoint_with_a_port_is_one_line(url: str) -> None:
    done = mcp_chaos("conformance-client", url, "--scenario", "initialize")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "conformance-client: the URL must be http://HOST:PORT/PATH" in done.stderr
    assert repr(url) in done.stderr
