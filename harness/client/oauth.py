"""OAuth 2.1 for an HTTP target: the official SDK's client auth finds the tokens, the fast client sends
them.

The MCP specification protects a remote server with OAuth 2.1: a request without
a token gets a 401 whose ``WWW-Authenticate`` names the protected resource
metadata; the client discovers the authorization server from it, registers (or
is pre-registered, or names a client ID metadata document), gets a token (client
credentials, or an authorization code with PKCE), and on a 403
``insufficient_scope`` asks again with the scope the challenge names (step-up).
Every step of that is the SDK's (``mcp.client.auth``): its providers are
``httpx2.Auth`` flows, generators that yield the requests they need and read the
responses. This module drives such a flow by hand (as
``mcp.shared._httpx_utils.RedirectAwareAuth`` does inside httpx): the flow's own
requests (metadata, registration, token, refresh) go through ``httpx2``, and the
request being authenticated is never sent by it: the challenge that request got
from the harness's client is handed to the flow instead, and the
``Authorization`` header the flow then puts on it is what the fast client sends
from then on. So the driver's hot path stays the pool's, and the flows stay the
SDK's. Enterprise-managed authorization (SEP-990, ``cross_app_access``) is the SDK's
identity assertion provider too; the one step it leaves to its caller, the ID token
exchanged at the identity provider for an ID-JAG (RFC 8693), is :class:`IdJagExchange`.

A token is a secret: each one the flow yields is handed to ``on_secret`` (the
run's redactor) before it is used. A token replaced during a run (it expired, the
server refused it, a step-up) is an event (``token_refreshed``), never a failed
attempt: the refused request is sent again with the new one.

The client's credentials go to the pinned authorization server only
(``target.auth.issuer``, :mod:`harness.client.issuer`): with one pinned,
authorization server metadata whose endpoints (or issuer) are on another origin
ends the flow before any request goes there, and so does any request of the flow
but discovery bound elsewhere.
What the authorization server answers is bounded (:data:`MAX_ANSWER_BYTES`,
:data:`MAX_TOKEN_BYTES`), and a flow that fails says why in one line
(:attr:`OAuthTokens.failure`): the SDK's own log of it, a traceback, is not printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx2
import pydantic

from harness.client.issuer import metadata_off_issuer, plain, request_off_issuer
from harness.errors import HarnessError, TargetError
from harness.events import TokenRefreshed
from harness.history import HistoryWriter, clip

AUTH_TIMEOUT_S = 30.0
"""How long one request of the flow (metadata, registration, token) may take."""
MAX_ANSWER_BYTES = 1024 * 1024
"""The most of one answer of the authorization server the flow reads: metadata, a registration and
tokens are kilobytes, and a server that sends more ends the flow, said so, not the harness's memory."""
MAX_TOKEN_BYTES = 16 * 1024
"""The longest ``Authorization`` header taken from a flow: every request carries it, and servers refuse
longer heads (Node's and h11's limit is 16 KiB for the whole head, nginx's 8 KiB a line), which a
run would only see as a target that never answers."""
REFRESH_AHEAD_S = 5.0
"""A token this close to its expiry (or to the last quarter of its life, if shorter) is refreshed
before the next call, not after a 401."""


@dataclass(frozen=True, slots=True)
class Challenge:
    """What a refused request got back: its status (401, 403) and its ``WWW-Authenticate``."""

    status: int
    www_authenticate: str | None


