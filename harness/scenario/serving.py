"""What each service the harness runs beside a target provides a scenario: the one place it is described.

A service (PostgreSQL, the effect sink, the downstream proxy, nginx) is asked for by one section of
the scenario and fills in placeholders the target's command and environment may hold. Those facts
are pure, so the scenario's validation reads them here (which placeholders a string may hold, which
section a placeholder needs, which section a hold site needs); how a service starts, what it hands
the target and what it records is its running side, registered in :mod:`harness.run.services`,
each entry of which names its facts below (a unit test holds the two lists to each other).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.crashpoints.points import Site

if TYPE_CHECKING:
    from harness.scenario.model import Scenario


@dataclass(frozen=True, slots=True)
class ServiceFacts:
    """One service as a scenario sees it."""

    name: str
    """The service's name in the history (``service_started``'s ``service``)."""
    section: str
    """The scenario section that asks for it (dotted), ``None`` there when it is absent."""
    placeholders: Mapping[str, str]
    """The placeholders it fills in, each with what it stands for; a target's command and environment
    may hold them (with the section set)."""
    audit: frozenset[str] = frozenset()
    """Those of :attr:`placeholders` an audit's URL, path or command may hold too."""
    site: Site | None = None
    """The hold site it is, if it is one; ``holds`` says what it holds there."""
    holds: str = ""

    def present(self, scenario: Scenario) -> bool:
        """Whether ``scenario`` asks for this service (its section is set)."""
        return functools.reduce(getattr, self.section.split("."), scenario) is not None


POSTGRES_FACTS = ServiceFacts(
    "postgres",
    "services.postgres",
    {
        "postgres_url": (
            "the run's PostgreSQL database: the target reaches it through the harness's proxy, an audit"
            " directly"
        )
    },
    audit=frozenset({"postgres_url"}),
    site=Site.POSTGRES,
    holds="the harness holds its statements",
)
SINK_FACTS = ServiceFacts(
    "sink",
    "audit.effects.sink",
    {"sink_url": "the effect sink's URL: each call the target makes to it is one effect"},
    site=Site.SINK,
    holds="which hold the reply of a call they recorded",
)
DOWNSTREAM_FACTS = ServiceFacts(
    "downstream",
    "services.downstream",
    {
        "downstream_url": "the downstream proxy as a reverse proxy: http://127.0.0.1:PORT",
        "downstream_hostport": "the downstream proxy's 127.0.0.1:PORT (for a client's proxy setting)",
        "downstream_ca": "the file of the proxy's CA and the system's roots, as the target sees it",
    },
    site=Site.DOWNSTREAM,
    holds="which hold the reply of a call they recorded",
)
BALANCER_FACTS = ServiceFacts("nginx", "services.balancer", {})

SERVICES: tuple[ServiceFacts, ...] = (POSTGRES_FACTS, SINK_FACTS, DOWNSTREAM_FACTS, BALANCER_FACTS)
"""Every service, in the order the harness starts them (nginx, a run's, last: it fronts the replicas)."""

SERVICE_PLACEHOLDERS: tuple[str, ...] = tuple(name for s in SERVICES for name in s.placeholders)
"""Every placeholder a service fills in, in that order."""
