"""``services``: what the harness runs beside the target, untouched by faults: PostgreSQL, nginx."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.scenario.section import Section


class PostgresService(Section):
    """A PostgreSQL cluster the harness starts for the run (in the run directory, on 127.0.0.1)."""

    database: str = Field(default="mcp_chaos", pattern=r"^[a-z_][a-z0-9_]{0,62}$")


class BalancerService(Section):
    """A real load balancer between the driver and the replicas, started by the harness.

    ``retry`` is its policy when a backend fails: ``default`` is nginx's own (``error timeout``:
    a POST goes to another replica only if it never reached one), ``non_idempotent`` also
    re-sends a POST that a replica got and never answered (a duplicate the application never
    asked for), ``off`` never re-sends.
    """

    server: Literal["nginx"] = "nginx"
    retry: Literal["default", "non_idempotent", "off"] = "default"
    max_fails: int = Field(default=1, ge=0, le=1000)
    """nginx's passive health check (its default, 1): after this many failed requests a replica gets
    none for ``fail_timeout_s``; 0 never takes one out. With the default, three kills within ten
    seconds leave no replica to send to ("no live upstreams": 502) though each is back in a second."""
    fail_timeout_s: float = Field(default=10.0, gt=0, le=3600)


class Services(Section):
    """What the harness starts beside the target and leaves alone during faults."""

    postgres: PostgresService | None = None
    balancer: BalancerService | None = None
