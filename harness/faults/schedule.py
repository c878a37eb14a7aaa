"""The fault schedule: a pure, seeded timeline of what the injector will do.

Same scenario and seed, same schedule: it is computed before the run, without
I/O or clocks, so it can be unit-tested and printed. A fault's trigger is
either workload progress (``after_intents``: when that many intents have been
dispatched, which makes a kill land among in-flight requests however fast the
machine is) or time since the run started (``at_s``). Counted kills are
stratified over the workload; timed kills are a Poisson process.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.scenario import Scenario

MAX_TIMED_FAULTS = 10_000


@dataclass(frozen=True, slots=True)
class PlannedFault:
    kind: str
    after_intents: int | None = None
    at_s: float | None = None
    delay_s: float = 0.0
    """A seeded extra wait between the trigger and the fault."""

    def describe(self) -> str:
        trigger = (
            f"after intent {self.after_intents}" if self.after_intents is not None else f"at {self.at_s:.3f}s"
        )
        return f"{trigger} +{self.delay_s:.3f}s"


def build_schedule(scenario: Scenario) -> list[PlannedFault]:
    """All faults of a run, in trigger order."""
    kill = scenario.faults.kill
    if kill is None:
        return []
    rng = random.Random(f"{scenario.seed}:faults:kill")
    n = scenario.workload.intents
    faults: list[PlannedFault] = []
    if kill.count is not None:
        # Stratified: one kill at a seeded point in each of `count` equal slices of the window.
        # Uniform draws would bunch up now and then, and a kill that lands just after the
        # previous restart hits a pod with little in flight: a different experiment.
        lo = kill.window[0] * n
        width = (kill.window[1] - kill.window[0]) * n / max(1, kill.count)
        for k in range(kill.count):
            after = int(lo + width * k + rng.random() * width)
            faults.append(PlannedFault("kill", after_intents=after, delay_s=rng.uniform(0, kill.jitter_s)))
    else:
        assert kill.mean_interval_s is not None
        t = 0.0
        while len(faults) < MAX_TIMED_FAULTS:
            t += rng.expovariate(1.0 / kill.mean_interval_s)
            if t >= scenario.workload.max_duration_s:
                break
            faults.append(PlannedFault("kill", at_s=round(t, 6), delay_s=rng.uniform(0, kill.jitter_s)))
    return faults
