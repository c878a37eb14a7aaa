"""``target``: the system under test: a local command, a Docker image, pods running in Kubernetes, or
an MCP endpoint that already runs (``url``)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from harness.scenario.headers import (
    HEADER_NAME,
    HEADER_VALUE_CONTROL,
    REQUEST_TARGET_BREAK,
    RESERVED_HEADERS,
)
from harness.scenario.placeholders import COMMAND_PLACEHOLDERS, TARGET_PLACEHOLDERS, check_placeholders
from harness.scenario.section import Section


def _as_shell_word(value: Any) -> Any:
    """A YAML scalar as the string a shell would pass (true, 3, 0.3, 2026-07-28); others unchanged."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def http_endpoint(v: str, field: str, what: str) -> str:
    """``v`` if it is ``http://HOST:PORT/PATH`` fit for a request line; else ValueError naming ``field``.

    Any host: the harness reaches it from where it runs (a Service through a port-forward, a staging
    deployment); TLS is not spoken by the harness's client, so ``https`` is refused here rather than
    failing at the first call. An endpoint at the server's root may be written without its ``/``
    (``http://localhost:3000``, as the conformance suite names its servers)."""
    parts = urlsplit(v)
    if parts.path == "" and not parts.query and not parts.fragment:
        v, parts = v + "/", urlsplit(v + "/")
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        parts.scheme != "http"
        or not parts.hostname
        or port is None
        or not parts.path.startswith("/")
        or REQUEST_TARGET_BREAK.search(v) is not None
    ):
        raise ValueError(f"{field} must be http://HOST:PORT/PATH ({what})")
    return v


UserCommand = list[str] | str
"""A command the harness runs for the user (a kill, a restart): an argv list, or one string that
``/bin/sh -c`` runs. Its values are data either way (:func:`harness.pods.factory.user_command`)."""


def _user_command(v: UserCommand | None, field: str) -> UserCommand | None:
    """A command's parts hold only :data:`COMMAND_PLACEHOLDERS` and ``${VAR}``, and no NUL."""
    if v is None:
        return v
    parts = [v] if isinstance(v, str) else v
    if not parts or not parts[0].strip():
        raise ValueError(f"{field} is empty: give the command (a list of words, or one shell line)")
    for part in parts:
        if "\0" in part:
            raise ValueError(f"{field} contains a NUL byte, which no command line can carry")
        check_placeholders(part, COMMAND_PLACEHOLDERS, field, env_refs=True)
    return v


class KubernetesTarget(Section):
    """Pods that already run in a Kubernetes cluster, behind a Service the driver calls.

    The harness starts nothing: it finds the Ready pods that ``selector`` matches,
    kills one at each kill fault (through the API, or by creating a Chaos Mesh
    ``PodChaos``), waits for the replacement to be Ready, and collects the pods'
    logs at the end. See :mod:`harness.pods.kubernetes`.
    """

    context: str | None = Field(default=None, min_length=1)
    """The kubeconfig context (default: its current context)."""
    namespace: str = Field(default="default", pattern=_DNS_LABEL)
    """The namespace of the pods."""
    selector: str = Field(min_length=1, max_length=1000)
    """A label selector (``app=invoices,tier=mcp``): the pods behind the Service."""
    url: str
    """The MCP endpoint the driver calls, through the Service: ``http://HOST:PORT/PATH``."""
    kill: Literal["api", "chaos_mesh"] = "api"
    """``api``: delete the victim pod; ``chaos_mesh``: create a PodChaos (pod-kill) naming it."""
    grace_period_s: int | None = Field(default=0, ge=0, le=3600)
    """Seconds the victim gets after SIGTERM (0: none, a SIGKILL); null: the pod's own
    ``terminationGracePeriodSeconds`` (API kills only: a PodChaos always names its grace period)."""
    kubeconfig: str | None = Field(default=None, min_length=1)
    """The kubeconfig file (default: ``$KUBECONFIG``, then ``~/.kube/config``)."""

    @field_validator("selector")
    @classmethod
    def _one_line_selector(cls, v: str) -> str:
        if any(ord(c) < 32 for c in v) or not v.strip():
            raise ValueError("target.kubernetes.selector must be one line of labels (app=invoices)")
        return v

    @field_validator("url")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        return http_endpoint(v, "target.kubernetes.url", "the Service's MCP endpoint")

    @model_validator(mode="after")
    def _grace_for_chaos_mesh(self) -> KubernetesTarget:
        if self.kill == "chaos_mesh" and self.grace_period_s is None:
            raise ValueError(
                "target.kubernetes.grace_period_s: a PodChaos has no 'the pod's own' grace period; "
                "give seconds (0 kills at once)"
            )
        return self


