"""What the conformance suite's scenario servers expect of a client, done with the driver's client.

Each scenario is a short script: open a session, list the tools, call the one the scenario
serves, close. The calls go through :class:`McpHttpClient` with its defaults (2025-11-25,
resuming a closed stream), so a scenario that fails here is a way the driver itself departs
from the protocol, and every finding of a run would carry it. Auth scenarios hand the
context the suite gives (``MCP_CONFORMANCE_CONTEXT``: a pre-registered client, client
credentials, a signing key) to the SDK's flows (:mod:`harness.client.oauth`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from harness.client.host import Declined, Host
from harness.client.http import McpHttpClient
from harness.client.messages import CallResult, ToolCall
from harness.client.oauth import IdentityProvider, OAuthSettings, OAuthTokens, protecting_issuer
from harness.errors import ConformanceFailure, UsageError
from harness.history import Outcome
from harness.scenario.target import http_endpoint

VERSION = "2025-11-25"
"""The version the client offers when the suite names none (``MCP_CONFORMANCE_PROTOCOL_VERSION``, from
0.2); a scenario server of 2025-06-18 answers with its own."""
TIMEOUT_S = 20.0
"""One request's deadline (the suite gives a scenario 30 s)."""
UNSUPPORTED_VERSION = -32022
"""The JSON-RPC error of a 2026-07-28 server that does not speak the version a request names."""
MAX_ROUNDS = 5
"""How many questions (MRTR) one call may ask before the client gives up on it."""
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document the suite's authorization servers accept (SEP-991)."""


Scenario = Callable[[McpHttpClient], Awaitable[None]]


def _ok(what: str, res: CallResult) -> CallResult:
    if res.outcome not in (Outcome.OK, Outcome.TOOL_ERROR):
        said = f"{res.outcome.value} {res.detail or ''} {res.message or ''}".strip()
        raise ConformanceFailure(f"{what}: {said}")
    return res


