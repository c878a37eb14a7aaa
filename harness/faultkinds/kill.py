"""``kill``: the pod is signalled (SIGKILL: a crash; SIGTERM: a graceful stop with a grace period),
then restarted by its supervisor (``faults.kill``)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from harness.faultkinds.base import (
    POD_FAULT,
    Before,
    Kind,
    PlannedFault,
    Source,
    Victim,
    stratified,
    victims,
)
from harness.history import FaultKind
from harness.scenario import Scenario

MAX_TIMED_FAULTS = 10_000
"""Timed kills planned at most, however long the run may last."""


def plan(scenario: Scenario) -> list[PlannedFault]:
    """Counted kills stratified over the workload, or timed kills as a Poisson process for as long as
    the run may last."""
    kill = scenario.faults.kill
    if kill is None:
        return []
    n, replicas = scenario.workload.intents, scenario.target.replicas
    rng = random.Random(f"{scenario.seed}:faults:kill")
    victim_of = victims(scenario, "kill", kill.victim)
    grace_s = 0.0 if kill.signal == "SIGKILL" else kill.grace_s
    planned: list[PlannedFault] = []

    def one(**when: Any) -> PlannedFault:
        victim = victim_of()  # drawn before the delay: the seeded order every plan has had
        return PlannedFault(
            FaultKind.KILL,
            **when,
            delay_s=rng.uniform(0, kill.jitter_s),
            victim=victim,
            signal=kill.signal,
            grace_s=grace_s,
            steps=replicas if victim is None else 1,
            power_loss=kill.power_loss,
            min_uptime_s=kill.min_uptime_s,
        )

    if kill.count is not None:
        for after in stratified(rng, n, kill.count, kill.window):
            planned.append(one(after_intents=after, hold_dispatch=kill.hold_dispatch))
        return planned
    assert kill.mean_interval_s is not None
    t = 0.0
    while len(planned) < MAX_TIMED_FAULTS:
        t += rng.expovariate(1.0 / kill.mean_interval_s)
        if t >= scenario.workload.max_duration_s:
            break
        planned.append(one(at_s=round(t, 6)))
    return planned


def strike(fault: PlannedFault, struck: Sequence[Victim], before: Before, /, **details: Any) -> list[Victim]:
    """Every victim signalled at once; the checkpoint read is recorded with the first that was."""
    killed = []
    for victim in struck:
        if victim.kill(
            trigger=fault.describe(),
            counted=fault.counted,
            sig=fault.signal,
            grace_s=fault.grace_s,
            power_loss=fault.power_loss,
            before=before,
            **details,
        ):
            killed.append(victim)
            before = None  # one read for the fault, ahead of its first kill
    return killed


def rate(scenario: Scenario) -> str | None:
    """Timed kills are planned once due: their mean interval, not their count."""
    kill = scenario.faults.kill
    if kill is None or kill.mean_interval_s is None:
        return None
    return f"kills every {kill.mean_interval_s:g}s on average while intents are dispatched"


KIND = Kind(
    kind=FaultKind.KILL,
    rank=1,
    means="The pod was signalled by the injector (``faults.kill``): SIGKILL, a crash, or a graceful stop.",
    source=Source.SCHEDULE,
    group=POD_FAULT,
    takes_pod_down=True,
    replayed_by_kill=True,
    colour="#c0392b",
    plan=plan,
    strike=strike,
    reads_before=True,
    rate=rate,
)