TokenEndpointAuth = Literal["client_secret_basic", "client_secret_post", "none", "private_key_jwt"]
_ONE_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


class IdentityProviderSpec(Section):
    """``target.auth.idp``: the enterprise's identity provider of ``grant: cross_app_access`` (SEP-990).

    The client holds an ID token the identity provider issued for a person (a single sign-on); at the
    provider's token endpoint it exchanges that for an identity assertion authorization grant (ID-JAG,
    RFC 8693 token exchange) naming the MCP server's authorization server and the MCP server, and
    trades the grant there (RFC 7523 jwt-bearer) for the access token. A new grant is asked for each
    time a token is, so the ID token must live as long as the run.
    """

    token_endpoint: str = Field(pattern=r"^https?://[^\s]+$")
    """The identity provider's token endpoint, where the ID token is exchanged for the grant."""
    id_token: str
    """The ID token to exchange, as ``${VAR}`` of the harness's environment: a person's credential for
    as long as it lives, so the scenario keeps only the variable's name."""
    client_id: str | None = Field(default=None, min_length=1)
    """The client's id at the identity provider, sent with the exchange (none: the provider knows the
    client by the ID token's audience)."""
    client_secret: str | None = Field(default=None, min_length=1)
    """The client's secret at the identity provider (``${VAR}``), sent as HTTP Basic with ``client_id``."""

    @field_validator("id_token")
    @classmethod
    def _id_token_by_name(cls, v: str) -> str:
        if _ONE_ENV_REF.fullmatch(v) is None:
            raise ValueError(
                'target.auth.idp.id_token must be one ${VAR} (id_token: "${IDP_ID_TOKEN}"): an ID token is '
                "a person's credential, so the scenario keeps only the variable's name"
            )
        return v

    @field_validator("client_id", "client_secret")
    @classmethod
    def _env_refs(cls, v: str | None, info: Any) -> str | None:
        if v is not None:
            check_placeholders(v, frozenset(), f"target.auth.idp.{info.field_name}", env_refs=True)
        return v

    @model_validator(mode="after")
    def _secret_needs_id(self) -> IdentityProviderSpec:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("target.auth.idp: client_secret needs client_id (they are sent together)")
        return self


