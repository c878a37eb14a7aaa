"""Audit a run: fold the history into one row per intent, join the effects, judge, count.

The fold is one pass over the history, in order, keeping only what is needed
per intent (counters in arrays) and per in-flight attempt; memory does not grow
with the number of attempts. It is also where the history is checked the way
Jepsen checks one: an attempt that ends without having started is an error.

Attribution: an attempt was *hit by a pod death* when the pod died while it
was in flight. For a kill this is exact: the injector records the ``fault``
event before it sends SIGKILL, so every attempt the kill breaks starts before
and ends after that event. A pod that dies by itself (a crash, a failpoint)
has no such event; its ``pod_exited`` is recorded only once the supervisor
reaps it, after the broken attempts have already ended. So an attempt that
ended by its connection closing at most ``CRASH_WINDOW_S`` before an
unannounced ``pod_exited`` is counted as hit by that crash. A duplicate whose
attempts were hit is attributed to the pod death; otherwise to the other
reasons its attempts were retried (timeouts, transport errors).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.audit.effects import count_effects
from harness.audit.stats import Rate
from harness.audit.verdicts import STATUS_BY_NAME, ClientStatus, Verdict, judge_all
from harness.errors import HistoryError
from harness.history import (
    ATTEMPT_ENDED,
    ATTEMPT_STARTED,
    FAULT,
    INTENT_ENDED,
    INTENT_STARTED,
    POD_EXITED,
    POD_STARTED,
    RUN_ENDED,
    RUN_STARTED,
    read_history,
)
from harness.scenario import Gate, Scenario, load_scenario

OUTCOMES = ("ok", "tool_error", "transport_error", "timeout", "protocol_error")
CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""
_CLOSED = ("closed_before_response", "closed_mid_response")


@dataclass
class Fold:
    """What one pass over a history yields, before effects are joined."""

    run: dict[str, Any] = field(default_factory=dict)
    ended: dict[str, Any] | None = None
    intents: pd.DataFrame = field(default_factory=pd.DataFrame)
    faults: Counter[str] = field(default_factory=Counter)
    pod_exits: int = 0
    crashes: int = 0
    """Pod exits that no kill explains: the target died by itself."""
    duration_s: float = 0.0
    open_attempts: int = 0


def fold_history(events: Iterable[Mapping[str, Any]]) -> Fold:
    """One pass over the events; returns per-intent columns (index = intent index)."""
    fold = Fold()
    size = 0
    markers: list[str | None] = []
    keys: list[str | None] = []
    status = np.zeros(0, dtype=np.int8)
    attempts = np.zeros(0, dtype=np.int32)
    outcome_counts = np.zeros((0, len(OUTCOMES)), dtype=np.int32)
    saw_exit = np.zeros(0, dtype=np.int32)
    first_t = np.zeros(0, dtype=np.float64)
    last_t = np.zeros(0, dtype=np.float64)
    outcome_col = {name: i for i, name in enumerate(OUTCOMES)}
    pending: dict[int, tuple[int, int, float]] = {}  # request id -> (intent, deaths seen at start, start t)
    recent: deque[tuple[float, float, int]] = (
        deque()
    )  # (end t, start t, intent) of connection-closed attempts
    killed_pods: set[str] = set()  # pods killed whose exit has not been recorded yet
    deaths = 0
    exits = 0
    crashes = 0
    t = 0.0

    def grow(n: int) -> None:
        nonlocal size, status, attempts, outcome_counts, saw_exit, first_t, last_t
        if n <= size:
            return
        extra = n - size
        markers.extend([None] * extra)
        keys.extend([None] * extra)
        status = np.concatenate([status, np.zeros(extra, dtype=np.int8)])
        attempts = np.concatenate([attempts, np.zeros(extra, dtype=np.int32)])
        outcome_counts = np.concatenate([outcome_counts, np.zeros((extra, len(OUTCOMES)), dtype=np.int32)])
        saw_exit = np.concatenate([saw_exit, np.zeros(extra, dtype=np.int32)])
        first_t = np.concatenate([first_t, np.full(extra, math.nan)])
        last_t = np.concatenate([last_t, np.full(extra, math.nan)])
        size = n

    for ev in events:
        typ = ev["type"]
        t = ev.get("t", t)
        if typ == ATTEMPT_STARTED:
            i = ev["intent"]
            if i >= size:
                grow(max(i + 1, size * 2))
            pending[ev["id"]] = (i, deaths, t)
            attempts[i] += 1
            if math.isnan(first_t[i]):
                first_t[i] = t
        elif typ == ATTEMPT_ENDED:
            started = pending.pop(ev["id"], None)
            if started is None:
                raise HistoryError(
                    f"history event seq {ev.get('seq')}: attempt_ended for request id {ev['id']} "
                    "without its attempt_started"
                )
            i = started[0]
            outcome_counts[i, outcome_col.get(ev["outcome"], outcome_col["protocol_error"])] += 1
            if deaths > started[1]:
                saw_exit[i] += 1
            elif ev.get("detail") in _CLOSED:
                recent.append((t, started[2], i))
                while recent and recent[0][0] < t - CRASH_WINDOW_S:
                    recent.popleft()
            last_t[i] = t
        elif typ == INTENT_STARTED:
            i = ev["intent"]
            if i >= size:
                grow(max(i + 1, size * 2))
            markers[i] = ev["marker"]
            keys[i] = ev["key"]
            status[i] = ClientStatus.IN_PROGRESS
        elif typ == INTENT_ENDED:
            i = ev["intent"]
            if i >= size or status[i] == ClientStatus.NOT_STARTED:
                raise HistoryError(
                    f"history event seq {ev.get('seq')}: intent_ended for intent {i} "
                    "without its intent_started"
                )
            status[i] = STATUS_BY_NAME.get(ev["status"], ClientStatus.GAVE_UP)
        elif typ == POD_EXITED:
            exits += 1
            pod = ev.get("pod", "")
            if pod in killed_pods:
                killed_pods.discard(pod)
            else:
                crashes += 1
                deaths += 1
                while recent:
                    end_t, start_t, j = recent.popleft()
                    if end_t >= t - CRASH_WINDOW_S and start_t <= t:
                        saw_exit[j] += 1
        elif typ == POD_STARTED:
            killed_pods.discard(ev.get("pod", ""))
        elif typ == FAULT:
            fold.faults[ev["fault"]] += 1
            if ev["fault"] == "kill":
                deaths += 1
                killed_pods.add(ev.get("pod", ""))
        elif typ == RUN_STARTED:
            fold.run = dict(ev)
            grow(int(ev.get("intents", 0)))
        elif typ == RUN_ENDED:
            fold.ended = dict(ev)

    fold.pod_exits = exits
    fold.crashes = crashes
    fold.duration_s = float(t)
    fold.open_attempts = len(pending)
    fold.intents = pd.DataFrame(
        {
            "intent": np.arange(size, dtype=np.int64),
            "marker": markers,
            "key": keys,
            "client_status": status,
            "attempts": attempts,
            **{f"n_{name}": outcome_counts[:, j] for name, j in outcome_col.items()},
            "attempts_hit_by_pod_death": saw_exit,
            "first_attempt_s": first_t,
            "last_end_s": last_t,
        }
    )
    return fold


def _cause(row_hit: int, timeouts: int, transport: int, tool_errors: int) -> str:
    if row_hit:
        return "pod_death_in_flight"
    if timeouts:
        return "timeout"
    if transport:
        return "transport_error"
    if tool_errors:
        return "retryable_tool_error"
    return "unexplained"


@dataclass
class AuditResult:
    """The audit of one run: a row per started intent, and the summary CI and people read."""

    run_dir: Path
    scenario: Scenario
    intents: pd.DataFrame
    summary: dict[str, Any]

    @property
    def gate_passed(self) -> bool:
        return bool(self.summary["gate"]["passed"])


def evaluate_gate(gate: Gate, verdicts: Mapping[str, int], started: int) -> list[str]:
    """The gate's violations, each a sentence; empty when the gate passes (or is unset)."""
    violations = []
    dups = verdicts.get(Verdict.DUPLICATE, 0)
    lost = verdicts.get(Verdict.LOST, 0)
    if gate.max_duplicates is not None and dups > gate.max_duplicates:
        violations.append(f"{dups} duplicates > max_duplicates {gate.max_duplicates}")
    if gate.max_duplicate_rate is not None and started and dups / started > gate.max_duplicate_rate:
        violations.append(
            f"duplicate rate {dups / started:.4%} > max_duplicate_rate {gate.max_duplicate_rate:.4%}"
        )
    if gate.max_lost is not None and lost > gate.max_lost:
        violations.append(f"{lost} lost > max_lost {gate.max_lost}")
    return violations


