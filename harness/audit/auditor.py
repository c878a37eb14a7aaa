"""Audit a run: fold the history into one row per intent, join the effects, judge, count.

The fold is one pass over the history, in order, keeping only what is needed
per intent (counters in arrays) and per in-flight attempt; memory does not grow
with the number of attempts. It is also where the history is checked the way
Jepsen checks one: an attempt that ends without having started is an error.

Attribution: an attempt was *hit by a pod fault* when the pod died, or was
frozen or thawed (a pause), while it was in flight. For a kill this is exact:
the injector records the ``fault`` event before any attempt the kill breaks can
end, so every such attempt starts before and ends after that event. A pod that
dies by itself (a crash, a failpoint) has no such event; its ``pod_exited`` is
recorded only once the supervisor reaps it, after the broken attempts have
already ended. So an attempt that ended by its connection closing at most
``CRASH_WINDOW_S`` before an unannounced ``pod_exited`` is counted as hit by
that crash. A pause disrupts twice: when the pod freezes and when it thaws.
A duplicate whose attempts were hit is attributed to that pod fault; otherwise
to the other reasons its attempts were retried (timeouts, transport errors).

Faults of the fault proxy name the request id they hit, so they are pinned on
their intent exactly. Every intent carries the set of faults that hit any of
its attempts (``faults`` in intents.csv); the summary breaks verdicts down by
fault, and each duplicate gets one cause, the first of ``CAUSE_ORDER`` present.
A ``sever_response`` cut before the server had sent its whole response is
labelled ``sever_mid_stream``: the handler was still running (in SSE mode it
was cancelled), so what it left behind is a different finding.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
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
    POD_RESUMED,
    POD_STARTED,
    RUN_ENDED,
    RUN_STARTED,
    read_batches,
)
from harness.scenario import Gate, Scenario, load_scenario

OUTCOMES = ("ok", "tool_error", "transport_error", "timeout", "protocol_error")
CRASH_WINDOW_S = 1.0
"""How long before an unannounced pod exit a connection-closed attempt counts as broken by it."""
_CLOSED = ("closed_before_response", "closed_mid_response")
CAUSE_ORDER = (
    "kill",
    "crash",
    "sever_response",
    "sever_mid_stream",
    "stall",
    "pause",
    "sever_request",
    "delay",
)
"""Which fault a duplicate is blamed on when several hit it: the one closest to a commit first."""


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
    severs: Counter[str] = field(default_factory=Counter)
    """sever_response events split by whether the server had finished (sever_response) or not."""
    duration_s: float = 0.0
    open_attempts: int = 0


def _millis(seconds: list[float]) -> pd.api.extensions.ExtensionArray:
    return pd.array(np.round(np.array(seconds, dtype=np.float64) * 1000), dtype="Int64")


class _Columns:
    """Per-intent counters as plain lists (indexing a list is far cheaper than a numpy scalar)."""

    def __init__(self) -> None:
        self.size = 0
        self.markers: list[str | None] = []
        self.keys: list[str | None] = []
        self.status: list[int] = []
        self.attempts: list[int] = []
        self.outcomes: dict[str, list[int]] = {name: [] for name in OUTCOMES}
        self.hit: list[int] = []
        self.first_t: list[float] = []
        self.last_t: list[float] = []
        self.faults: dict[int, set[str]] = {}
        """Sparse: intent -> kinds of the faults that hit its attempts (most intents have none)."""

    def grow(self, n: int) -> None:
        if n <= self.size:
            return
        extra = n - self.size
        for column in (self.markers, self.keys):
            column.extend([None] * extra)
        for counts in (self.status, self.attempts, self.hit, *self.outcomes.values()):
            counts.extend([0] * extra)
        self.first_t.extend([math.nan] * extra)
        self.last_t.extend([math.nan] * extra)
        self.size = n

    def _fault_column(self) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, kinds in self.faults.items():
            column[i] = ";".join(sorted(kinds))
        return column

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "intent": np.arange(self.size, dtype=np.int64),
                "marker": self.markers,
                "key": self.keys,
                "client_status": np.array(self.status, dtype=np.int8),
                "attempts": np.array(self.attempts, dtype=np.int32),
                **{f"n_{name}": np.array(c, dtype=np.int32) for name, c in self.outcomes.items()},
                "attempts_hit_by_pod_fault": np.array(self.hit, dtype=np.int32),
                "faults": self._fault_column(),
                # Whole milliseconds since the run started (formatting floats is a third of a
                # million-row intents.csv); nullable, as an attempt may never have ended.
                "first_attempt_ms": _millis(self.first_t),
                "last_end_ms": _millis(self.last_t),
            }
        )


def fold_history(batches: Iterable[Sequence[Mapping[str, Any]]]) -> Fold:
    """One pass over the events; returns per-intent columns (index = intent index).

    The loop is the audit's hot path (four events per intent), hence the local
    names and the most frequent event types first.
    """
    fold = Fold()
    cols = _Columns()
    status, attempts, hit, first_t, last_t = cols.status, cols.attempts, cols.hit, cols.first_t, cols.last_t
    markers, keys, outcomes = cols.markers, cols.keys, cols.outcomes
    protocol_errors = outcomes["protocol_error"]
    in_progress, not_started = int(ClientStatus.IN_PROGRESS), int(ClientStatus.NOT_STARTED)
    status_codes = {name: int(code) for name, code in STATUS_BY_NAME.items()}
    pending: dict[int, tuple[int, int, float]] = {}  # request id -> (intent, deaths seen at start, start t)
    recent: deque[tuple[float, float, int]] = deque()  # (end t, start t, intent): connection-closed attempts
    killed_pods: set[str] = set()  # pods killed whose exit has not been recorded yet
    faults = cols.faults
    death_kinds: list[str] = []  # "kill", "crash" or "pause", one per pod disruption so far
    deaths = exits = crashes = 0
    t = 0.0
    # Locals, not module globals, for the four comparisons made per event.
    attempt_started, attempt_ended, intent_started, intent_ended = (
        ATTEMPT_STARTED,
        ATTEMPT_ENDED,
        INTENT_STARTED,
        INTENT_ENDED,
    )

    try:
        for batch in batches:
            for ev in batch:
                typ = ev["type"]
                if typ == attempt_started:
                    i = ev["intent"]
                    if i >= cols.size:
                        cols.grow(max(i + 1, cols.size * 2))
                    t = ev["t"]
                    pending[ev["id"]] = (i, deaths, t)
                    attempts[i] += 1
                    if attempts[i] == 1:
                        first_t[i] = t
                elif typ == attempt_ended:
                    started = pending.pop(ev["id"], None)
                    if started is None:
                        raise HistoryError(
                            f"history event seq {ev.get('seq')}: attempt_ended for request id {ev['id']} "
                            "without its attempt_started"
                        )
                    i = started[0]
                    t = ev["t"]
                    outcomes.get(ev["outcome"], protocol_errors)[i] += 1
                    if deaths > started[1]:
                        hit[i] += 1
                        faults.setdefault(i, set()).update(death_kinds[started[1] : deaths])
                    elif ev.get("detail") in _CLOSED:
                        recent.append((t, started[2], i))
                        while recent and recent[0][0] < t - CRASH_WINDOW_S:
                            recent.popleft()
                    last_t[i] = t
                elif typ == intent_started:
                    i = ev["intent"]
                    if i >= cols.size:
                        cols.grow(max(i + 1, cols.size * 2))
                    markers[i] = ev["marker"]
                    keys[i] = ev["key"]
                    status[i] = in_progress
                elif typ == intent_ended:
                    i = ev["intent"]
                    if i >= cols.size or status[i] == not_started:
                        raise HistoryError(
                            f"history event seq {ev.get('seq')}: intent_ended for intent {i} "
                            "without its intent_started"
                        )
                    status[i] = status_codes.get(ev["status"], int(ClientStatus.GAVE_UP))
                elif typ == POD_EXITED:
                    t = ev["t"]
                    exits += 1
                    pod = ev.get("pod", "")
                    if pod in killed_pods:
                        killed_pods.discard(pod)
                    else:
                        crashes += 1
                        deaths += 1
                        death_kinds.append("crash")
                        while recent:
                            end_t, start_t, j = recent.popleft()
                            if end_t >= t - CRASH_WINDOW_S and start_t <= t:
                                hit[j] += 1
                                faults.setdefault(j, set()).add("crash")
                elif typ == POD_RESUMED:
                    deaths += 1
                    death_kinds.append("pause")
                elif typ == POD_STARTED:
                    killed_pods.discard(ev.get("pod", ""))
                elif typ == FAULT:
                    kind = ev["fault"]
                    fold.faults[kind] += 1
                    if kind == "kill":
                        deaths += 1
                        death_kinds.append("kill")
                        killed_pods.add(ev.get("pod", ""))
                    elif kind == "pause":
                        # Attempts in flight when the pod froze; those sent while it was frozen are
                        # caught by the second disruption, when it thaws (pod_resumed).
                        deaths += 1
                        death_kinds.append("pause")
                    elif "id" in ev:
                        if kind == "sever_response":
                            if ev.get("server_done") is False:
                                kind = "sever_mid_stream"
                            fold.severs[kind] += 1
                        # A proxy fault names the request it hit; the attempt is in flight
                        # (the proxy records a fault before it acts).
                        target = pending.get(ev["id"])
                        if target is not None:
                            faults.setdefault(target[0], set()).add(kind)
                elif typ == RUN_STARTED:
                    fold.run = dict(ev)
                    cols.grow(int(ev.get("intents", 0)))
                elif typ == RUN_ENDED:
                    fold.ended = dict(ev)
                    t = ev["t"]
    except (KeyError, TypeError, AttributeError) as exc:
        # Not an event object, or one missing a field its type needs: not a history this harness wrote.
        raise HistoryError(f"malformed history event ({type(exc).__name__}: {exc})") from None

    fold.pod_exits = exits
    fold.crashes = crashes
    fold.duration_s = float(t)
    fold.open_attempts = len(pending)
    fold.intents = cols.frame()
    return fold


_STATUS_NAMES = np.array([s.name.lower() for s in ClientStatus], dtype=object)


def _cause(faults: str, timeouts: int, transport: int, tool_errors: int) -> str:
    present = set(faults.split(";")) if faults else set()
    for kind in CAUSE_ORDER:
        if kind in present:
            return kind
    if timeouts:
        return "timeout"
    if transport:
        return "transport_error"
    if tool_errors:
        return "retryable_tool_error"
    return "unexplained"


def _by_fault(table: pd.DataFrame, fold: Fold) -> dict[str, Any]:
    """Per fault kind: how many intents it hit, and what became of them (rates among those hit)."""
    hit_rows = table[table["faults"] != ""]
    kinds = sorted({k for s in hit_rows["faults"] for k in s.split(";")}, key=_fault_order)
    out: dict[str, Any] = {}
    for kind in kinds:
        rows = hit_rows[[kind in s.split(";") for s in hit_rows["faults"]]]
        counts = rows["verdict"].value_counts()
        n = len(rows)
        out[kind] = {
            "events": _events_of(kind, fold),
            "intents_hit": n,
            "verdicts": {str(v): int(c) for v, c in counts.items()},
            "duplicate": Rate(int(counts.get(Verdict.DUPLICATE.value, 0)), n).as_dict(),
        }
    return out


def _events_of(kind: str, fold: Fold) -> int:
    if kind == "crash":
        return fold.crashes
    if kind in ("sever_response", "sever_mid_stream"):
        return fold.severs.get(kind, 0)
    return int(fold.faults.get(kind, 0))


def _fault_order(kind: str) -> tuple[int, str]:
    return (CAUSE_ORDER.index(kind) if kind in CAUSE_ORDER else len(CAUSE_ORDER), kind)


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
    started_mask = fold.intents["client_status"] != ClientStatus.NOT_STARTED
    # The fold's frame is ours to extend; copy only when some intents are dropped.
    table = fold.intents if started_mask.all() else fold.intents[started_mask].copy()
    by_marker = pd.Series(effects, dtype=np.int64)
    table["effects"] = table["marker"].map(by_marker).fillna(0).astype(np.int64)
    matched = int(table["effects"].sum())
    # Effects whose marker belongs to no intent of this run (another run's, or the query is wrong).
    all_matched = matched == int(by_marker.sum())
    foreign_markers = pd.Index([]) if all_matched else by_marker.index.difference(pd.Index(table["marker"]))
    table["verdict"] = judge_all(table["client_status"].to_numpy(), table["effects"].to_numpy())
    table["client_status"] = _STATUS_NAMES[table["client_status"].to_numpy()]
    table["cause"] = ""
    dup = table["verdict"] == Verdict.DUPLICATE.value
    table.loc[dup, "cause"] = [
        _cause(f, to, tr, te)
        for f, to, tr, te in zip(
            table.loc[dup, "faults"],
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
    foreign = int(by_marker[foreign_markers].sum())
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
            "attempts_hit_by_pod_fault": int(table["attempts_hit_by_pod_fault"].sum()),
        },
        "verdicts": verdicts,
        "rates": rates,
        "causes": {
            "duplicate": {k: int(v) for k, v in table.loc[dup, "cause"].value_counts().sort_index().items()},
        },
        "by_fault": _by_fault(table, fold),
        "effects": {
            "total": int(sum(effects.values())),
            "foreign": foreign,
            "foreign_examples": sorted(foreign_markers)[:5],
        },
        "gate": {"passed": not gate_violations, "violations": gate_violations},
    }
    return AuditResult(
        run_dir=run_dir, scenario=scenario, intents=table.reset_index(drop=True), summary=summary
    )


def audit_run(run_dir: Path) -> AuditResult:
    """Audit a run directory, complete or partial."""
    scenario = load_scenario(run_dir / "scenario.yaml")
    # The effect query runs in a thread while the history is folded: sqlite releases the GIL.
    with ThreadPoolExecutor(max_workers=1) as pool:
        effects = pool.submit(count_effects, scenario.audit.effects, run_dir)
        fold = fold_history(read_batches(run_dir / "history.jsonl"))
        return judge_fold(fold, effects.result(), scenario, run_dir)