class OAuthSpec(Section):
    """``target.auth``: OAuth 2.1 as the MCP specification protects an HTTP server (the SDK's flows,
    :mod:`harness.client.oauth`). The first request's 401 names the server's protected resource
    metadata; the client finds its authorization server there, gets a token, and sends it on every
    request; a token near its expiry is refreshed, a refused one replaced, a 403 ``insufficient_scope``
    stepped up, each an event of the history, never a failed attempt. Values may be ``${VAR}`` of the
    harness's environment (a secret must be: the scenario keeps only the name); the secret, the key
    and every token are hidden in every output.
    """

    grant: Literal["client_credentials", "authorization_code", "cross_app_access"] = "client_credentials"
    """``client_credentials``: a machine's own credentials (a nightly job's). ``authorization_code``:
    PKCE, with the authorization URL fetched and the code taken from its redirect, for an
    authorization server that approves this client without a person (a staging one).
    ``cross_app_access``: enterprise-managed authorization (SEP-990): an ID token of the enterprise's
    identity provider (``idp``) exchanged there for a grant, which the client (``client_id``,
    ``client_secret``) trades at ``issuer`` for the token."""
    client_id: str | None = Field(default=None, min_length=1)
    """Without it the code flow registers itself (a client ID metadata document, else dynamically)."""
    client_secret: str | None = Field(default=None, min_length=1)
    """The client's secret (``${VAR}``: from the harness's environment, never written anywhere)."""
    token_endpoint_auth: TokenEndpointAuth | None = None
    """How the client authenticates at the token endpoint (default: basic with a secret, else none)."""
    private_key: str | None = Field(default=None, min_length=1)
    """``private_key_jwt``: the PEM key the client signs its assertions with (``${VAR}``)."""
    signing_algorithm: str = Field(default="ES256", pattern=r"^[A-Z0-9]{4,8}$")
    """``private_key_jwt``: the JWS algorithm of the client's assertions."""
    scope: str | None = Field(default=None, min_length=1)
    """The scopes to ask for (space-separated); default: what the server's challenge or metadata names."""
    redirect_uri: str = "http://localhost:3000/callback"
    """The code flow's redirect URI, registered with the authorization server (nothing listens there)."""
    issuer: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """The authorization server the client's credentials belong to: they are sent to no other, whatever
    the MCP server's metadata names (the SDK will require it from 3.0). Without it, the one the
    server names is trusted."""
    client_metadata_url: str | None = Field(default=None, pattern=r"^https://[^\s]+/[^\s]+$")
    """The code flow: the client ID metadata document to use as client id where the server supports it."""
    idp: IdentityProviderSpec | None = None
    """``cross_app_access``: the identity provider and the ID token it exchanges
    (:class:`IdentityProviderSpec`)."""

    @field_validator("client_id", "client_secret", "private_key", "scope")
    @classmethod
    def _env_refs(cls, v: str | None, info: Any) -> str | None:
        if v is not None:
            check_placeholders(v, frozenset(), f"target.auth.{info.field_name}", env_refs=True)
        return v

    @model_validator(mode="after")
    def _grant_needs(self) -> OAuthSpec:
        if self.grant == "client_credentials":
            if self.client_id is None:
                raise ValueError("target.auth: the client_credentials grant needs client_id")
            if self.token_endpoint_auth == "private_key_jwt":
                if self.private_key is None:
                    raise ValueError("target.auth: token_endpoint_auth private_key_jwt needs private_key")
            elif self.client_secret is None:
                raise ValueError(
                    "target.auth: the client_credentials grant needs client_secret (or private_key with "
                    "token_endpoint_auth: private_key_jwt)"
                )
        if self.token_endpoint_auth == "private_key_jwt" and self.grant != "client_credentials":
            raise ValueError("target.auth: private_key_jwt goes with the client_credentials grant")
        if self.grant == "cross_app_access":
            self._cross_app_access_needs()
        elif self.idp is not None:
            raise ValueError("target.auth.idp goes with grant: cross_app_access")
        return self

    def _cross_app_access_needs(self) -> None:
        """The grant is for a confidential client of an authorization server named in the scenario: the
        SDK's client never asks the MCP server which one (the grant and the secret would follow it)."""
        for name, why in (
            ("idp", "the identity provider's token_endpoint and the id_token it exchanges"),
            ("client_id", "the client's id at the authorization server"),
            (
                "client_secret",
                "the client's secret at the authorization server: the grant is for confidential clients",
            ),
            (
                "issuer",
                "the authorization server the grant is for, never taken from the MCP server's metadata",
            ),
        ):
            if getattr(self, name) is None:
                raise ValueError(f"target.auth: the cross_app_access grant needs {name} ({why})")
        if self.token_endpoint_auth not in (None, "client_secret_basic", "client_secret_post"):
            raise ValueError(
                "target.auth: the cross_app_access grant authenticates with client_secret_basic or "
                f"client_secret_post, not {self.token_endpoint_auth}"
            )


_NOT_FOR_KUBERNETES: dict[str, Any] = {
    "command": None,
    "image": None,
    "env": {},
    "port_env": "PORT",
    "data_mount": "/data",
    "path": "/mcp",
}
"""Fields of a target the harness starts, at their defaults; with ``kubernetes`` the pods already run.
(Compared by value, not by whether they were written: the scenario as run is dumped with every default.)"""

_NOT_FOR_URL: dict[str, Any] = {**_NOT_FOR_KUBERNETES, "replicas": 1, "kubernetes": None}
"""With ``url`` the server already runs, started by someone else: nothing of how to start one applies,
and it is one endpoint (replicas behind it are its own business)."""


