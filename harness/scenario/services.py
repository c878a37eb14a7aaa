"""``services``: what the harness runs beside the target, untouched by faults: PostgreSQL, nginx, the
downstream proxy."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from harness.scenario.placeholders import check_placeholders
from harness.scenario.section import Section


class PostgresService(Section):
    """A PostgreSQL cluster the harness starts for the run (in the run directory, on 127.0.0.1)."""

    database: str = Field(default="mcp_chaos", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    """The database made for the run, which ``{postgres_url}`` names."""


class BalancerService(Section):
    """A real load balancer between the driver and the replicas, started by the harness.

    ``retry`` is its policy when a backend fails: ``default`` is nginx's own (``error timeout``:
    a POST goes to another replica only if it never reached one), ``non_idempotent`` also
    re-sends a POST that a replica got and never answered (a duplicate the application never
    asked for), ``off`` never re-sends.
    """

    server: Literal["nginx"] = "nginx"
    """The balancer's server (nginx, from the machine's packages)."""
    retry: Literal["default", "non_idempotent", "off"] = "default"
    """nginx's ``proxy_next_upstream``: ``default`` (a POST goes to another replica only if it never
    reached one), ``non_idempotent`` (also one a replica got and never answered) or ``off``."""
    max_fails: int = Field(default=1, ge=0, le=1000)
    """nginx's passive health check (its default, 1): after this many failed requests a replica gets
    none for ``fail_timeout_s``; 0 never takes one out. With the default, three kills within ten
    seconds leave no replica to send to ("no live upstreams": 502) though each is back in a second."""
    fail_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    """nginx's passive health check: how long a replica that failed ``max_fails`` times gets no call."""


_SCENARIO_DIR = frozenset({"scenario_dir"})


class DownstreamService(Section):
    """A recording, holding proxy in front of an HTTP API the target calls (``harness.downstream``).

    The target reaches it at ``{downstream_url}`` (plain HTTP, the upstream's paths), or, for a
    server whose ``https://`` host is fixed in its code, through ``HTTPS_PROXY``: the proxy then
    answers TLS for that host with a certificate of its own CA (``{downstream_ca}``), which the
    target is handed in ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE`` and ``NODE_EXTRA_CA_CERTS``.
    Every call is forwarded to ``upstream`` (the user's fake, a sandbox, a local stub) and recorded
    with its status, the run's markers it carried and its idempotency key.
    """

    upstream: str | None = None
    """Where calls go: ``http://127.0.0.1:9000``, ``https://sandbox.example/`` (a base; the call's path is
    appended). None: the proxy answers every call itself, as a provider's sandbox would: 200 and a new
    JSON id, or for an ``Idempotency-Key`` it has seen the first answer again (a replay, no effect)."""
    ca: str | None = None
    """A CA file to verify an ``https://`` upstream with (``{scenario_dir}/ca.pem``; default: the
    system's)."""
    proxy_env: bool = True
    """Hand the target ``HTTPS_PROXY``/``HTTP_PROXY`` (with ``NO_PROXY`` for loopback) and the CA
    variables; ``target.env`` wins where it names the same variable."""
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """How long the upstream may take to answer a call, in all: connecting, sending and reading the
    whole answer (a 504 to the target after that, however steadily it trickles)."""

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str | None) -> str | None:
        if v is not None:
            check_placeholders(v, frozenset(), "services.downstream.upstream")
            if not v.startswith(("http://", "https://")):
                raise ValueError("must be an http:// or https:// URL (where the API's calls go)")
            _check_upstream_url(v)
        return v

    @field_validator("ca")
    @classmethod
    def _ca(cls, v: str | None) -> str | None:
        if v is not None:
            check_placeholders(v, _SCENARIO_DIR, "services.downstream.ca")
        return v


class Services(Section):
    """What the harness starts beside the target and leaves alone during faults."""

    postgres: PostgresService | None = None
    """A throwaway PostgreSQL for the run; ``{postgres_url}`` points at it."""
    balancer: BalancerService | None = None
    """nginx in front of the replicas, instead of the harness's own balancing."""
    downstream: DownstreamService | None = None
    """A recording, holding proxy in front of an HTTP API the target calls (``{downstream_url}``,
    or ``HTTPS_PROXY``)."""


def _check_upstream_url(url: str) -> None:
    """Refuse an upstream no call could be sent to (the proxy sends each call there, path appended)."""
    try:
        host, _ = urlsplit(url).hostname, urlsplit(url).port
    except ValueError as exc:
        raise ValueError(f"is not a URL ({exc}): write http://HOST[:PORT][/BASE]") from None
    if not host or not url.isascii() or not url.isprintable() or " " in url:
        raise ValueError("must name a host in ASCII (punycode), no spaces: http://HOST[:PORT][/BASE]")
