"""``rollout``: every replica replaced in turn, as a Deployment's rolling update does (``faults.rollout``):
its signal, the grace period, SIGKILL, the restart and readiness, then the next replica."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from harness.faultkinds.base import POD_FAULT, Before, Kind, PlannedFault, Source, Victim, stratified
from harness.history import FaultKind
from harness.scenario import Scenario


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Counted rollouts stratified over the workload, each a step per replica."""
    rollout = scenario.faults.rollout
    if rollout is None:
        return []
    rng = random.Random(f"{scenario.seed}:faults:rollout")
    kill = scenario.faults.kill
    return [
        PlannedFault(
            FaultKind.ROLLOUT,
            after_intents=after,
            victim=None,
            signal=rollout.signal,
            grace_s=0.0 if rollout.signal == "SIGKILL" else rollout.grace_s,
            steps=scenario.target.replicas,
            # A rollout waits as kills do (``faults.kill.min_uptime_s``): it has no wait of its own.
            min_uptime_s=kill.min_uptime_s if kill is not None else 0.0,
        )
        for after in stratified(rng, scenario.workload.intents, rollout.count, rollout.window)
    ]


def strike(fault: PlannedFault, struck: Sequence[Victim], before: Before, /, **details: Any) -> list[Victim]:
    """One step: the one victim signalled (the injector hands them over one at a time)."""
    return [
        victim
        for victim in struck
        if victim.kill(
            trigger=fault.describe(),
            counted=fault.counted,
            sig=fault.signal,
            grace_s=fault.grace_s,
            kind=FaultKind.ROLLOUT,
            before=before,
            **details,
        )
    ]


KIND = Kind(
    kind=FaultKind.ROLLOUT,
    rank=3,
    means="One replica replaced by a rollout (its signal, then SIGKILL after the grace period).",
    source=Source.SCHEDULE,
    group=POD_FAULT,
    takes_pod_down=True,
    replayed_by_kill=True,
    plan=plan,
    strike=strike,
    reads_before=True,
    stepwise=True,
    rate=lambda scenario: None,
)