class HeadlessApproval:
    """The authorization step of the code flow without a person: fetch the authorization URL and take
    the code from the redirect it answers with.

    An authorization server that approves a registered test client without asking (a staging
    deployment's, the conformance suite's) answers the authorization URL with a redirect to the
    client's ``redirect_uri`` carrying ``code`` and ``state``; nothing listens there, and nothing
    needs to.
    """

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self._http = http
        self._answer: dict[str, list[str]] | None = None

    async def redirect(self, authorization_url: str) -> None:
        async with self._http.stream("GET", authorization_url, follow_redirects=False) as response:
            location = response.headers.get("location")  # the answer's body is never read
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise TargetError(
                f"the authorization server answered HTTP {response.status_code} to the authorization "
                "request, not a redirect with a code: target.auth.grant authorization_code needs a server "
                "that approves this client without a person (use client_credentials otherwise)"
            )
        query = parse_qs(urlsplit(location).query)
        if "code" not in query:
            error = query.get("error", ["no code"])[0]
            raise TargetError(f"the authorization server's redirect carries no code ({error})")
        self._answer = query

    async def callback(self) -> object:
        from mcp.shared.auth import AuthorizationCodeResult

        answer, self._answer = self._answer or {}, None

        def first(name: str) -> str | None:
            values = answer.get(name)
            return values[0] if values else None

        return AuthorizationCodeResult(code=first("code") or "", state=first("state"), iss=first("iss"))