class Session:
    """One scenario's requests, numbered as a client numbers them."""

    def __init__(self, client: McpHttpClient, context: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.context = context or {}
        """What the suite gave the scenario (``MCP_CONFORMANCE_CONTEXT``)."""
        self._ids = iter(range(1, 1000))

    async def open(self) -> None:
        """2025: the handshake. 2026-07-28: ``server/discover``, asked once more if the server answers
        -32022 (unsupported version) the first time: the client speaks one 2026 version, and a server
        that lists it among those it supports gets it again (SEP-2575's retry)."""
        if not self.client.modern:
            failed = await self.client.initialize(timeout=TIMEOUT_S)
            if failed is not None:
                _ok("initialize", failed)
            return
        found = await self.client.discover(timeout=TIMEOUT_S)
        if found.error_code == UNSUPPORTED_VERSION:
            found = await self.client.discover(timeout=TIMEOUT_S)
        _ok("server/discover", found)

    async def tools(self) -> list[dict[str, Any]]:
        listed = await self.client.request("tools/list", {}, next(self._ids), timeout=TIMEOUT_S)
        res = _ok("tools/list", listed)
        tools = (res.result or {}).get("tools")
        return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []

    async def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """One call, and at 2026-07-28 the rounds that answer its questions (MRTR): each round a new
        request id, the question's arguments and its ``requestState`` echoed as it came."""
        answer: dict[str, Any] | None = None
        for _ in range(MAX_ROUNDS):
            call = ToolCall(name=name, arguments=arguments, request_id=next(self._ids), answer=answer)
            res = await self.client.call_tool(call, timeout=TIMEOUT_S)
            if res.outcome is not Outcome.INPUT_REQUIRED:
                return _ok(f"tools/call {name}", res)
            answer = _answers(res.result or {})
        raise ConformanceFailure(f"tools/call {name}: still asking after {MAX_ROUNDS} answers")


def _answers(question: Mapping[str, Any]) -> dict[str, Any]:
    """What answers an ``input_required`` result: each of its requests answered as a run's client
    answers it (:class:`Host`; one it declines is left out: an input response is a result), and its
    ``requestState`` as it came (none when it had none)."""
    requests = question.get("inputRequests")
    responses: dict[str, Any] = {}
    for name, request in requests.items() if isinstance(requests, dict) else ():
        if isinstance(request, dict):
            params = request.get("params")
            method = str(request.get("method"))
            given = Host().answer(method, params if isinstance(params, dict) else {})
            if not isinstance(given, Declined):
                responses[name] = given
    answer: dict[str, Any] = {"inputResponses": responses}
    if "requestState" in question:
        answer["requestState"] = question["requestState"]
    return answer


async def _initialize(session: Session) -> None:
    await session.tools()


async def _tools_call(session: Session) -> None:
    await session.tools()
    await session.call("add_numbers", {"a": 5, "b": 3})


async def _sse_retry(session: Session) -> None:
    await session.tools()
    await session.call("test_reconnection", {})


async def _elicitation_defaults(session: Session) -> None:
    await session.tools()
    await session.call("test_client_elicitation_defaults", {})


_STUBS: dict[str, Any] = {
    "string": "x",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "object": {},
    "array": [],
}
"""An argument of each JSON Schema type, for a tool called only to be called."""


async def _every_tool(session: Session) -> None:
    """SEP-2243: every tool the listing kept, called with its required arguments; a tool whose
    ``x-mcp-header`` marks are invalid must not be listed, let alone called."""
    for tool in await session.tools():
        given = tool.get("inputSchema")
        schema: dict[str, Any] = given if isinstance(given, dict) else {}
        fields: dict[str, Any] = schema.get("properties") or {}
        required: list[str] = schema.get("required") or []
        arguments = {name: _STUBS.get(str((fields.get(name) or {}).get("type")), "x") for name in required}
        with contextlib.suppress(ConformanceFailure):  # the suite judges what was sent, not the answer
            await session.call(str(tool.get("name")), arguments)


async def _custom_headers(session: Session) -> None:
    """SEP-2243: the calls the suite's context names, each mirroring its marked arguments into
    ``Mcp-Param-*`` headers."""
    listed = {str(tool.get("name")) for tool in await session.tools()}
    for call in session.context.get("toolCalls") or ():
        if isinstance(call, dict) and call.get("name") in listed:
            with contextlib.suppress(ConformanceFailure):
                await session.call(str(call["name"]), dict(call.get("arguments") or {}))


async def _mrtr(session: Session) -> None:
    """SEP-2322: the MRTR loop, the call that asks nothing between, a result without ``resultType``."""
    await session.tools()
    for name in ("echo_state", "unrelated", "no_state", "no_result_type"):
        await session.call(f"test_mrtr_{name}", {})


async def _schema_preserved(session: Session) -> None:
    """The tool's ``inputSchema`` sent back as it came: the client must not rewrite 2020-12 keywords."""
    tools = await session.tools()
    focal = next((t for t in tools if t.get("name") == "json_schema_2020_12_tool"), None)
    if focal is None:
        raise ConformanceFailure("tools/list named no json_schema_2020_12_tool")
    await session.call("json_schema_echo", {"schema": focal.get("inputSchema")})


async def _first_tool(session: Session) -> None:
    """The auth scenarios: whatever tool the protected server offers, called once."""
    tools = await session.tools()
    if tools:
        await session.call(str(tools[0].get("name")), {})


SCENARIOS: dict[str, Callable[[Session], Awaitable[None]]] = {
    "initialize": _initialize,
    "tools_call": _tools_call,
    "sse-retry": _sse_retry,
    "elicitation-sep1034-client-defaults": _elicitation_defaults,
    "json-schema-2020-12-preservation": _schema_preserved,
    "request-metadata": _tools_call,
    "http-standard-headers": _tools_call,
    "json-schema-ref-no-deref": _initialize,
    "sep-2322-client-request-state": _mrtr,
    "http-invalid-tool-headers": _every_tool,
    "http-custom-headers": _custom_headers,
}
LEGACY = frozenset({"json-schema-ref-no-deref"})
"""Scenarios whose server speaks only the 2025 handshake whatever version the suite names (the SDK's
own conformance client pins them to it too)."""


CONTEXT_TYPES: dict[str, type] = {
    "client_id": str,
    "client_secret": str,
    "private_key_pem": str,
    "signing_algorithm": str,
    "idp_client_id": str,
    "idp_id_token": str,
    "idp_token_endpoint": str,
    "toolCalls": list,
}
"""The context's entries the client reads, and the JSON type each must have."""


def endpoint(url: str) -> str:
    """``url`` if it is a scenario server's ``http://HOST:PORT/PATH``; else a one-line UsageError."""
    try:
        return http_endpoint(url, "conformance-client: the URL", "the scenario server's MCP endpoint")
    except ValueError as exc:
        raise UsageError(f"{exc}, got {url!r}") from None


def context_of(text: str | None) -> dict[str, Any]:
    """``MCP_CONFORMANCE_CONTEXT`` as the suite sets it: a JSON object whose entries the client reads
    have their types. A one-line UsageError otherwise, not a traceback in the suite's log."""
    if not text:
        return {}
    try:
        context = json.loads(text)
    except ValueError as exc:  # JSONDecodeError
        raise UsageError(f"conformance-client: MCP_CONFORMANCE_CONTEXT is not JSON ({exc})") from None
    if not isinstance(context, dict):
        raise UsageError(
            f"conformance-client: MCP_CONFORMANCE_CONTEXT must be a JSON object, not {_kind(context)}"
        )
    for name, kind in CONTEXT_TYPES.items():
        value = context.get(name)
        if value is not None and not isinstance(value, kind):
            raise UsageError(
                f"conformance-client: MCP_CONFORMANCE_CONTEXT's {name} must be a JSON "
                f"{'string' if kind is str else 'array'}, not {_kind(value)}"
            )
    return context


def _kind(value: Any) -> str:
    """A JSON value's type as the JSON specification names it."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def oauth_settings(scenario: str, context: Mapping[str, Any]) -> OAuthSettings | None:
    """The OAuth settings an auth scenario's context (:func:`context_of`) asks for; None outside
    ``auth/``."""
    if not scenario.startswith("auth/"):
        return None
    client_id = context.get("client_id")
    secret = context.get("client_secret")
    id_token, idp_endpoint = context.get("idp_id_token"), context.get("idp_token_endpoint")
    if id_token is not None and idp_endpoint is not None:  # SEP-990: its authorization server found later
        idp = IdentityProvider(idp_endpoint, id_token, client_id=context.get("idp_client_id"))
        return OAuthSettings(grant="cross_app_access", client_id=client_id, client_secret=secret, idp=idp)
    if scenario.startswith("auth/client-credentials-"):
        key = context.get("private_key_pem")
        return OAuthSettings(
            grant="client_credentials",
            client_id=client_id,
            client_secret=secret,
            auth_method="private_key_jwt" if key else None,
            private_key=key,
            signing_algorithm=context.get("signing_algorithm") or "ES256",
        )
    return OAuthSettings(
        grant="authorization_code",
        client_id=client_id,
        client_secret=secret,
        client_metadata_url=CLIENT_METADATA_URL,
    )


async def act(url: str, scenario: str, context_json: str | None, version: str | None = None) -> None:
    """Do what ``scenario`` asks of a client against the suite's server at ``url``; a UsageError for a
    URL or a context the client cannot act on."""
    url = endpoint(url)
    context = context_of(context_json)
    settings = oauth_settings(scenario, context)
    script = SCENARIOS.get(scenario, _first_tool if settings is not None else None)
    if script is None:
        known = ", ".join(SCENARIOS)
        raise ConformanceFailure(f"unknown conformance scenario {scenario!r}; known: {known}, auth/*")
    if settings is not None and settings.grant == "cross_app_access" and settings.issuer is None:
        # The grant goes to an authorization server the client is configured with; the suite's context
        # names none, so the one the scenario's server names stands in for that configuration.
        settings = dataclasses.replace(settings, issuer=await protecting_issuer(url))
    auth = None if settings is None else OAuthTokens(url, settings)
    client = McpHttpClient(
        url,
        protocol=VERSION if version is None or scenario in LEGACY else version,
        auth=auth,
        name="conformance",
        host=Host(),
    )
    try:
        session = Session(client, context)
        await session.open()
        await script(session)
        await client.end_session()
    finally:
        await client.aclose()
        if auth is not None:
            await auth.aclose()
