"""Every service the harness runs beside a target, in the order a run starts them (it stops them in
reverse): PostgreSQL (and its proxy), the effect sink, the downstream proxy; then, in front of the
replicas, nginx. The wiring makes and starts those the scenario asks for, and names none of them."""

from __future__ import annotations

from harness.run.services.balancer import NginxWired
from harness.run.services.base import Service
from harness.run.services.downstream import DownstreamWired
from harness.run.services.postgres import PostgresWired
from harness.run.services.sink import SinkWired
from harness.scenario import Scenario

KINDS: tuple[type[Service], ...] = (PostgresWired, SinkWired, DownstreamWired, NginxWired)
"""Every kind of service, in start order; each one's facts are in ``harness.scenario.SERVICES``, in the
same order (a unit test holds them to each other)."""


def wanted(scenario: Scenario, *, fronts: bool) -> list[type[Service]]:
    """The kinds ``scenario`` asks for, beside the target (``fronts=False``) or in front of its replicas."""
    return [kind for kind in KINDS if kind.fronts == fronts and kind.facts.present(scenario)]


def logs() -> tuple[str, ...]:
    """Every service's log files, run or not (their names in the run directory)."""
    return tuple(name for kind in KINDS for name in kind.logs)
