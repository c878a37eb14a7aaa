"""What every service of a run is: made with the wiring (its ports chosen then), it fills in its
placeholders, hands the target what it needs, and runs as an async context manager.

The wiring (:mod:`harness.run.wiring`) knows no service by name: it makes each one the scenario asks
for, in the registry's order (:mod:`harness.run.services.registry`), before anything starts, so every
placeholder is known when the pods are made; it enters their :meth:`Service.running` in that order
and they stop in reverse. What a service records in the history (``service_started``,
``service_stopped``) it writes itself, as it starts and stops.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harness.crashpoints.router import Router
from harness.history import HistoryWriter
from harness.scenario import Scenario, ServiceFacts


@dataclass(frozen=True, slots=True)
class Given:
    """What a service is made with, when the wiring is made (before anything starts)."""

    scenario: Scenario
    run_dir: Path
    router: Router
    """Where a hold site reports its points (every run has one)."""
    history: HistoryWriter
    """The run's history: what the service records as it starts and stops."""
    redact: Callable[[str], str]
    """The scenario's secrets hidden (what a service writes of a call may hold them)."""
    fronted: Sequence[int] = ()
    """The ports a service in front of the replicas sends to: their fault proxies', else theirs."""


@dataclass(frozen=True, slots=True)
class Handed:
    """What a service gives the target: its placeholders' values (as the target sees them), the
    variables put in its environment (``target.env`` wins), and run files a container sees read-only."""

    placeholders: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Mapping[Path, str] = field(default_factory=dict)


class Service(abc.ABC):
    """One service of one run: its ports are chosen when it is made."""

    facts: ClassVar[ServiceFacts]
    """What the scenario sees of it: its section, its placeholders (:mod:`harness.scenario.serving`)."""
    fronts: ClassVar[bool] = False
    """Whether it stands in front of the replicas: made once the ports it sends to are known, and
    started by a run only (a contract check and ``init`` call replica 0 directly), after the fault
    proxies and before the pods."""
    logs: ClassVar[tuple[str, ...]] = ()
    """Files of the run directory it writes its log to: redacted with the pods' once it stopped (and
    by the watchdog should the harness be SIGKILLed). Listed whether or not the scenario runs it."""

    @abc.abstractmethod
    def __init__(self, given: Given) -> None: ...

    def handed(self) -> Handed:
        """What it gives the target (nothing, unless it says otherwise)."""
        return Handed()

    def audit_values(self) -> Mapping[str, str]:
        """The values of its placeholders an audit may hold (``facts.audit``), as the harness reaches them."""
        return {}

    @property
    def entry_port(self) -> int | None:
        """Where a run's clients call instead of each replica (a balancer's port); None: the replicas."""
        return None

    @abc.abstractmethod
    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The service started (and recorded so, where it records it), stopped on the way out."""