def judge_fold(fold: Fold, effects: Counter[str], scenario: Scenario, run_dir: Path) -> AuditResult:
    """Join effects to the folded history, judge every intent and summarise."""
    table = fold.intents[fold.intents["client_status"] != ClientStatus.NOT_STARTED].copy()
    remaining = Counter(effects)
    table["effects"] = np.fromiter(
        (remaining.pop(m, 0) for m in table["marker"]), dtype=np.int64, count=len(table)
    )
    table["verdict"] = judge_all(table["client_status"].to_numpy(), table["effects"].to_numpy())
    table["client_status"] = [ClientStatus(s).name.lower() for s in table["client_status"]]
    table["cause"] = ""
    dup = table["verdict"] == Verdict.DUPLICATE.value
    table.loc[dup, "cause"] = [
        _cause(h, to, tr, te)
        for h, to, tr, te in zip(
            table.loc[dup, "attempts_hit_by_pod_death"],
            table.loc[dup, "n_timeout"],
            table.loc[dup, "n_transport_error"],
            table.loc[dup, "n_tool_error"],
            strict=True,
        )
    ]

    started = len(table)
    counts = table["verdict"].value_counts()
    verdicts = {v.value: int(counts.get(v.value, 0)) for v in Verdict}
    rates = {v: Rate(c, started).as_dict() for v, c in verdicts.items()}
    total_attempts = int(table["attempts"].sum())
    foreign = sum(remaining.values())
    gate_violations = evaluate_gate(scenario.gate, verdicts, started)
    summary: dict[str, Any] = {
        "run_id": fold.run.get("run_id", run_dir.name),
        "scenario": scenario.name,
        "seed": scenario.seed,
        "status": (fold.ended or {}).get("status", "unfinished"),
        "status_reason": (fold.ended or {}).get("reason"),
        "duration_s": round(fold.duration_s, 3),
        "intents": {
            "planned": int(fold.run.get("intents", scenario.workload.intents)),
            "started": started,
            "ended": int((table["client_status"] != "in_progress").sum()),
        },
        "attempts": {
            "total": total_attempts,
            "retries": total_attempts - started,
            "open_at_end": fold.open_attempts,
            **{name: int(table[f"n_{name}"].sum()) for name in OUTCOMES},
        },
        "faults": {
            **{kind: n for kind, n in sorted(fold.faults.items())},
            "pod_exits": fold.pod_exits,
            "crashes": fold.crashes,
            "attempts_hit_by_pod_death": int(table["attempts_hit_by_pod_death"].sum()),
        },
        "verdicts": verdicts,
        "rates": rates,
        "causes": {
            "duplicate": {k: int(v) for k, v in table.loc[dup, "cause"].value_counts().sort_index().items()},
        },
        "effects": {
            "total": int(sum(effects.values())),
            "foreign": foreign,
            "foreign_examples": sorted(remaining)[:5],
        },
        "gate": {"passed": not gate_violations, "violations": gate_violations},
    }
    return AuditResult(
        run_dir=run_dir, scenario=scenario, intents=table.reset_index(drop=True), summary=summary
    )


def audit_run(run_dir: Path) -> AuditResult:
    """Audit a run directory, complete or partial."""
    scenario = load_scenario(run_dir / "scenario.yaml")
    fold = fold_history(read_history(run_dir / "history.jsonl"))
    effects = count_effects(scenario.audit.effects, run_dir)
    return judge_fold(fold, effects, scenario, run_dir)
