"""``pause``: the pod frozen (SIGSTOP, the cgroup freezer) for ``duration_s``, then thawed
(``faults.pause``). It keeps its connections: clients time out and retry, and the thawed pod serves
the originals and the retries together."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from harness.faultkinds.base import IN_FLIGHT, Before, Kind, PlannedFault, Source, Victim, stratified, victims
from harness.history import FaultKind
from harness.scenario import Scenario


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Counted pauses stratified over the workload."""
    pause = scenario.faults.pause
    if pause is None:
        return []
    rng = random.Random(f"{scenario.seed}:faults:pause")
    victim_of = victims(scenario, "pause", pause.victim)
    return [
        PlannedFault(
            FaultKind.PAUSE,
            after_intents=after,
            duration_s=pause.duration_s,
            hold_dispatch=pause.hold_dispatch,
            victim=victim,
            steps=scenario.target.replicas if victim is None else 1,
            min_uptime_s=pause.min_uptime_s,
        )
        for after in stratified(rng, scenario.workload.intents, pause.count, pause.window)
        for victim in [victim_of()]
    ]


def strike(fault: PlannedFault, struck: Sequence[Victim], before: Before, /, **details: Any) -> list[Victim]:
    """Every victim frozen at once (no read before: a frozen pod loses nothing)."""
    trigger, counted = fault.describe(), fault.counted
    return [
        victim
        for victim in struck
        if victim.pause(duration_s=fault.duration_s, trigger=trigger, counted=counted, **details)
    ]


def heal(victim: Victim) -> None:
    victim.resume()


KIND = Kind(
    kind=FaultKind.PAUSE,
    rank=7,
    means="The pod was frozen by the injector (``faults.pause``) and thawed after ``duration_s``.",
    source=Source.SCHEDULE,
    group=IN_FLIGHT,
    takes_pod_down=True,
    colour="#8e44ad",
    plan=plan,
    strike=strike,
    heal=heal,
    rate=lambda scenario: None,
)