class OAuthTokens:
    """The ``Authorization`` header for one MCP endpoint, found and kept fresh by an SDK auth flow.

    One per run, shared by every client of it (the driver's workers, readiness probes, the final
    read): a flow runs one at a time, and a client refused with a header another client has since
    replaced adopts the new one instead of running the flow again.
    """

    def __init__(
        self,
        url: str,
        settings: OAuthSettings,
        *,
        on_secret: Callable[[str], None] | None = None,
        history: HistoryWriter | None = None,
    ) -> None:
        """``url``: the MCP endpoint the tokens are for (the pod's own, not a fault proxy's: the
        protected resource metadata names it). ``settings``: how the client gets them (its
        ``issuer``, when set, is the only authorization server its requests go to). ``on_secret``:
        called with each token before it is used. ``history``: where a replaced token is written
        (``token_refreshed``)."""
        _quiet_sdk_logs()
        self.url = url
        self.issuer = settings.issuer
        self._http = httpx2.AsyncClient(timeout=AUTH_TIMEOUT_S)
        self._provider = make_provider(settings, url, on_secret)(self._http)
        self._on_secret = on_secret
        self._lock = asyncio.Lock()
        self.header: str | None = None
        """``Bearer …``, once a flow gave one; None before the first challenge."""
        self.failure: str | None = None
        """Why the last flow found no token (the authorization server's answer), for the attempt."""
        self._unrefreshable: str | None = None
        """A token whose refresh ahead of its expiry failed: replaced at the server's 401 instead."""
        self.history = history

    def stale(self) -> bool:
        """Whether the token expires within :data:`REFRESH_AHEAD_S` and the flow can refresh it (a
        refresh token); one that cannot is replaced at the server's 401."""
        context = getattr(self._provider, "context", None)
        expiry = getattr(context, "token_expiry_time", None)
        if context is None or expiry is None or self.header is None or self.header == self._unrefreshable:
            return False
        lifetime = getattr(context.current_tokens, "expires_in", None) or REFRESH_AHEAD_S * 4
        ahead = min(REFRESH_AHEAD_S, lifetime / 4)  # a token of seconds is not refreshed at every call
        return expiry - time.time() < ahead and bool(context.can_refresh_token())

    async def authorize(
        self, challenge: Challenge | None, *, sent_with: str | None, version: str | None
    ) -> bool:
        """Run the flow once: with a challenge, answer it (401: find a token; 403 ``insufficient_scope``:
        step up); without one, refresh a token near its expiry. ``sent_with``: the header the refused
        request carried; if another client has replaced it since, that header is taken as it is. True
        when the header changed, so the refused request is worth sending once more. Never raises: a
        flow that failed leaves the header as it was and says why in :attr:`failure`."""
        async with self._lock:
            if self.header is not None and self.header != sent_with:
                return True
            before = self.header
            request = httpx2.Request("POST", self.url, headers={"MCP-Protocol-Version": version or ""})
            context = getattr(self._provider, "context", None)
            if challenge is None and context is not None and context.token_expiry_time is not None:
                # The SDK refreshes a token only once it is past its expiry: one this close to it is
                # marked so for the flow, which then refreshes it before any request is refused.
                context.token_expiry_time = min(context.token_expiry_time, time.time() - 0.001)
            try:
                await self._run(request, challenge)
            except Exception as exc:  # the SDK's OAuthFlowError and its kin: the flow's own verdict
                self.failure = clip(_reason(exc))
                return False
            header = request.headers.get("Authorization")
            if header is None or header == before:
                self.failure = "the flow ended without a token"
                if challenge is None:
                    self._unrefreshable = before  # not again for this token: the server's 401 will say
                return False
            if len(header) > MAX_TOKEN_BYTES:
                self.failure = (
                    f"the authorization server issued a token of {len(header):,} bytes: the harness takes "
                    f"up to {MAX_TOKEN_BYTES:,}, since every request carries it in a header and servers "
                    "refuse longer heads"
                )
                if context is not None:
                    context.clear_tokens()  # never sent: the next challenge asks for another
                return False
            self.failure = None
            self._found(header)
            if before is not None and self.history is not None:
                self.history.emit(TokenRefreshed(why=_why(challenge)))
            self.header = header
            return True

    async def _run(self, request: httpx2.Request, challenge: Challenge | None) -> None:
        """Drive the SDK's flow for ``request``; its own requests go through :attr:`_http`, the
        refused request is answered with ``challenge`` instead of being sent."""
        flow = self._provider.async_auth_flow(request)
        try:
            await self._through(flow, await flow.__anext__(), request)
            if challenge is not None:
                www = challenge.www_authenticate
                headers = {} if www is None else {"WWW-Authenticate": www}
                refused = httpx2.Response(challenge.status, headers=headers, request=request)
                await self._through(flow, await flow.asend(refused), request)
        except StopAsyncIteration:
            pass  # the flow gave up on the challenge: what it set on the request is all there is
        finally:
            await flow.aclose()

    def _found(self, header: str) -> None:
        """Hand a new token (and the refresh token beside it) to the redactor before any use."""
        if self._on_secret is None:
            return
        self._on_secret(header.partition(" ")[2] or header)
        tokens = getattr(getattr(self._provider, "context", None), "current_tokens", None)
        if tokens is not None and tokens.refresh_token:
            self._on_secret(tokens.refresh_token)

    async def _through(
        self,
        flow: AsyncGenerator[httpx2.Request, httpx2.Response],
        outgoing: httpx2.Request,
        request: httpx2.Request,
    ) -> httpx2.Request:
        """Send the flow's own requests until it yields the request being authenticated; each one
        checked against the pinned issuer before it goes, each answer read within bounds."""
        while outgoing is not request:
            if self.issuer is not None:
                credentials = "authorization" in outgoing.headers
                _refuse(
                    request_off_issuer(
                        outgoing.method, str(outgoing.url), self.issuer, credentials=credentials
                    )
                )
            response = await self._send(outgoing)
            outgoing = await flow.asend(response)
        return outgoing

    async def _send(self, outgoing: httpx2.Request) -> httpx2.Response:
        """The authorization server's answer to ``outgoing``, read whole up to
        :data:`MAX_ANSWER_BYTES` (TargetError beyond), and, for metadata with an issuer pinned,
        checked: every endpoint it names is on the issuer's origin."""
        streamed = await self._http.send(outgoing, stream=True)
        try:
            body = await _bounded(streamed)
        finally:
            await streamed.aclose()
        if self.issuer is not None and outgoing.method == "GET" and streamed.status_code == 200:
            metadata = _json_object(body)
            if metadata is not None and "issuer" in metadata:
                _refuse(metadata_off_issuer(metadata, self.issuer))
        kept = [(k, v) for k, v in streamed.headers.raw if k.lower() not in _FRAMING]
        answer = httpx2.Response(streamed.status_code, headers=kept, content=body, request=outgoing)
        answer.next_request = streamed.next_request  # a redirect the SDK may follow within the origin
        return answer

    async def aclose(self) -> None:
        await self._http.aclose()


_FRAMING = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
"""Headers of an answer as it was framed on the wire: the flow is handed its body decoded and whole."""
_SDK_LOGGER = "mcp.client.auth"


