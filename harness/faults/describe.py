"""A scenario's fault plan in words: what ``validate`` prints, and the line a run starts with.

Pure like the schedule it reads: the same scenario and seed give the same text,
so a user can check what a run will do before starting anything.
"""

from __future__ import annotations

from harness.faultkinds.registry import SCHEDULED, kind_of
from harness.faults.schedule import build_schedule
from harness.scenario import CrashPoints, Scenario, StreamFault

SHOWN_FAULTS = 10
"""Planned faults ``validate`` lists one by one; the rest are counted."""


def planned(scenario: Scenario) -> str:
    """The pod faults a run plans: counted ones, and timed ones by each kind's rate (planned once due)."""
    counted = sum(f.steps for f in build_schedule(scenario) if f.counted)
    text = f"{counted} pod faults planned"
    if scenario.target.replicas > 1:
        text = f"{scenario.target.replicas} replicas ({scenario.client.balance}), " + text
    for kind in SCHEDULED:
        rate = kind_of(kind).rate
        said = None if rate is None else rate(scenario)
        if said is not None:
            text += f", {said}"
    return text


def describe_rule(index: int, rule: StreamFault) -> str:
    """One stream rule: which exchanges it hits, how often, and what it does to them."""
    where = f"{rule.method}" + (f" {rule.tool}" if rule.tool else "")
    who = []
    if rule.intent is not None:
        who.append(f"intent {rule.intent}")
    if rule.attempt is not None:
        who.append(f"attempt {rule.attempt}")
    chance = f"p={rule.chance:g}" if rule.probability is not None else "always"
    action = kind_of(rule.fault).rule_action
    assert action is not None  # a stream kind has one (tests/unit/test_fault_kinds.py)
    what = action(rule)
    return f"  stream rule {index}: {rule.fault} on {where} ({', '.join([*who, chance])}): {what}"


def describe_crash_points(crash: CrashPoints) -> str:
    """``faults.crash_points``: where each intent is held and killed, or how the exploration chooses."""
    explore = crash.explore
    if explore is not None:
        only = f", only {', '.join(explore.only)}" if explore.only else ""
        return (
            f"  crash points, explored: a clean call, then each distinct crash state of the points it passes "
            f"held and the pod SIGKILLed there in {explore.repeat} "
            f"{'try' if explore.repeat == 1 else 'tries'}, then the retries' own commits (within "
            f"{explore.budget_s:g} s{only})"
        )
    holds = "; ".join(
        f"{'every intent' if h.intents is None else 'intents ' + ', '.join(map(str, h.intents))} at {h.at}"
        + (f" ({' then '.join(c or 'by index' for c in h.commits)})" if h.commits else "")
        for h in crash.holds
    )
    return f"  crash points: held and the pod SIGKILLed there: {holds or 'nowhere (points recorded only)'}"


def describe_plan(scenario: Scenario) -> list[str]:
    """The workload, the planned pod faults (the first few one by one) and each stream rule."""
    schedule = build_schedule(scenario)
    shown = ", ".join(f"{f.kind} {f.describe()}" for f in schedule[:SHOWN_FAULTS])
    more = f", ... ({len(schedule) - SHOWN_FAULTS} more)" if len(schedule) > SHOWN_FAULTS else ""
    return [
        f"  {scenario.workload.intents} intents of {scenario.workload.tool}, "
        f"concurrency {scenario.workload.concurrency}",
        f"  {planned(scenario)}" + (f": {shown}{more}" if schedule else ""),
        *(describe_rule(index, rule) for index, rule in enumerate(scenario.faults.stream)),
        *(
            []
            if scenario.faults.crash_points is None
            else [describe_crash_points(scenario.faults.crash_points)]
        ),
    ]


def announcement(scenario: Scenario, run_id: str) -> str:
    """The line a run starts with: its size and what it will break."""
    return (
        f"run {run_id}: {scenario.workload.intents} intents, "
        f"concurrency {scenario.workload.concurrency}, {planned(scenario)}"
        f"{', stream faults by rule' if scenario.faults.stream else ''}"
        f"{', kills at crash points' if scenario.faults.crash_points is not None else ''}"
    )
