"""Ratio goals measured in alternating rounds, and judged only on rounds a busy machine did not spoil.

A ratio goal (the audit against its parse, the driver against the SDK's client)
measures the harness and its reference side by side, round after round. On a
shared machine a single round swings widely (issue #39: 0.63× wrk and 2.3× the
parse on a busy machine, against 0.99× and 1.6× on a quiet one), so a median of
3 rounds can pass or fail on noise. The rule here (decision 0073):

- each round measures both, the reference first on even rounds and the harness
  first on odd ones (R H, H R, R H, ...): a steady drift of the machine favours
  neither;
- a round is not used when the rest of the machine took more than
  :attr:`Rule.busy_share` of its CPU while it ran (steal included), or when its
  reference moved more than :attr:`Rule.reference_moved` from the median
  reference of the usable rounds: the reference is the yardstick, and a
  yardstick that moved measured the machine, not the harness;
- an unused round is re-run, up to :attr:`Rule.reruns` more rounds;
- the goal is judged on the median ratio of the usable rounds if there are as
  many as were asked for; otherwise it is UNKNOWN, with the evidence (the other
  processes' CPU, how far the reference moved, the load average), never PASS
  or FAIL.

Judging (:func:`usable`, :func:`summarize`, :func:`judge`) is a pure function of
the rounds and their machine readings, tested with synthetic rounds; only
:func:`run_rounds` and :func:`read_machine` time or read anything.
"""

from __future__ import annotations

import os
import resource
import statistics
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from bench.common import TICK, Goal

T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H")
Measured = tuple[float, float, T]
"""What a round's function returns: the ratio, the reference's figure, the samples."""

REFERENCE_MOVED = 0.10
"""A round whose reference is more than 10% from the median reference is re-run.

On a quiet 2-core machine the references stay within a few per cent of their
median (the untraced notes call 2.5%, the parse of a 1M-intent history 4%); a
round 10% off is a round the machine changed under."""
BUSY_SHARE = 0.25
"""A round during which other processes took more than a quarter of the machine's CPU is re-run.

Both sides of a ratio need the cores they had on a quiet machine (the driver and
its server take two), and the harness's side usually needs more CPU than its
reference (0.14 ms a call against wrk's 0.02), so contention is not shared
fairly: it moves the ratio, not only the figures."""


@dataclass(frozen=True)
class Reading:
    """What the machine did while a round ran, apart from the bench."""

    others_cores: float
    """CPU the rest of the machine took, in cores on average (other processes and the hypervisor's steal)."""
    cores: int
    load: float
    """The 1-minute load average at the round's end (the bench's own processes included): evidence only."""

    @property
    def others_share(self) -> float:
        return self.others_cores / self.cores


@dataclass(frozen=True)
class Round(Generic[T]):
    """One round of a ratio goal: the ratio, the reference's own figure, the machine, and the samples."""

    ratio: float
    reference: float
    """The reference's figure this round (its seconds, its calls/s): what must not move."""
    data: T
    """What the benchmark measured (for its table); judging never reads it."""
    machine: Reading


@dataclass(frozen=True)
class Rule:
    """How many rounds a goal wants, and what spoils one."""

    rounds: int
    reruns: int = -1
    """Rounds that may be run on top of ``rounds`` to replace unusable ones; -1: as many as ``rounds``."""
    reference_moved: float = REFERENCE_MOVED
    busy_share: float = BUSY_SHARE

    @property
    def limit(self) -> int:
        """The most rounds a goal may run."""
        return self.rounds + (self.rounds if self.reruns < 0 else self.reruns)


def _moved(reference: float, median: float) -> float:
    return abs(reference / median - 1) if median else 0.0


def usable(rounds: Sequence[Round[T]], rule: Rule) -> list[Round[T]]:
    """The rounds a judgement may use: the machine was not busy, and the reference stayed within the bound.

    The median reference is that of the rounds the machine left alone, so a few
    busy rounds cannot drag the yardstick towards themselves.
    """
    calm = [r for r in rounds if r.machine.others_share <= rule.busy_share]
    if not calm:
        return []
    median = statistics.median(r.reference for r in calm)
    return [r for r in calm if _moved(r.reference, median) <= rule.reference_moved]


def enough(rounds: Sequence[Round[T]], rule: Rule) -> bool:
    """Whether the goal has its rounds, or has run all it may (then it is judged, or unknown)."""
    return len(usable(rounds, rule)) >= rule.rounds or len(rounds) >= rule.limit


@dataclass(frozen=True)
class Summary:
    """A ratio from rounds: its median, how it spread, and why it cannot be judged (empty if it can)."""

    ratio: float
    spread: str
    unknown: str


def summarize(rounds: Sequence[Round[T]], rule: Rule, unit: str = "×") -> Summary:
    """The median of the usable rounds' ratios and its spread; short of usable rounds, the evidence why."""
    if not rounds:
        raise ValueError("no rounds to summarize")
    kept = usable(rounds, rule)
    ratios = [r.ratio for r in kept or rounds]
    ratio = float(statistics.median(ratios))
    spread = f"median of {len(ratios)} alternating, {min(ratios):.3g}-{max(ratios):.3g}{unit}"
    refs = [r.reference for r in kept or rounds]
    ref_median = statistics.median(refs)
    spread += f", reference ±{100 * max(_moved(v, ref_median) for v in refs):.0f}%"
    if len(rounds) > len(kept):
        spread += f", {len(rounds) - len(kept)} re-run"
    if len(kept) >= rule.rounds:
        return Summary(ratio, spread, "")
    return Summary(ratio, spread, _too_busy(rounds, kept, rule))