def _quiet_sdk_logs() -> None:
    """Keep the SDK's OAuth flows from printing: each failed flow is logged with its traceback
    (``logger.exception``), which Python's last-resort handler writes on stderr, once per probe of a
    target, before the harness's one-line error says the same. The reason reaches :attr:`failure`."""
    logger = logging.getLogger(_SDK_LOGGER)
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def _reason(exc: Exception) -> str:
    """Why a flow failed, as one line can say it: the harness's own refusal as it is, a request that
    failed, a document of the authorization server that is not valid (its first error, without the
    values, which may be secrets), the SDK's verdict with its kind."""
    if isinstance(exc, HarnessError):
        return exc.message
    if isinstance(exc, httpx2.HTTPError):
        return f"a request to the authorization server failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "it"
        return f"the authorization server's answer is not a valid {exc.title}: {where}: {first['msg']}"
    return f"{type(exc).__name__}: {exc}"


async def _bounded(response: httpx2.Response) -> bytes:
    """The body of a streamed answer of the authorization server, decoded; TargetError past
    :data:`MAX_ANSWER_BYTES`."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            request = response.request
            raise TargetError(
                f"the authorization server's answer to {request.method} {plain(str(request.url))} is over "
                f"{MAX_ANSWER_BYTES // 1024} KiB, which no metadata, registration or token is"
            )
    return bytes(body)


def _refuse(why: str | None) -> None:
    """End the flow with ``why``, if there is one."""
    if why is not None:
        raise TargetError(why)


def _json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object; None when it is not one."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _why(challenge: Challenge | None) -> str:
    """Why a token was replaced: near its expiry, refused (401), or too narrow (403, step-up)."""
    if challenge is None:
        return "expiring"
    return "step_up" if challenge.status == 403 else "refused"


class _Memory:
    """Token storage for one run: tokens live as long as the client (the SDK's ``TokenStorage``)."""

    def __init__(self, client_info: object = None) -> None:
        self._tokens: object = None
        self._client_info = client_info

    async def get_tokens(self) -> object:
        return self._tokens

    async def set_tokens(self, tokens: object) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> object:
        return self._client_info

    async def set_client_info(self, client_info: object) -> None:
        self._client_info = client_info


@dataclass(frozen=True, slots=True)
class IdentityProvider:
    """The enterprise identity provider of ``cross_app_access`` (SEP-990): where the client exchanges
    the ``id_token`` it holds for an ID-JAG, authenticated as ``client_id`` (with ``client_secret``,
    HTTP Basic) where the provider asks it to be."""

    token_endpoint: str
    id_token: str
    client_id: str | None = None
    client_secret: str | None = None


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """How a client gets its tokens (``target.auth``, or a conformance scenario's context).

    ``grant``: ``client_credentials`` (a machine's credentials: a nightly job's),
    ``authorization_code`` (PKCE; approved without a person by :class:`HeadlessApproval`) or
    ``cross_app_access`` (SEP-990: an ID token of ``idp`` exchanged for an ID-JAG, traded at ``issuer``).
    ``auth_method``: how the client authenticates at the token endpoint (``client_secret_basic``,
    ``client_secret_post``, ``none``, ``private_key_jwt`` with ``private_key``). Without
    ``client_id`` the code flow registers itself, by ``client_metadata_url`` (a client ID metadata
    document) where the server supports it, else dynamically.
    """

    grant: str = "client_credentials"
    client_id: str | None = None
    client_secret: str | None = None
    auth_method: str | None = None
    private_key: str | None = None
    signing_algorithm: str = "ES256"
    scope: str | None = None
    redirect_uri: str = "http://localhost:3000/callback"
    client_metadata_url: str | None = None
    client_name: str = "mcp-chaos"
    issuer: str | None = None
    """The authorization server the client's credentials may be sent to (None: the one the MCP
    server names, as the conformance suite's servers expect; ``cross_app_access`` needs it)."""
    idp: IdentityProvider | None = None
    """``cross_app_access``: the identity provider and the ID token it exchanges."""

    def secrets(self) -> list[str]:
        """What no output may show: the client secret, the private key, the ID token and the client's
        secret at the identity provider."""
        idp = self.idp
        held = (self.client_secret, self.private_key) + (
            () if idp is None else (idp.id_token, idp.client_secret)
        )
        return [value for value in held if value]


@contextlib.contextmanager
def _unpinned_issuer(settings: OAuthSettings) -> Iterator[None]:
    """Without ``issuer`` the SDK warns that 3.0 will require it: the scenario's documented choice
    (target.auth.issuer), not something to print on every run."""
    with warnings.catch_warnings():
        if settings.issuer is None:
            warnings.filterwarnings("ignore", message="Omitting `issuer` is deprecated")
        yield


def make_provider(
    settings: OAuthSettings, url: str, on_secret: Callable[[str], None] | None = None
) -> Callable[[httpx2.AsyncClient], httpx2.Auth]:
    """The SDK provider :class:`OAuthTokens` drives, for ``settings`` and the MCP endpoint ``url``;
    ``on_secret`` is handed each ID-JAG of ``cross_app_access`` before it is sent."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
    from pydantic import AnyUrl

    def provider(http: httpx2.AsyncClient) -> httpx2.Auth:
        if settings.grant == "cross_app_access":
            return _cross_app_access(settings, url, IdJagExchange(http, settings, on_secret))
        if settings.grant == "client_credentials":
            if settings.client_id is None:
                raise TargetError("target.auth: the client_credentials grant needs client_id")
            if settings.auth_method == "private_key_jwt":
                if settings.private_key is None:
                    raise TargetError("target.auth: private_key_jwt needs private_key (PEM)")
                jwt = SignedJWTParameters(
                    issuer=settings.client_id,
                    subject=settings.client_id,
                    signing_key=settings.private_key,
                    signing_algorithm=settings.signing_algorithm,
                )
                with _unpinned_issuer(settings):
                    return PrivateKeyJWTOAuthProvider(
                        url,
                        _Memory(),  # type: ignore[arg-type]
                        settings.client_id,
                        jwt.create_assertion_provider(),
                        scope=settings.scope,
                        issuer=settings.issuer,
                    )
            if settings.client_secret is None:
                raise TargetError("target.auth: the client_credentials grant needs client_secret")
            post = settings.auth_method == "client_secret_post"
            method = "client_secret_post" if post else "client_secret_basic"
            with _unpinned_issuer(settings):
                return ClientCredentialsOAuthProvider(
                    url,
                    _Memory(),  # type: ignore[arg-type]
                    settings.client_id,
                    settings.client_secret,
                    token_endpoint_auth_method=method,  # type: ignore[arg-type]
                    scope=settings.scope,
                    issuer=settings.issuer,
                )
        approval = HeadlessApproval(http)
        registered = None
        if settings.client_id is not None:
            method = settings.auth_method or ("client_secret_basic" if settings.client_secret else "none")
            registered = OAuthClientInformationFull(
                client_id=settings.client_id,
                client_secret=settings.client_secret,
                redirect_uris=[AnyUrl(settings.redirect_uri)],
                token_endpoint_auth_method=method,
            )
        return OAuthClientProvider(
            url,
            OAuthClientMetadata(
                client_name=settings.client_name,
                redirect_uris=[AnyUrl(settings.redirect_uri)],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=settings.scope,
            ),
            _Memory(registered),  # type: ignore[arg-type]
            redirect_handler=approval.redirect,
            callback_handler=approval.callback,  # type: ignore[arg-type]
            client_metadata_url=settings.client_metadata_url,
        )

    return provider


def _cross_app_access(settings: OAuthSettings, url: str, exchange: IdJagExchange) -> httpx2.Auth:
    """The SDK's SEP-990 provider: it asks ``exchange`` for an ID-JAG each time it needs a token and
    trades it at the pinned issuer's token endpoint (RFC 7523 jwt-bearer)."""
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    if settings.client_id is None or settings.client_secret is None or settings.issuer is None:
        raise TargetError("target.auth: the cross_app_access grant needs client_id, client_secret and issuer")
    post = settings.auth_method == "client_secret_post"
    return IdentityAssertionOAuthProvider(
        url,
        _Memory(),  # type: ignore[arg-type]
        settings.client_id,
        settings.client_secret,
        settings.issuer,
        exchange,
        scope=settings.scope,
        token_endpoint_auth_method="client_secret_post" if post else "client_secret_basic",
    )


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"


class IdJagExchange:
    """Leg 1 of cross-app access (SEP-990), which the SDK leaves to its caller: the ID token exchanged
    at the identity provider for an identity assertion authorization grant (RFC 8693), naming the
    authorization server (``audience``) and the MCP server (``resource``) it is for.

    Its answer is read within :data:`MAX_ANSWER_BYTES`, the grant handed to ``on_secret`` before the
    SDK sends it on, and a refusal ends the flow with the provider's error in one line.
    """

    def __init__(
        self, http: httpx2.AsyncClient, settings: OAuthSettings, on_secret: Callable[[str], None] | None
    ) -> None:
        if settings.idp is None:
            raise TargetError("target.auth: the cross_app_access grant needs idp (token_endpoint, id_token)")
        self._http = http
        self._idp = settings.idp
        self._scope = settings.scope
        self._on_secret = on_secret

    async def __call__(self, audience: str, resource: str) -> str:
        """The ID-JAG for the authorization server ``audience`` and the MCP server ``resource``."""
        idp = self._idp
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "requested_token_type": ID_JAG_TYPE,
            "subject_token": idp.id_token,
            "subject_token_type": ID_TOKEN_TYPE,
            "audience": audience,
            "resource": resource,
        }
        if self._scope:
            form["scope"] = self._scope
        auth = None
        if idp.client_secret is not None and idp.client_id is not None:
            auth = httpx2.BasicAuth(quote(idp.client_id, safe=""), quote(idp.client_secret, safe=""))
        elif idp.client_id is not None:
            form["client_id"] = idp.client_id
        async with self._http.stream("POST", idp.token_endpoint, data=form, auth=auth) as response:
            body = await _bounded(response)
        answer = _json_object(body) or {}
        if response.status_code != 200:
            said = ": ".join(str(answer[k]) for k in ("error", "error_description") if answer.get(k))
            raise TargetError(
                f"the identity provider refused the token exchange (HTTP {response.status_code}"
                f"{', ' + clip(said) if said else ''}): check target.auth.idp and that the ID token is "
                "current"
            )
        grant = answer.get("access_token")
        if not isinstance(grant, str) or not grant or answer.get("issued_token_type") != ID_JAG_TYPE:
            raise TargetError(
                "the identity provider's answer to the token exchange holds no ID-JAG (access_token with "
                f"issued_token_type {ID_JAG_TYPE})"
            )
        if self._on_secret is not None:
            self._on_secret(grant)
        return grant


async def protecting_issuer(url: str) -> str:
    """The authorization server the MCP endpoint ``url`` names in its protected resource metadata
    (RFC 9728, at its well-known places): for a client given no issuer (the conformance suite's
    cross-app access scenario names none); TargetError when none says."""
    from mcp.client.auth.utils import build_protected_resource_metadata_discovery_urls
    from mcp.shared.auth import ProtectedResourceMetadata

    async with httpx2.AsyncClient(timeout=AUTH_TIMEOUT_S) as http:
        for place in build_protected_resource_metadata_discovery_urls(None, url):
            try:
                async with http.stream("GET", place) as response:
                    body = await _bounded(response)
            except httpx2.HTTPError as exc:
                raise TargetError(
                    f"the protected resource metadata of {plain(url)} could not be read: "
                    f"{type(exc).__name__}: {exc}"
                ) from None
            if response.status_code != 200:
                continue
            with contextlib.suppress(pydantic.ValidationError):
                found = ProtectedResourceMetadata.model_validate_json(body).authorization_servers
                if found:
                    return str(found[0])
    raise TargetError(f"{plain(url)} names no authorization server in protected resource metadata")
