"""The typed summary of one audit: what every report, gate and comparison reads.

Built from the fold (the history) and the judged intents added up (``audit.tally``), once; every
renderer (terminal, Markdown, JSON) reads these fields, never a dict by string
keys, so a field that moves breaks the type check, not a report at run time.
``Summary.to_json`` is the shape of ``summary.json``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.audit.control import ControlComparison
from harness.audit.findings import Finding, findings
from harness.audit.fixes import unavailable_fix as evidence_fix
from harness.audit.fold import ErrorTally, Fold, MissedFault
from harness.audit.podlogs import FaultEvidence
from harness.audit.runfacts import RunFacts
from harness.audit.stats import Rate
from harness.audit.stories import FindingClass
from harness.audit.tally import Tally
from harness.faultkinds.registry import BLAME, SCHEDULED
from harness.history import FaultKind, Outcome, RunStatus, Verdict

TOP_ERRORS = 10
"""The most common error messages kept in a summary."""


@dataclass(frozen=True, slots=True)
class IntentCounts:
    planned: int
    started: int
    ended: int


@dataclass(frozen=True, slots=True)
class AttemptCounts:
    total: int
    retries: int
    open_at_end: int
    by_outcome: dict[Outcome, int]


@dataclass(frozen=True, slots=True)
class PodCounts:
    exits: int
    crashes: int
    """Exits that no kill explains: the target died by itself."""
    attempts_hit: int
    """Attempts in flight when a pod was killed, crashed, froze or thawed."""


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """2025-protocol sessions: opened (the first, and each after a loss) and lost."""

    opened: int
    lost: int
    lost_after: dict[str, int]
    """Losses by the pod fault last before them (kill, crash, pause; none: no pod fault yet)."""
    resumed: int = 0
    """Broken event streams resumed (GET with Last-Event-ID): the call was not re-issued."""
    resume_failed: int = 0
    """Broken event streams that could not be resumed: the call was re-issued."""


class _Lost:
    """What the rows that tally verdicts (a fault's, a replica's) say of the lost intents."""

    __slots__ = ()
    verdicts: dict[Verdict, int]

    @property
    def lost(self) -> int:
        return self.verdicts.get(Verdict.LOST, 0)


@dataclass(frozen=True, slots=True)
class FaultRow(_Lost):
    """One kind of fault: how many were planned and injected, and what became of the intents hit."""

    kind: FaultKind
    planned: int | None
    """None for faults that fire by rule (stream faults with a probability, crashes)."""
    injected: int
    intents_hit: int
    verdicts: dict[Verdict, int]
    duplicate: Rate
    """Duplicates among the intents this fault hit."""


@dataclass(frozen=True, slots=True)
class Pacing:
    """How the injector paced the pod faults it struck (kills, pauses): which held dispatching
    while they waited for their pod, for how long, and what was in flight when they struck."""

    faults: int
    held: int
    """Of those, how many held dispatching (``faults.kill.hold_dispatch``: true, or auto when needed)."""
    held_s: float
    """Seconds no new intent could start, all of them together."""
    least_in_flight: int
    """The fewest attempts in flight as one of them struck (0: one hit nothing)."""

    @staticmethod
    def of(paced: list[tuple[float | None, int]]) -> Pacing | None:
        if not paced:
            return None
        held = [h for h, _ in paced if h is not None]
        return Pacing(len(paced), len(held), round(sum(held), 3), min(n for _, n in paced))


@dataclass(frozen=True, slots=True)
class ReplicaRow(_Lost):
    """One replica of a target with several: the intents first sent to it, and what became of them."""

    pod: str
    intents: int
    """Intents whose first attempt went to this replica."""
    verdicts: dict[Verdict, int]
    duplicate: Rate
    moved: int
    """Of those, intents whose later attempts went to another replica (a retry elsewhere)."""
    moved_duplicates: int
    """Duplicates among the moved intents."""


@dataclass(frozen=True, slots=True)
class ErrorMessage:
    """An error message and how often attempts ended with one like it."""

    outcome: Outcome
    code: str | None
    message: str
    count: int


@dataclass(frozen=True, slots=True)
class EffectCounts:
    total: int
    foreign: int
    """Effects whose marker belongs to no intent of this run (another run's, or a wrong query)."""
    foreign_examples: list[str]


@dataclass(frozen=True, slots=True)
class UnavailableRow:
    """A pod that came back from a fault and answered no call: it needs a person to recover it."""

    pod: str
    after: str
    """The pod fault it did not recover from (``crash#1 pod-0 @3.10s``), or ``a restart``."""
    for_s: float
    failed: int
    """Attempts that got no answer in that time."""
    locks: list[str]
    """Lock-like files written in its data directory since the last answer before the fault."""
    log: str
    """The pod log's last lines when it was found."""
    came_back: bool = True
    """False: it never became ready again after the fault, ``why`` (exited as it started, or silent)."""
    why: str = ""
    answered: int = 0
    """Calls it answered after it came back, before it fell silent."""

    def fix(self, unreadable: Sequence[str] = ()) -> str:
        """Its fix, from what its log and data directory show (``unreadable``: the store's files that do
        not parse), saying which."""
        return evidence_fix("\n".join([self.why, self.log]), self.locks, unreadable)

    @property
    def sentence(self) -> str:
        held = f"; lock-like files since the fault: {', '.join(self.locks[:5])}" if self.locks else ""
        said = f"; its log ends: {self.log!r}" if self.log else ""
        if not self.came_back:
            return f"{self.pod} did not come back after {self.after}: {self.why}{said}"
        if self.answered:
            calls = "call" if self.answered == 1 else "calls"
            return (
                f"{self.pod} answered {self.answered} {calls} after {self.after}, then none of {self.failed} "
                f"calls in {self.for_s:.0f}s{held}{said}"
            )
        return (
            f"{self.pod} was up again after {self.after} and answered none of {self.failed} calls in "
            f"{self.for_s:.0f}s{held}{said}"
        )


@dataclass(frozen=True, slots=True)
class UnreadableStore:
    """A file of the store that does not parse in the format its server reads it in: the server cannot
    read its store again, and the effects it held are lost with it."""

    path: str
    format: str
    error: str
    """The parse error, as the parser said it."""
    held: int
    """Intents of the run whose effects it held (none of them counted)."""
    lost: int
    """Of those, the intents acknowledged: lost."""
    torn_by: str
    """The pod fault that tore it (``crash#1 pod-0 @4.10s``), or empty: none came after the last read that
    found the store whole, so the server tore it by itself."""

    @property
    def sentence(self) -> str:
        by = f"torn by {self.torn_by}" if self.torn_by else "torn with no pod fault after the last whole read"
        lost = f", {self.lost} of them acknowledged, now lost" if self.lost else ""
        return (
            f"{self.path} does not parse as {self.format} ({self.error}): the server cannot read its store "
            f"again; it held the effects of {self.held} intents, none counted{lost} ({by})"
        )


@dataclass(frozen=True, slots=True)
class CheckpointCounts:
    """Reads of the effect source during the run, and what they showed."""

    reads: int
    failed: int
    """Reads that failed or were abandoned (they saw nothing)."""
    took_s: float
    """The reads' time, all together."""
    vanished: int
    """Intents whose effects a read saw and the end of the run did not, across a pod restart."""


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One finding as the gate judged it."""

    name: str
    """``lost``, ``applied_despite_error``, ``duplicate`` or ``inconclusive``."""
    status: str
    """``failed``, ``passed``, ``expected`` (a canary that showed) or ``not_gated``."""
    message: str


@dataclass(frozen=True, slots=True)
class GateResult:
    passed: bool
    violations: list[str]
    not_gated: list[str] = field(default_factory=list)
    """Findings the gate let through because it does not list them: said, never silent."""
    checks: list[GateCheck] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Summary:
    run_id: str
    scenario: str
    seed: int
    status: RunStatus
    status_reason: str | None
    duration_s: float
    inconclusive: list[str]
    """Why the run did not test what it planned (faults that did not happen); empty: conclusive."""
    intents: IntentCounts
    attempts: AttemptCounts
    protocol: str | None
    """The protocol the target answered in: 2026-07-28, or the 2025 version negotiated."""
    sessions: SessionCounts
    pods: PodCounts
    faults: list[FaultRow]
    missed_faults: list[MissedFault]
    verdicts: dict[Verdict, int]
    rates: dict[Verdict, Rate]
    duplicate_causes: dict[str, int]
    errors: list[ErrorMessage]
    effects: EffectCounts
    gate: GateResult = field(default_factory=lambda: GateResult(True, []))
    replicas: list[ReplicaRow] = field(default_factory=list)
    """With several replicas: a row per replica (empty for a single pod)."""
    started_at: str = ""
    """When the run started (UTC, ISO 8601), as its history says."""
    pacing: Pacing | None = None
    """How the pod faults were paced (None: no pod fault said so, or a history from before pacing)."""
    findings: list[Finding] = field(default_factory=list)
    """Every finding, worst first (lost, applied_despite_error, duplicate, inconclusive), or the
    all-clear; the first is the headline every renderer prints first."""
    causes: dict[Verdict, dict[str, int]] = field(default_factory=dict)
    """Per verdict other than exactly_once: cause -> intents."""
    classes: list[FindingClass] = field(default_factory=list)
    """Every (verdict, cause) class with its meaning, fix and stories, worst verdict first."""
    checkpoints: CheckpointCounts = field(default_factory=lambda: CheckpointCounts(0, 0, 0.0, 0))
    replies_as_failure: int = 0
    """Ok replies whose text reads as a failure (attempts)."""
    failure_replies: list[ErrorMessage] = field(default_factory=list)
    """The most common of those replies."""
    evidence: list[FaultEvidence] = field(default_factory=list)
    """Error-looking pod log lines around the pod faults."""
    control: ControlComparison | None = None
    """The control run (the same workload with no fault) beside this one, when the run had one."""
    unavailable: list[UnavailableRow] = field(default_factory=list)
    """Pods back from a fault that answered no call (the run stopped on the first)."""
    unreadable: list[UnreadableStore] = field(default_factory=list)
    """Files of the store that do not parse as its server reads them."""

    @property
    def headline(self) -> Finding:
        """The worst finding (or the all-clear): what every renderer prints first."""
        return self.findings[0]

    @property
    def conclusive(self) -> bool:
        return not self.inconclusive

    @property
    def duplicates(self) -> Rate:
        return self.rates[Verdict.DUPLICATE]

    def fault(self, kind: FaultKind) -> FaultRow | None:
        return next((row for row in self.faults if row.kind is kind), None)

    def injected(self, kind: FaultKind) -> int:
        row = self.fault(kind)
        return row.injected if row is not None else 0

    def to_json(self) -> dict[str, Any]:
        """The summary as plain JSON values: enums as their values, rates with their intervals."""
        data = _plain(self)
        assert isinstance(data, dict)
        data["conclusive"] = self.conclusive
        return {"headline": _plain(self.headline), **data}


def _plain(value: Any) -> Any:
    if isinstance(value, Rate):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _fault_rows(tally: Tally, fold: Fold, facts: RunFacts) -> list[FaultRow]:
    """Per fault kind: planned and injected, how many intents it hit, and what became of them."""
    hit_sets = [(set(cell.split(";")), verdict, n) for (cell, verdict), n in tally.fault_cells.items()]
    kinds = (
        {k for s, _, _ in hit_sets for k in s}
        | set(fold.faults)
        | {k for k, n in fold.faults_planned.items() if n}
    )
    if fold.crashes:
        kinds.add(FaultKind.CRASH)
    rule_planned = _stream_plan(facts)
    rows = []
    for kind in (k for k in BLAME if k.value in kinds):
        verdicts: Counter[str] = Counter()
        for cell, verdict, count in hit_sets:
            if kind.value in cell:
                verdicts[verdict] += count
        n = sum(verdicts.values())
        if kind in SCHEDULED:
            planned: int | None = max(fold.faults_planned.get(kind, 0), fold.faults.get(kind, 0))
        else:
            planned = rule_planned.get(kind)
        rows.append(
            FaultRow(
                kind=kind,
                planned=planned,
                injected=fold.crashes if kind is FaultKind.CRASH else int(fold.faults.get(kind, 0)),
                intents_hit=n,
                verdicts={Verdict(v): c for v, c in sorted(verdicts.items(), key=lambda vc: (-vc[1], vc[0]))},
                duplicate=Rate(verdicts.get(Verdict.DUPLICATE.value, 0), n),
            )
        )
    return rows


def _replica_rows(tally: Tally) -> list[ReplicaRow]:
    """Per replica (by each intent's first attempt): verdicts, and how many retries went elsewhere."""
    if tally.replicas is None:
        return []
    return [
        ReplicaRow(
            pod=pod,
            intents=mine.intents,
            verdicts={
                Verdict(v): c for v, c in sorted(mine.verdicts.items(), key=lambda vc: (-vc[1], vc[0]))
            },
            duplicate=Rate(mine.verdicts.get(Verdict.DUPLICATE.value, 0), mine.intents),
            moved=mine.moved,
            moved_duplicates=mine.moved_duplicates,
        )
        for pod, mine in sorted(tally.replicas.items())
    ]


def _stream_plan(facts: RunFacts) -> dict[FaultKind, int]:
    """Stream faults planned for sure: rules that name an intent (an explicit plan) hit it at least once."""
    planned: dict[FaultKind, int] = {}
    for rule in facts.stream_rules:
        if rule.intent is not None and rule.probability is None:
            kind = FaultKind(rule.fault)
            planned[kind] = planned.get(kind, 0) + 1
    return planned


HOLD = "hold"
"""What a ``fault_missed`` of a plan's hold (an order never made) names as its fault."""
NOTHING_MEASURED = 0.5
"""A run is inconclusive when more than this share of its intents never took effect (rejected or given up):
a typo in the tool's name, credentials that expired, a server that refused the protocol."""


def _inconclusive(fold: Fold, facts: RunFacts, tally: Tally, faults: Sequence[FaultRow]) -> list[str]:
    reasons = []
    started = tally.started
    refused = tally.verdicts[Verdict.REJECTED.value] + tally.verdicts[Verdict.UNFINISHED.value]
    if started and refused > NOTHING_MEASURED * started:
        common = max(fold.errors.values(), key=lambda e: e.count, default=None)
        said = f"; most common answer: {common.example}" if common is not None else ""
        reasons.append(f"{refused} of {started} intents never took effect (rejected or given up){said}")
    stopped = _stopped_by_harness(fold)
    for kind in SCHEDULED:
        planned, injected = fold.faults_planned.get(kind, 0), fold.faults.get(kind, 0)
        missed = planned - injected - sum(u.kind == kind for u in fold.unfinished)
        if missed > 0:
            why = stopped or next((m.reason for m in fold.missed if m.kind == kind), "the run ended first")
            reasons.append(f"{missed} of {planned} planned {kind.value}s did not happen ({why})")
    for fault in fold.unfinished:
        reasons.append(f"a {fault.kind} did not finish, so whether it happened is not known: {fault.reason}")
    for lost in fold.missed:
        if lost.kind == HOLD:  # a plan's order the target never let happen: no pod fault to count
            reasons.append(f"{lost.trigger} was not made: {lost.reason}")
    kill_signal = facts.kill_signal
    abrupt = {FaultKind.PAUSE} | ({FaultKind.KILL} if kill_signal in (None, "SIGKILL") else set())
    for row in faults:
        # A crash meant to break calls that struck an idle server each time: no attempt broke, so no retry
        # after one was ever judged. (A graceful stop or a rollout lets its calls finish by design.)
        if row.kind in abrupt and row.injected and not row.intents_hit:
            reasons.append(
                f"{row.injected} {row.kind.value}{'s' if row.injected > 1 else ''} hit no attempt in "
                "flight: none broke a call, so no retry after one was tested"
            )
    for index, rule in enumerate(facts.stream_rules):
        if rule.intent is not None and rule.probability is None and not fold.rule_hits.get(index):
            if rule.intent < started:
                why = "its exchange never matched"
            else:
                why = f"intent {rule.intent} never started"
            reasons.append(
                f"stream fault rule {index} ({rule.fault} on intent {rule.intent}) never fired: {why}"
            )
    return reasons


def _stopped_by_harness(fold: Fold) -> str | None:
    """Why the run ended before its faults, when neither the workload nor its length did: the harness
    stopped it (a pod that answers nothing, or that never came back), or a person interrupted it."""
    ended = fold.ended or {}
    status, reason = ended.get("status"), ended.get("reason")
    said = f": {reason}" if reason else ""
    if status == RunStatus.STOPPED:
        return f"the harness stopped the run before them{said}"
    if status == RunStatus.INTERRUPTED:
        return f"the run was interrupted before them{said}"
    return None


def _errors(tallies: Iterable[ErrorTally]) -> list[ErrorMessage]:
    ranked = sorted(tallies, key=lambda e: (-e.count, e.outcome, e.example))
    return [ErrorMessage(Outcome(e.outcome), e.code, e.example, e.count) for e in ranked[:TOP_ERRORS]]


def _causes(tally: Tally) -> dict[Verdict, dict[str, int]]:
    causes: dict[Verdict, dict[str, int]] = {}
    for (verdict, cause), n in sorted(tally.causes.items()):
        causes.setdefault(Verdict(verdict), {})[cause] = n
    return causes


def _context(faults: list[FaultRow], exits: int, crashes: int) -> str:
    """What the counts were measured under: ``with 8 kills, 8 pod exits`` (and the crashes among them)."""
    kill = next((row for row in faults if row.kind is FaultKind.KILL), None)
    if kill is None:
        text = "0 kills"
    elif kill.planned is not None and kill.planned != kill.injected:
        text = f"{kill.injected} of {kill.planned} planned kills"
    else:
        text = f"{kill.injected} kills"
    rollout = next((row for row in faults if row.kind is FaultKind.ROLLOUT), None)
    if rollout is not None:
        of = f" of {rollout.planned} planned" if rollout.planned not in (None, rollout.injected) else ""
        text += f", {rollout.injected}{of} pods replaced by rollouts"
    crashed = f" ({crashes} by a crash)" if crashes else ""
    return f"with {text}, {exits} pod exits{crashed}"


def unavailable_fix(rows: Sequence[UnavailableRow], unreadable: Sequence[str] = ()) -> str:
    """The fix of the first pod found unavailable (the run stopped on it), from its evidence."""
    return rows[0].fix(unreadable) if rows else ""


def _unavailable(fold: Fold) -> list[UnavailableRow]:
    rows = []
    for found in fold.unavailable:
        before = [f for f in fold.pod_faults if f.pod == found.pod and f.seq < found.ready_seq]
        after = before[-1].label() if before else "a restart" if fold.pod_faults else "its start"
        rows.append(
            UnavailableRow(
                found.pod,
                after,
                found.for_s,
                found.failed,
                found.locks,
                found.log,
                found.came_back,
                found.why,
                found.answered,
            )
        )
    return rows


def summarize(
    fold: Fold,
    tally: Tally,
    effects: EffectCounts,
    facts: RunFacts,
    run_dir: Path,
    unreadable: Sequence[UnreadableStore] = (),
) -> Summary:
    """The summary of a judged run (``tally``: its judged intents, added up; ``unreadable``: the files of
    its store that do not parse)."""
    started = tally.started
    verdicts = {v: tally.verdicts[v.value] for v in Verdict}
    rates = {v: Rate(c, started) for v, c in verdicts.items()}
    causes = _causes(tally)
    faults = _fault_rows(tally, fold, facts)
    inconclusive = _inconclusive(fold, facts, tally, faults)
    reads = fold.checkpoints
    total_attempts = tally.attempts
    by_outcome = {o: tally.outcomes[o] for o in Outcome}
    ended = fold.ended or {}
    unavailable = _unavailable(fold)
    return Summary(
        run_id=str(fold.run.get("run_id", run_dir.name)),
        started_at=str(fold.run.get("started_at", "")),
        scenario=facts.scenario,
        seed=facts.seed,
        status=RunStatus(ended.get("status", RunStatus.UNFINISHED)),
        status_reason=ended.get("reason"),
        duration_s=round(fold.duration_s, 3),
        inconclusive=inconclusive,
        intents=IntentCounts(
            planned=facts.intents,
            started=started,
            ended=tally.ended,
        ),
        attempts=AttemptCounts(
            total=total_attempts,
            # A question (MRTR) is answered by the intent's next attempt: a round, not a retry.
            retries=total_attempts - started - by_outcome[Outcome.INPUT_REQUIRED],
            open_at_end=fold.open_attempts,
            by_outcome=by_outcome,
        ),
        protocol=fold.protocol,
        sessions=SessionCounts(
            opened=fold.sessions_opened,
            lost=sum(fold.sessions_lost.values()),
            lost_after=dict(sorted(fold.sessions_lost.items())),
            resumed=fold.resumed[True],
            resume_failed=fold.resumed[False],
        ),
        pods=PodCounts(
            exits=fold.pod_exits,
            crashes=fold.crashes,
            attempts_hit=tally.attempts_hit,
        ),
        faults=faults,
        replicas=_replica_rows(tally),
        missed_faults=list(fold.missed),
        pacing=Pacing.of(fold.paced),
        verdicts=verdicts,
        rates=rates,
        duplicate_causes=dict(sorted(causes.get(Verdict.DUPLICATE, {}).items())),
        errors=_errors(fold.errors.values()),
        effects=effects,
        findings=findings(
            verdicts,
            rates,
            causes,
            inconclusive,
            _context(faults, fold.pod_exits, fold.crashes),
            unavailable=[u.sentence for u in unavailable],
            unavailable_fix=unavailable_fix(unavailable, [u.path for u in unreadable]),
            unreadable=[u.sentence for u in unreadable],
            not_started=max(0, facts.intents - started),
            story=None
            if tally.emptied is None
            else tally.emptied.sentence(tally.acked_after, tally.stored_after),
        ),
        causes=causes,
        checkpoints=CheckpointCounts(
            reads=len(reads),
            failed=sum(not r.ok for r in reads),
            took_s=round(sum(r.took_s or 0.0 for r in reads), 3),
            vanished=tally.vanished,
        ),
        replies_as_failure=sum(t.count for t in fold.failure_replies.values()),
        failure_replies=_errors(fold.failure_replies.values()),
        unavailable=unavailable,
        unreadable=list(unreadable),
    )
