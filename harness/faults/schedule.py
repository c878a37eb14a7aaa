"""The fault schedule: a pure, seeded timeline of what the injector will do.

Same scenario and seed, same schedule: it is computed before the run, without
I/O or clocks, so it can be unit-tested and printed. A fault's trigger is on one
of two clocks: workload progress (``after_intents``: when that many intents have
been dispatched, which makes a kill land among in-flight requests however fast
the machine is) or time since the run started (``at_s``). Counted kills and
pauses are stratified over the workload; timed kills are a Poisson process.
The injector follows each clock in its own loop, so a fault on one clock never
waits for a fault on the other.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from harness.history import FaultKind
from harness.scenario import HoldDispatch, Scenario

MAX_TIMED_FAULTS = 10_000


@dataclass(frozen=True, slots=True)
class PlannedFault:
    kind: FaultKind
    after_intents: int | None = None
    at_s: float | None = None
    delay_s: float = 0.0
    """A seeded extra wait between the trigger and the fault."""
    duration_s: float = 0.0
    """For a pause: how long the pod stays frozen."""
    hold_dispatch: HoldDispatch = False
    """Once due, whether no new intent starts until this fault has happened: at once (True), only
    when it would otherwise be late ("auto"), or never (see :mod:`harness.faults.pacing`)."""
    victim: int | None = 0
    """The replica it hits; None: every replica at once (a rollout: each in turn)."""
    signal: str = "SIGKILL"
    grace_s: float = 0.0
    """After a signal other than SIGKILL: seconds before SIGKILL."""
    steps: int = 1
    """Pod disruptions it makes: a rollout replaces every replica, one at a time."""
    power_loss: bool = False
    """A kill that is a power loss (``faults.kill.power_loss``): the data directory rolled back after it."""

    @property
    def counted(self) -> bool:
        """On the progress clock: planned whatever the run's length (timed faults are planned
        only for as long as the run lasts)."""
        return self.after_intents is not None

    def describe(self) -> str:
        trigger = (
            f"after intent {self.after_intents}" if self.after_intents is not None else f"at {self.at_s:.3f}s"
        )
        return f"{trigger} +{self.delay_s:.3f}s"

    def victims(self, replicas: int) -> list[int]:
        """The replicas it hits, in order."""
        return list(range(replicas)) if self.victim is None else [self.victim]


def _stratified(rng: random.Random, n: int, count: int, window: tuple[float, float]) -> list[int]:
    """One seeded point in each of ``count`` equal slices of the window (of ``n`` intents).

    Uniform draws would bunch up now and then, and a kill that lands just after the
    previous restart hits a pod with little in flight: a different experiment.
    """
    lo = window[0] * n
    width = (window[1] - window[0]) * n / max(1, count)
    return [int(lo + width * k + rng.random() * width) for k in range(count)]


def build_schedule(scenario: Scenario) -> list[PlannedFault]:
    """All pod faults of a run (kills and pauses): counted ones in trigger order, then timed ones."""
    n = scenario.workload.intents
    replicas = scenario.target.replicas
    counted: list[PlannedFault] = []
    timed: list[PlannedFault] = []
    pause = scenario.faults.pause
    if pause is not None:
        rng = random.Random(f"{scenario.seed}:faults:pause")
        victims = _victims(scenario, "pause", pause.victim)
        counted += [
            PlannedFault(
                FaultKind.PAUSE,
                after_intents=after,
                duration_s=pause.duration_s,
                hold_dispatch=pause.hold_dispatch,
                victim=victim,
                steps=replicas if victim is None else 1,
            )
            for after in _stratified(rng, n, pause.count, pause.window)
            for victim in [victims()]
        ]
    kill = scenario.faults.kill
    if kill is not None:
        rng = random.Random(f"{scenario.seed}:faults:kill")
        victims = _victims(scenario, "kill", kill.victim)
        grace_s = 0.0 if kill.signal == "SIGKILL" else kill.grace_s
        if kill.count is not None:
            for after in _stratified(rng, n, kill.count, kill.window):
                victim = victims()
                counted.append(
                    PlannedFault(
                        FaultKind.KILL,
                        after_intents=after,
                        delay_s=rng.uniform(0, kill.jitter_s),
                        hold_dispatch=kill.hold_dispatch,
                        victim=victim,
                        signal=kill.signal,
                        grace_s=grace_s,
                        steps=replicas if victim is None else 1,
                        power_loss=kill.power_loss,
                    )
                )
        else:
            assert kill.mean_interval_s is not None
            t = 0.0
            while len(timed) < MAX_TIMED_FAULTS:
                t += rng.expovariate(1.0 / kill.mean_interval_s)
                if t >= scenario.workload.max_duration_s:
                    break
                victim = victims()
                timed.append(
                    PlannedFault(
                        FaultKind.KILL,
                        at_s=round(t, 6),
                        delay_s=rng.uniform(0, kill.jitter_s),
                        victim=victim,
                        signal=kill.signal,
                        grace_s=grace_s,
                        steps=replicas if victim is None else 1,
                        power_loss=kill.power_loss,
                    )
                )
    rollout = scenario.faults.rollout
    if rollout is not None:
        rng = random.Random(f"{scenario.seed}:faults:rollout")
        counted += [
            PlannedFault(
                FaultKind.ROLLOUT,
                after_intents=after,
                victim=None,
                signal=rollout.signal,
                grace_s=0.0 if rollout.signal == "SIGKILL" else rollout.grace_s,
                steps=replicas,
            )
            for after in _stratified(rng, n, rollout.count, rollout.window)
        ]
    counted.sort(key=lambda f: (f.after_intents or 0, f.kind))
    return counted + timed


def _victims(scenario: Scenario, name: str, victim: str | int) -> Callable[[], int | None]:
    """Each fault's victim: a given replica, all (None), or a seeded draw on its own stream (so
    adding replicas does not move the faults' trigger points)."""
    if isinstance(victim, int):
        return lambda: victim
    if victim == "all":
        return lambda: None
    rng = random.Random(f"{scenario.seed}:faults:{name}:victim")
    replicas = scenario.target.replicas
    return lambda: rng.randrange(replicas)


def counted_plan(schedule: list[PlannedFault]) -> dict[str, int]:
    """How many faults of each kind the schedule plans whatever the run's length (the counted ones)."""
    planned: Counter[str] = Counter()
    for fault in schedule:
        if fault.counted:
            planned[fault.kind.value] += fault.steps
    return dict(planned)
