"""Audit a run: fold the history, join the effects, judge every intent, summarise, gate.

Offline only: everything it knows comes from the run directory (the history,
the scenario as run, and the effects: the target's SQLite file, the sink's
record, or ``effects.json``). So a run can be audited again at any time, and a
partial run as well as a complete one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness import rundir
from harness.audit.effects import count_effects
from harness.audit.fold import Fold, fold_history
from harness.audit.gate import evaluate_gate
from harness.audit.summary import EffectCounts, Summary, summarize
from harness.audit.verdicts import STATUS_NAMES, ClientStatus, cause_of, judge_all
from harness.errors import AuditError, ScenarioError
from harness.history import Verdict, read_batches
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

    @property
    def gate_passed(self) -> bool:
        return self.summary.gate.passed


def judge_fold(fold: Fold, effects: Counter[str], scenario: Scenario, run_dir: Path) -> AuditResult:
    """Join effects to the folded history, judge every intent, summarise and apply the gate."""
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
    table["cause"] = ""
    dup = table["verdict"] == Verdict.DUPLICATE.value
    table.loc[dup, "cause"] = [
        cause_of(f, to, tr, te)
        for f, to, tr, te in zip(
            table.loc[dup, "faults"],
            table.loc[dup, "n_timeout"],
            table.loc[dup, "n_transport_error"],
            table.loc[dup, "n_tool_error"],
            strict=True,
        )
    ]
    counted = EffectCounts(
        total=int(sum(effects.values())),
        foreign=int(by_marker[foreign_markers].sum()),
        foreign_examples=sorted(str(m) for m in foreign_markers)[:5],
    )
    summary = summarize(fold, table, counted, scenario, run_dir)
    summary = dataclasses.replace(summary, gate=evaluate_gate(scenario.gate, summary))
    return AuditResult(
        run_dir=run_dir,
        scenario=scenario,
        intents=table.reset_index(drop=True),
        summary=summary,
        pod_events=fold.pod_events,
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
        return judge_fold(fold, counted, scenario, run_dir)