class TargetSpec(Section):
    """How to start one pod of the system under test: a local command, or a Docker image
    (or, with ``kubernetes``, where to find pods that already run in a cluster).

    With ``image`` the pod is a container on host networking (it must listen on
    127.0.0.1:$PORT); ``command`` then overrides the image's command. Without it,
    ``command`` is run as a child process (the embedded runtime).

    ``transport: stdio`` runs a server that speaks MCP on its stdin and stdout
    instead (a local command, or an image's, attached through the engine; the
    harness is its host).
    """

    command: list[str] | None = Field(default=None, min_length=1)
    """The command that serves MCP (on ``127.0.0.1:$PORT``, or stdio), one word per item; with ``image``,
    it overrides the image's command."""
    image: str | None = Field(default=None, min_length=1)
    """A Docker image that serves the target (host networking; the data directory at ``data_mount``)."""
    transport: Literal["http", "stdio"] = "http"
    """``http``: Streamable HTTP on the port in ``port_env``; ``stdio``: MCP on the command's stdin and
    stdout, the harness its host."""
    data_mount: str = "/data"
    """Docker runtime: where the run's data directory is mounted inside the container."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of the target; values may use placeholders and ``${VAR}`` of the harness's own."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers on every request (``Authorization: "Bearer ${TOKEN}"``); ``${VAR}`` is expanded
    from the harness's environment when the run starts and never written anywhere."""
    port_env: str = Field(default="PORT", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable that carries the port the harness chose for the pod."""
    path: str = "/mcp"
    """The MCP endpoint's path on the pod's port."""
    ready_timeout_s: float = Field(default=30.0, gt=0, le=600)
    """How long a pod may take to answer its first call (``server/discover`` or ``initialize``)."""
    stop_timeout_s: float = Field(default=5.0, gt=0, le=120)
    """At the end of a run: SIGTERM, then SIGKILL after this long."""
    restart_delay_s: float = Field(default=0.5, ge=0, le=600)
    """After the pod dies (killed or crashed), wait this long before starting it again."""
    unavailable_after_s: float = Field(default=20.0, gt=0, le=3600)
    """How long a pod back from a fault may answer no call (every attempt timing out or failing) before
    it is ``unavailable``: a finding, and the run stops starting intents. At least five times the
    slowest call answered before, so a slow server is not called wedged."""
    max_restarts: int = Field(default=100, ge=0, le=100_000)
    """A pod that needs more restarts than this in one run fails the run (a crash loop)."""
    replicas: int = Field(default=1, ge=1, le=16)
    """Pods of this target running side by side (``pod-0`` ...), each on its own port, sharing the
    run's data directory and services: a deployment's replicas. ``client.balance`` spreads the
    attempts over them."""
    kubernetes: KubernetesTarget | None = None
    """Pods already running in a cluster, instead of a command or an image (:class:`KubernetesTarget`)."""
    auth: OAuthSpec | None = None
    """OAuth 2.1 for an HTTP target (:class:`OAuthSpec`); static credentials go in ``headers``."""
    url: str | None = None
    """An MCP endpoint that already runs (``http://HOST:PORT/PATH``): a staging deployment, a docker
    compose stack, a server a test fixture started. The harness starts nothing; it calls the URL
    (through the fault proxy, with stream faults), and kills and restarts it only with
    ``kill_command`` and ``restart_command``."""
    kill_command: UserCommand | None = None
    """With ``url``: what kills the server (``[docker, compose, kill, app]``), for every pod fault of a run,
    crash points and the contract's restart check. Its exit status must be 0; it should return once the
    server is down (what it leaves running in its process group is killed then). Without it, nothing can
    kill the server: pod faults are refused."""
    restart_command: UserCommand | None = None
    """With ``url``: what starts the server again after a kill (``[docker, compose, start, app]``); leave
    it out when something else restarts it (a restart policy, systemd). Either way the harness then
    waits until the URL answers MCP again, for at most ``ready_timeout_s``. One that exits 0 may leave
    the server running in the background (``server &``)."""
    command_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """How long ``kill_command`` and ``restart_command`` may each run before they are killed (and the
    run fails, saying so)."""

    @field_validator("url")
    @classmethod
    def _url_endpoint(cls, v: str | None) -> str | None:
        return None if v is None else http_endpoint(v, "target.url", "an MCP endpoint that already runs")

    @field_validator("kill_command")
    @classmethod
    def _kill_command(cls, v: UserCommand | None) -> UserCommand | None:
        return _user_command(v, "target.kill_command")

    @field_validator("restart_command")
    @classmethod
    def _restart_command(cls, v: UserCommand | None) -> UserCommand | None:
        return _user_command(v, "target.restart_command")

    @field_validator("command")
    @classmethod
    def _command_placeholders(cls, v: list[str] | None) -> list[str] | None:
        for part in v or ():
            if "\0" in part:
                raise ValueError("it contains a NUL byte, which no command line can carry")
            check_placeholders(part, TARGET_PLACEHOLDERS, "target.command")
        return v

    @field_validator("headers")
    @classmethod
    def _header_fields(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not HEADER_NAME.match(name):
                raise ValueError(f"target.headers: {name!r} is not an HTTP header name")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(
                    f"target.headers: {name} is set by the harness itself (it frames every request)"
                )
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"target.headers.{name}: a header value cannot hold a line break or NUL")
            if (bad := HEADER_VALUE_CONTROL.search(value)) is not None:
                raise ValueError(
                    f"target.headers.{name}: a header value cannot hold the control character "
                    f"{bad.group()!r} (HTTP allows none but a tab)"
                )
            check_placeholders(value, frozenset(), f"target.headers.{name}", env_refs=True)
        return v

    @model_validator(mode="after")
    def _one_authorization(self) -> TargetSpec:
        if self.auth is not None and any(name.lower() == "authorization" for name in self.headers):
            raise ValueError(
                "target.auth and target.headers.Authorization both say what to send: keep one "
                "(a static token in headers, or OAuth in auth)"
            )
        return self

    @model_validator(mode="after")
    def _runtime(self) -> TargetSpec:
        if self.url is None and (self.kill_command is not None or self.restart_command is not None):
            raise ValueError(
                "target.kill_command and restart_command are for a server the harness does not start "
                "(target.url); the harness kills and restarts the servers it starts itself"
            )
        if self.url is not None:
            for name, default in _NOT_FOR_URL.items():
                if getattr(self, name) != default:
                    raise ValueError(
                        f"target.{name} does not go with target.url: the server already runs, started "
                        "outside the harness (the endpoint's path is part of target.url)"
                    )
            if self.transport == "stdio":
                raise ValueError("target.url needs transport: http (the harness calls the URL)")
            if self.restart_command is not None and self.kill_command is None:
                raise ValueError(
                    "target.restart_command starts the server again after target.kill_command killed it; "
                    "give the kill command too"
                )
            return self
        if self.kubernetes is not None:
            for name, default in _NOT_FOR_KUBERNETES.items():
                if getattr(self, name) != default:
                    raise ValueError(
                        f"target.{name} does not go with target.kubernetes: the harness starts nothing, "
                        "the pods already run (the endpoint's path is part of target.kubernetes.url)"
                    )
            if self.transport == "stdio":
                raise ValueError("target.kubernetes needs transport: http (the driver calls the Service)")
            return self
        if self.command is None and self.image is None:
            raise ValueError(
                "target needs a command (a local server), an image (a Docker image) or a url "
                "(a server that already runs)"
            )
        if self.transport == "stdio" and self.headers:
            raise ValueError("target.headers are HTTP headers; a stdio target has none")
        if self.transport == "stdio" and self.auth is not None:
            raise ValueError("target.auth is OAuth over HTTP; a stdio target has no authorization")
        if self.transport == "stdio" and self.replicas > 1:
            raise ValueError(
                "target.replicas needs an HTTP target: a stdio server has exactly one client, its host"
            )
        if self.image is not None:
            uses_python = any("{python}" in part for part in self.command or ())
            if uses_python or any("{python}" in v for v in self.env.values()):
                raise ValueError(
                    "{python} is the harness's own interpreter; it does not exist inside an image"
                )
            if not self.data_mount.startswith("/"):
                raise ValueError(f"target.data_mount must be an absolute path, got {self.data_mount!r}")
        return self

    @property
    def runtime(self) -> Literal["process", "docker", "kubernetes", "url"]:
        if self.url is not None:
            return "url"
        if self.kubernetes is not None:
            return "kubernetes"
        return "docker" if self.image is not None else "process"

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars_are_strings(cls, v: Any) -> Any:
        """``INVOICES_MODE: 3`` or ``--set target.env.X=0.3`` mean the string, as in a shell."""
        if isinstance(v, dict):
            return {k: _as_shell_word(x) for k, x in v.items()}
        return v

    @field_validator("env")
    @classmethod
    def _env_placeholders(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} cannot be an environment variable's name")
            if "\0" in value:
                raise ValueError(f"{name} contains a NUL byte, which no environment can carry")
            check_placeholders(value, TARGET_PLACEHOLDERS, f"target.env.{name}", env_refs=True)
        return v

    @property
    def endpoint_path(self) -> str:
        """The request target of every call: ``path``, or the path (and query) of ``url``."""
        if self.url is None:
            return self.path
        parts = urlsplit(self.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    @field_validator("path")
    @classmethod
    def _path_absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"target.path must start with '/', got {v!r}")
        if (bad := REQUEST_TARGET_BREAK.search(v)) is not None:
            raise ValueError(
                f"target.path {v!r} holds {bad.group()!r}: it is sent in the request line, where a space "
                "or a control character would end it (a line break would start a header); percent-encode it"
            )
        return v
