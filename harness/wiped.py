"""A lost intent's story when the fault that lost it hit another call: which fault, which call, where.

A file store rewritten in place (``targets/notes`` with ``NOTES_FLAW=torn_file``) loses
notes it acknowledged long before: a kill cuts *another* call's rewrite short, the
restarted server reads the torn file as empty, and its next save overwrites the rest.
The lost intent's own attempts saw no fault at all; what its story names is the pod
fault its effect vanished after (``vanished_after``: ``kill#1 pod-0 @2.49s``). A replay
(:mod:`harness.replay`) makes that loss again by storing a call, then killing the next
one where that fault caught the tearing call: this module finds that call (the attempt
the fault broke) and the last point it was seen to reach, if any was (observe mode sees
commits and downstream calls, not a file store's writes: then the replay explores the
call's file operations for the kill that loses what was stored before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness import rundir
from harness.audit.auditor import AuditResult, stories_of
from harness.audit.stories import Story, lost_to_another_call
from harness.crashpoints.explore import store_files
from harness.errors import ScenarioError
from harness.history import Outcome
from harness.scenario import load_scenario

MAX_CANDIDATES = 200
"""Intents at work when a fault struck, and broken by a pod fault, read back at most per fault to find the
one it tore."""


@dataclass(frozen=True, slots=True)
class Wiped:
    """The pod fault that lost a finding acknowledged before it, and the call it cut short."""

    fault: str
    """As the story labels it: ``crash#1 pod-0 @2.49s``."""
    store: str
    """The store's file as the scenario's effect source names it (``notes.jsonl``), or ``the store``."""
    intent: int | None = None
    """The intent whose attempt the fault broke (None: no attempt was in flight)."""
    point: str | None = None
    """The last point that attempt was seen to reach (None: none was observed)."""

    def sentence(self) -> str:
        """``lost when crash#1 tore notes.jsonl mid-rewrite of intent 3``: the story told from the fault."""
        name = self.fault.split(" ")[0]
        if self.intent is None:
            return f"lost when {name} hit {self.store} with no call in flight"
        at = f" (after {self.point})" if self.point is not None else ""
        return f"lost when {name} tore {self.store} mid-rewrite of intent {self.intent}{at}"


def wiped_of(audit: AuditResult, stories: Sequence[Story]) -> dict[str, Wiped]:
    """Per pod fault that lost intents of ``stories`` acknowledged before it (:func:`lost_to_another_call`),
    the call it cut short and the point that call last reached."""
    faults = {story.vanished_after for story in stories if lost_to_another_call(story)}
    if not faults:
        return {}
    store = _store_name(audit)
    table = audit.intents
    hit = table.loc[table["attempts_hit_by_pod_fault"] > 0]
    wanted: set[int] = set()
    for label in faults:  # the calls at work when it struck, not the run's first ones hit by any fault
        at = _time_ms(label)
        if at is None:
            near = hit
        else:  # the label's time is to 10 ms
            near = hit[(hit["first_attempt_ms"] <= at + 10) & (hit["last_end_ms"] >= at - 10)]
        wanted.update(int(i) for i in near["intent"].head(MAX_CANDIDATES).tolist())
    candidates = stories_of(audit, sorted(wanted)) if wanted else {}
    return {label: _cut_short(label, candidates, store) for label in sorted(faults)}


def _time_ms(label: str) -> float | None:
    """When a fault struck, from its label (``kill#1 pod-0 @2.49s``: 2490 ms into the run), or None."""
    _, _, at = label.rpartition("@")
    try:
        return float(at.removesuffix("s")) * 1000
    except ValueError:
        return None


def _cut_short(label: str, candidates: dict[int, Story], store: str) -> Wiped:
    """The attempt ``label`` broke (not one that answered ok before it ended), the first to start if the
    fault broke several (a store rewritten under a lock has one rewrite in flight, which no history says)."""
    broken = [
        (step.start_t, story.intent, step)
        for story in candidates.values()
        for step in story.steps
        if label in step.faults and step.outcome != Outcome.OK
    ]
    if not broken:
        return Wiped(label, store)
    _, intent, step = min(broken, key=lambda b: (b[0], b[1]))
    mine = [p.point for p in step.points if not p.ambiguous and not p.held]
    return Wiped(label, store, intent, mine[-1] if mine else None)


def _store_name(audit: AuditResult) -> str:
    """The file the run's effect source reads (its first: a SQLite database's own), else ``the store``."""
    try:
        files = store_files(load_scenario(audit.run_dir / rundir.SCENARIO))
    except ScenarioError:  # a scenario that no longer loads (an environment variable gone)
        return "the store"
    return files[0] if files and files[0] != "." else "the store"
