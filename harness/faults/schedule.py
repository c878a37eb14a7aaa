"""The fault schedule: a pure, seeded timeline of what the injector will do.

Same scenario and seed, same schedule: it is computed before the run, without
I/O or clocks, so it can be unit-tested and printed. A fault's trigger is on one
of two clocks: workload progress (``after_intents``: when that many intents have
been dispatched, which makes a kill land among in-flight requests however fast
the machine is) or time since the run started (``at_s``). Each scheduled kind
places its own faults (its ``plan``, :mod:`harness.faultkinds`), on a seeded
stream of its own: counted kills and pauses are stratified over the workload;
timed kills are a Poisson process. The injector follows each clock in its own
loop, so a fault on one clock never waits for a fault on the other.
"""

from __future__ import annotations

from collections import Counter

from harness.faultkinds.base import PlannedFault
from harness.faultkinds.registry import SCHEDULED, kind_of
from harness.scenario import Scenario


def build_schedule(scenario: Scenario) -> list[PlannedFault]:
    """All pod faults of a run (every scheduled kind's): counted ones in trigger order, then timed ones."""
    planned: list[PlannedFault] = []
    for kind in SCHEDULED:
        plan = kind_of(kind).plan
        assert plan is not None  # a scheduled kind has one (tests/unit/test_fault_kinds.py)
        planned += plan(scenario)
    counted = sorted((f for f in planned if f.counted), key=lambda f: (f.after_intents or 0, f.kind))
    return counted + [f for f in planned if not f.counted]


def counted_plan(schedule: list[PlannedFault]) -> dict[str, int]:
    """How many faults of each kind the schedule plans whatever the run's length (the counted ones)."""
    planned: Counter[str] = Counter()
    for fault in schedule:
        if fault.counted:
            planned[fault.kind.value] += fault.steps
    return dict(planned)