def _too_busy(rounds: Sequence[Round[T]], kept: Sequence[Round[T]], rule: Rule) -> str:
    """The evidence for an unknown: how busy the machine was, and how far the reference moved."""
    busiest = max(rounds, key=lambda r: r.machine.others_cores).machine
    median = statistics.median(r.reference for r in rounds)
    moved = max(_moved(r.reference, median) for r in rounds)
    return (
        f"machine too busy to judge: {len(kept)} of {len(rounds)} rounds usable, {rule.rounds} needed "
        f"(others took up to {busiest.others_cores:.1f} of {busiest.cores} cores, "
        f"bound {rule.busy_share * busiest.cores:.2g}; reference moved up to {100 * moved:.0f}%, "
        f"bound {100 * rule.reference_moved:.0f}%; "
        f"load {max(r.machine.load for r in rounds):.1f})"
    )


def judge(
    name: str,
    rounds: Sequence[Round[T]],
    rule: Rule,
    limit: float,
    unit: str = "×",
    higher_is_better: bool = False,
) -> Goal:
    """A ratio goal from its rounds: PASS or FAIL on the usable rounds' median, or UNKNOWN and why."""
    s = summarize(rounds, rule, unit)
    return Goal(name, s.ratio, limit, unit, higher_is_better, spread=s.spread, unknown=s.unknown)


def alternate(index: int, reference: Callable[[], R], harness: Callable[[], H]) -> tuple[R, H]:
    """Round ``index``'s two measurements, the reference first on even rounds: R H, H R, R H, ...

    Returns ``(reference, harness)`` whatever order they ran in.
    """
    if index % 2 == 0:
        ref = reference()
        return ref, harness()
    measured = harness()
    return reference(), measured


def _tree_cpu_s() -> float:
    """CPU this process and its descendants have used: the reaped ones by rusage, the live ones from /proc."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while listed
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        # Its own CPU and that of the children it reaped: a grandchild moves from live to reaped.
        ticks[pid] = sum(int(v) for v in fields[11:15])
    ours = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                grew = True
    ours.discard(os.getpid())
    return total + sum(ticks[p] for p in ours) / TICK


def _machine_busy_s() -> float:
    """CPU time every core of the machine has spent busy or stolen, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def read_machine(work: Callable[[], T]) -> tuple[T, Reading]:
    """Run ``work`` and read what the rest of the machine took meanwhile: its busy CPU less the bench's."""
    start, busy, ours = time.monotonic(), _machine_busy_s(), _tree_cpu_s()
    result = work()
    wall = time.monotonic() - start
    others = max(0.0, (_machine_busy_s() - busy) - (_tree_cpu_s() - ours))
    return result, Reading(others / wall if wall > 0 else 0.0, os.cpu_count() or 1, os.getloadavg()[0])


def run_rounds(
    rule: Rule,
    one: Callable[[int], Measured[T]],
    read: Callable[[Callable[[], Measured[T]]], tuple[Measured[T], Reading]] = read_machine,
) -> list[Round[T]]:
    """Rounds of ``one(index)`` (its ratio, its reference's figure, its samples) until :func:`enough`.

    ``read`` runs a round and reads the machine meanwhile (tests give readings of their own).
    """
    rounds: list[Round[T]] = []
    while not enough(rounds, rule):
        (ratio, reference, data), machine = read(lambda: one(len(rounds)))
        rounds.append(Round(ratio, reference, data, machine))
    return rounds


def kept_data(rounds: Sequence[Round[T]], rule: Rule) -> list[T]:
    """What the usable rounds measured, for a table; all the rounds' if none is (the goal is unknown)."""
    return [r.data for r in usable(rounds, rule) or rounds]


def judging_rule(rule: Rule) -> str:
    """The rule in BENCHMARKS.md's words, with its bounds, so that a reader can weigh each goal's line."""
    reruns = "as many extra rounds as the goal has" if rule.reruns < 0 else f"{rule.reruns} extra rounds"
    return textwrap.fill(
        "Every ratio goal (the harness against its reference) is measured in rounds that alternate the "
        "two (reference first, then harness first, ...). A round is re-run, not used, when other "
        f"processes took more than {100 * rule.busy_share:.0f}% of the machine's CPU while it ran (steal "
        f"included), or when its reference moved more than {100 * rule.reference_moved:.0f}% from the "
        f"median reference; up to {reruns} replace such rounds. The goal is the median ratio of the "
        "rounds used, with its range and how far the reference moved. Short of usable rounds it is "
        "UNKNOWN, with the evidence: a judgement without the evidence for it is never a pass (exit code "
        "3 when no goal failed; 1 when one did). Decision 0073.",
        width=100,
    )
