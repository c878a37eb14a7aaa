"""Audit a run: fold the history, join the effects, judge every intent, find causes, summarise, gate.

Offline only: everything it knows comes from the run directory (the history,
the scenario as run, the effects: the target's SQLite file, the sink's record,
or ``effects.json``; the pod logs, and a control run's summary). So a run can be
audited again at any time, and a partial run as well as a complete one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import rundir
from harness.audit.causes import causes
from harness.audit.control import compare_control
from harness.audit.effects import count_effects
from harness.audit.fixes import fix_for
from harness.audit.fold import CheckpointRead, Fold, PodFault, fold_history
from harness.audit.gate import evaluate_gate
from harness.audit.podlogs import evidence
from harness.audit.stories import TOLD, FindingClass, History, Story, classes, tell
from harness.audit.summary import EffectCounts, Summary, summarize
from harness.audit.vanished import vanishing
from harness.audit.verdicts import STATUS_NAMES, ClientStatus, judge_all
from harness.errors import AuditError, ScenarioError, UsageError
from harness.history import read_batches
from harness.scenario import Scenario, load_scenario


@dataclass
class AuditResult:
    """The audit of one run: a row per started intent, and the summary CI and people read."""

    run_dir: Path
    scenario: Scenario
    intents: pd.DataFrame
    summary: Summary
    pod_events: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    """(t, what): pod faults by kind, ``pod_exited`` and ``pod_ready``, as the history has them."""
    pod_faults: list[PodFault] = dataclasses.field(default_factory=list)
    checkpoints: list[CheckpointRead] = dataclasses.field(default_factory=list)

    @property
    def gate_passed(self) -> bool:
        return self.summary.gate.passed


def keyed(scenario: Scenario) -> bool:
    """Whether each attempt of an intent carries the intent's key (a duplicate's fix depends on it)."""
    client = scenario.client
    travels = client.key_in != "argument" or "key" in scenario.workload.template.placeholders
    return travels and client.key_reuse == "same"


def _no_history() -> Iterable[Sequence[Mapping[str, Any]]]:
    return ()


def judge_fold(
    fold: Fold,
    effects: Counter[str],
    scenario: Scenario,
    run_dir: Path,
    history: History = _no_history,
) -> AuditResult:
    """Join effects to the folded history, judge every intent, find causes, summarise, apply the gate.

    ``history`` opens the history again for the stories (a targeted second read).
    """
    started_mask = fold.intents["client_status"] != ClientStatus.NOT_STARTED
    # The fold's frame is ours to extend; copy only when some intents are dropped.
    table = fold.intents if started_mask.all() else fold.intents[started_mask].copy()
    by_marker = pd.Series(effects, dtype=np.int64)
    table["effects"] = table["marker"].map(by_marker).fillna(0).astype(np.int64)
    matched = int(table["effects"].sum())
    all_matched = matched == int(by_marker.sum())
    foreign_markers = pd.Index([]) if all_matched else by_marker.index.difference(pd.Index(table["marker"]))
    table["verdict"] = judge_all(table["client_status"].to_numpy(), table["effects"].to_numpy())
    table["client_status"] = STATUS_NAMES[table["client_status"].to_numpy()]
    gone = vanishing(
        fold.checkpoints, fold.pod_faults, table["intent"].to_numpy(), table["effects"].to_numpy()
    )
    table["vanished_after"] = gone.after
    table["cause"] = causes(table, gone.vanished)
    counted = EffectCounts(
        total=int(sum(effects.values())),
        foreign=int(by_marker[foreign_markers].sum()),
        foreign_examples=sorted(str(m) for m in foreign_markers)[:5],
    )
    summary = summarize(fold, table, counted, scenario, run_dir)
    fixes = partial(fix_for, keyed=keyed(scenario))
    found = classes(table)
    told = sorted({i for verdict, _, _, first in found if verdict in TOLD for i in first})
    stories = tell(table, told, history, fold.checkpoints, fold.pod_faults, fixes)
    blamed = sorted({int(f) for f in gone.fault[gone.vanished]})
    summary = dataclasses.replace(
        summary,
        classes=[
            FindingClass(
                verdict, cause, n, fixes(verdict, cause), [stories[i] for i in first if i in stories]
            )
            for verdict, cause, n, first in found
        ],
        evidence=evidence(run_dir, fold.pod_faults, blamed),
        control=compare_control(run_dir, summary.verdicts, summary.intents.started),
    )
    summary = dataclasses.replace(summary, gate=evaluate_gate(scenario.gate, summary))
    return AuditResult(
        run_dir=run_dir,
        scenario=scenario,
        intents=table.reset_index(drop=True),
        summary=summary,
        pod_events=fold.pod_events,
        pod_faults=fold.pod_faults,
        checkpoints=fold.checkpoints,
    )


def audit_run(run_dir: Path) -> AuditResult:
    """Audit a run directory, complete or partial."""
    try:
        scenario = load_scenario(run_dir / rundir.SCENARIO)
    except ScenarioError as exc:
        raise AuditError(f"the run's copy of its scenario cannot be read: {exc.message}") from None
    # The effect query runs in a thread while the history is folded: sqlite releases the GIL.
    with ThreadPoolExecutor(max_workers=1) as pool:
        effects = pool.submit(count_effects, scenario.audit.effects, run_dir)
        history = run_dir / rundir.HISTORY
        fold = fold_history(read_batches(history), str(history))
        try:
            counted = effects.result()
        except AuditError as exc:
            if fold.collect_error is not None:
                raise AuditError(f"the final read of effects failed: {fold.collect_error}") from None
            ended = fold.ended or {}
            if ended.get("status") == "failed":
                raise AuditError(
                    f"this run failed before it measured anything ({ended.get('reason')}); {exc.message}"
                ) from None
            raise
        history = run_dir / rundir.HISTORY
        return judge_fold(fold, counted, scenario, run_dir, lambda: read_batches(history))


def story_of(result: AuditResult, intent: int) -> Story:
    """The story of any started intent of an audited run (its history read again, up to its end)."""
    if intent not in set(result.intents["intent"]):
        raise UsageError(f"intent {intent} never started in {result.run_dir}")
    history = result.run_dir / rundir.HISTORY
    fixes = partial(fix_for, keyed=keyed(result.scenario))
    told = tell(
        result.intents, [intent], lambda: read_batches(history), result.checkpoints, result.pod_faults, fixes
    )
    return told[intent]
