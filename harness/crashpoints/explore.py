"""``mcp-chaos crashpoints``: kill the target at every point of a call, a few times each, and judge each try.

The exploration is one ordinary run of the user's scenario, changed so that
its hold points explore (``faults.crash_points.explore``, planned by
``harness.crashpoints.paths``): intent 0 is a clean call whose points become the
plan; every later intent is one try, held at its point, killed there,
restarted and retried by the client with the same key and a new request id.
The run directory is a run like any other, audited by the ordinary auditor;
this module reads its history back to group the intents by the path they were
held along, so every verdict is the auditor's.

What the exploration changes of the scenario, and why:

* one intent at a time, as many as the budget could ever hold (a try is a restart at
  least; the plan stops the run once its tries are made or its budget is spent), no
  other fault, no gate, the budget in the run's time limit;
* the pod is restarted at once (as often as the plan can kill it), and the client
  retries every 0.1 s, with as many attempts as a restart can take: a try then
  costs the pod's restart and little more. What is tested stays the client's: a
  new request id and the intent's key (as ``client.key_reuse`` says) on every retry.
"""

from __future__ import annotations

import math
import posixpath
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import rundir
from harness.audit.accumulators.checkpoint_reads import CheckpointRead
from harness.audit.auditor import AuditResult
from harness.audit.verdicts import ClientStatus, judge
from harness.auditing import audit_and_report
from harness.crashpoints.cost import TryCost, try_costs
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.paths import labelled
from harness.crashpoints.points import (
    CRASH_KINDS,
    EDGES,
    KINDS,
    MAX_DEPTH,
    Point,
    PointKind,
    Site,
    parse_path,
    path_name,
)
from harness.crashpoints.proof import Held, Try, clean_call, clean_points, read_evidence
from harness.errors import PreflightError
from harness.history import FINDINGS, RunStatus, Verdict, read_history
from harness.run.runner import execute
from harness.scenario import FilesEffects, JsonlEffects, Scenario, SqlEffects, parse_scenario

RETRY_EVERY_S = 0.1
"""The exploration's backoff: what a retry waits for is the pod's restart, not a pause."""
DETAILS = ("statements", "wrote", "autocommit", "label", "nth", "key", "replayed", "paths")
"""What a ``crash_point`` event says of its point beyond its name."""


def hold_points(scenario: Scenario) -> list[PointKind]:
    """Where the harness can hold this target's work: the kinds crash points hold (beyond ``request`` and
    ``response``, always there, which tell nothing of what a crash leaves half done) seen at a site that
    serves it. The PostgreSQL proxy when it writes to the harness's PostgreSQL (``{postgres_url}``), the
    sink when it calls it (``{sink_url}``), the downstream proxy in front of an API
    (``services.downstream``), the file tracer when it runs as a process or a container whose file
    operations on its data directory can be traced (unless ``faults.crash_points.files`` says not to)."""
    target = scenario.target
    texts = [*(target.command or ()), *target.env.values()]
    served = set()
    if scenario.services.postgres is not None and any("{postgres_url}" in t for t in texts):
        served.add(Site.POSTGRES)
    if scenario.audit.effects.sink is not None and any("{sink_url}" in t for t in texts):
        served.add(Site.SINK)
    if scenario.services.downstream is not None:
        served.add(Site.DOWNSTREAM)
    crash = scenario.faults.crash_points
    if target.runtime in ("process", "docker") and (crash is None or crash.files):
        served.add(Site.FILES)
    return [k for k in PointKind if k in CRASH_KINDS - EDGES and KINDS[k].sites & served]


def unexplorable(scenario: Scenario) -> str | None:
    """Why an exploration cannot hold this scenario's target where its work becomes durable, or None."""
    target = scenario.target
    if target.replicas != 1 or target.kubernetes is not None:
        return (
            "crash points hold one pod the harness runs (a proxy in front of it, or its host over stdio, "
            "one call at a time); this target is replicated or in Kubernetes"
        )
    if scenario.services.balancer is not None:
        return "crash points hold one pod, one call at a time; this scenario puts a balancer in front"
    if target.url is not None:
        return (
            "target.url is a server the harness does not start: none of its writes passes through a "
            "PostgreSQL, sink or file operations the harness holds, so only request and response are "
            "reachable, and they prove nothing of what a crash leaves half done; hold response in a run "
            "(faults.crash_points.holds, with target.kill_command), or run the same server as a "
            "target.command or image to explore it"
        )
    if not hold_points(scenario):
        return (
            "no hold point: the target neither reaches the harness's PostgreSQL ({postgres_url} in "
            "target.command or target.env, with services.postgres) nor calls its effect sink ({sink_url}, "
            "with audit.effects.sink), and its file operations are not traced (a Docker target, or "
            "faults.crash_points.files: false), so no crash can be held where its work becomes durable "
            "(request and response alone prove nothing); give it one of those, or crash it at a failpoint "
            "with crash_window (--crash-env)"
        )
    return None


def exploring_scenario(
    scenario: Scenario, options: ExploreOptions, *, share: tuple[int, int] = (1, 1)
) -> Scenario:
    """The scenario as the exploration runs it (see the module's docstring); UsageError for options out
    of range, named as the command line asks for them (the scenario's fields derived from them, such as
    ``target.max_restarts``, were named instead)."""
    options = options.checked()
    tries = max(1, min(MAX_TRIES, math.ceil(options.budget_s / RETRY_EVERY_S)))
    data = retry_quickly(scenario, kills=MAX_DEPTH * tries)
    # The warm-up and the clean call, then as many tries as the budget could hold.
    data["workload"].update(intents=2 + tries, concurrency=1)
    patience_s = data["client"]["give_up_after_s"]
    limit = max(data["workload"]["max_duration_s"], options.budget_s + 2 * patience_s + DRAIN_S)
    data["workload"]["max_duration_s"] = min(limit, MAX_RUN_S)
    files = scenario.faults.crash_points.files if scenario.faults.crash_points is not None else True
    explore: dict[str, Any] = {
        "repeat": options.repeat,
        "budget_s": options.budget_s,
        "only": list(options.only) if options.only is not None else None,
        "power_loss": options.power_loss,
        "store": store_files(scenario),
    }
    if share != (1, 1):
        explore.update(job=share[0], jobs=share[1])
    data["faults"] = {"crash_points": {"explore": explore, "files": files}}
    data["gate"] = {}
    return parse_scenario(data, source="the exploration of " + scenario.name)


MAX_TRIES = 50_000
"""Tries an exploration's run is given intents for at most (a try is a restart: the longest budget's
worth), and restarts for, twice over (a crash in a retry's recovery)."""
DRAIN_S = 60.0
"""Beyond the budget and the try in flight: the clean call before it, and the run's end."""
MAX_RUN_S = 86_400.0
SQLITE_COMPANIONS = ("", "-journal", "-wal", "-shm")
"""The files of a SQLite database: what a commit writes besides the database itself."""


def store_files(scenario: Scenario) -> list[str] | None:
    """Globs of the files the effect source reads, relative to the data directory (their crash states are
    tried first); None where the harness does not see the store: a ``tool`` or ``command`` source, or
    files outside ``{data_dir}`` (every point is then a crash state of its own). A database or a
    downstream the harness holds is seen: its commits and calls are points."""
    kind, source = scenario.audit.effects.chosen
    if kind in ("sink", "downstream"):
        return []
    if isinstance(source, SqlEffects):
        if not source.is_sqlite:
            return [] if source.url.startswith("{postgres_url}") else None
        inside = _in_data_dir(source.url.removeprefix("sqlite:///"))
        return None if inside is None else [inside + end for end in SQLITE_COMPANIONS]
    if isinstance(source, JsonlEffects):
        inside = _in_data_dir(source.path)
        return None if inside is None else [inside]
    if isinstance(source, FilesEffects):
        inside = _in_data_dir(source.dir)
        return None if inside is None else [posixpath.join(inside, source.pattern).removeprefix("./")]
    return None


def _in_data_dir(path: str) -> str | None:
    """``{data_dir}/notes.jsonl`` -> ``notes.jsonl`` (``{data_dir}`` itself: ``.``); None outside it."""
    if path.rstrip("/") == "{data_dir}":
        return "."
    if not path.startswith("{data_dir}/"):
        return None
    return posixpath.normpath(path.removeprefix("{data_dir}/"))


def retry_quickly(scenario: Scenario, *, kills: int) -> dict[str, Any]:
    """The scenario's data with an immediate restart (up to ``kills`` of them), and a client retrying
    every 0.1 s until the pod is back."""
    data = scenario.model_dump(mode="json")
    target = data["target"]
    target["restart_delay_s"] = 0.0
    target["max_restarts"] = max(target["max_restarts"], kills)
    patience_s = target["ready_timeout_s"] + target["stop_timeout_s"] + 10
    client = data["client"]
    client["backoff"] = {
        "initial_s": RETRY_EVERY_S,
        "max_s": RETRY_EVERY_S,
        "multiplier": 1.0,
        "jitter": "none",
    }
    client["max_attempts"] = max(client["max_attempts"], min(1000, math.ceil(patience_s / RETRY_EVERY_S)))
    # Bounded by time too: those many attempts span a restart, and each of a server that hangs would
    # run to its timeout (280 of 20 s: the exploration ran to max_duration_s).
    client["give_up_after_s"] = patience_s + client["attempt_timeout_s"]
    return data


@dataclass
class PointResult:
    """The tries of one path: which its history proves, and how the auditor judged those."""

    path: tuple[Point, ...]
    repeat: int = 1
    """Proven tries the plan wanted."""
    same: tuple[str, ...] = ()
    """The points whose crash state this path's shares: its tries stand for theirs."""
    cut: bool = False
    """The budget ran out before every try it wanted: a try proven is enough (the coverage says how many)."""
    proven: list[int] = field(default_factory=list)
    """Intents whose crash the history proves (held, killed there, answer withheld)."""
    unproven: dict[int, str] = field(default_factory=dict)
    """Intents held along this path without that proof, and why."""
    verdicts: Counter[str] = field(default_factory=Counter)
    """The proven tries' verdicts: the only ones a finding is read from."""
    unproven_verdicts: Counter[str] = field(default_factory=Counter)
    wiped: dict[str, list[int]] = field(default_factory=dict)
    """Per verdict, intents acknowledged before a proven try here and lost to its crash (a store the
    crash tore or rolled back, read as empty): the crash's damage beside the held intent's own."""
    held: dict[int, list[Held]] = field(default_factory=dict)
    """Per try, its holds: what each held commit committed (its statements), a downstream call's key."""
    unavailable: str | None = None
    """The pod, killed in a try at this point, came back and answered no call (the run stopped on it):
    a finding of its own, worse than any verdict (a person must recover the server)."""
    explored_in: Exploration | None = None
    """The copy's exploration its tries were made in (``--jobs``), whose run holds their stories; None:
    the exploration it is a point of."""

    @property
    def name(self) -> str:
        return path_name(self.path)

    @property
    def tries(self) -> int:
        return len(self.proven) + len(self.unproven)

    @property
    def intents(self) -> list[int]:
        return sorted([*self.proven, *self.unproven])

    @property
    def finding(self) -> Verdict | None:
        """The worst verdict its proven tries got, or earlier intents lost to their crashes, if it is a
        retry-safety violation."""
        return next((v for v in FINDINGS if self.verdicts[v.value] or self.wiped.get(v.value)), None)

    @property
    def inconclusive(self) -> str | None:
        """Why this point's result cannot be trusted (fewer proven tries than planned), or None."""
        if len(self.proven) >= self.repeat or self.unavailable is not None or (self.cut and self.proven):
            return None
        if not self.unproven:
            return f"{self.name}: no try (the exploration ended before it)"
        reasons = sorted(set(self.unproven.values()))
        return f"{self.name}: {len(self.proven)} of {self.repeat} tries proven; {'; '.join(reasons)}"

    def example(self, verdicts: dict[int, str]) -> int:
        """The intent whose story is told: the first proven try with the finding, else the first intent its
        crashes wiped (else the first try)."""
        finding = self.finding
        if finding is not None:
            held = next((i for i in self.proven if verdicts[i] == finding.value), None)
            return held if held is not None else self.wiped[finding.value][0]
        return (self.proven or self.intents)[0]


@dataclass
class Exploration:
    """What ``crashpoints`` found, with everything its reports read."""

    scenario: Scenario
    run_dir: Path
    repeat: int
    clean: tuple[Point, ...]
    """The points of the clean call, in order, each with its label."""
    details: dict[str, dict[str, Any]]
    """Per point of the clean call, what it said: the statements a commit ran, a downstream call's key."""
    points: list[PointResult]
    clean_calls: Counter[str]
    """Verdicts of the intents held nowhere (the clean call, and those after the plan ran out)."""
    verdicts: dict[int, str]
    """Each intent's verdict as its point reads it: the auditor's, or, for an intent a later try's crash
    took effects of, judged on what the store held before (:func:`_taken`)."""
    effects: dict[int, int]
    audit: AuditResult
    seconds: float
    not_passed: list[str] = field(default_factory=list)
    """Points asked for (``--only``) that the clean call never passed, so none was explored."""
    untried: list[str] = field(default_factory=list)
    """Crash states of the clean call never tried (the budget ran out, or the run ended first), by the
    point each would have been tried at."""
    deferred: list[str] = field(default_factory=list)
    """Paths of two (a crash in a retry's recovery) the budget left no time for: not explored."""
    bypassed: str | None = None
    """The store changed in the clean call while the harness saw nothing of the call commit it."""
    ended: str | None = None
    """How the run ended when it did not complete (a deadline, an interrupt)."""
    options: ExploreOptions = field(default_factory=ExploreOptions)
    """What the exploration was asked for (its budget, its tries per state)."""
    crash_points: int = 0
    """The clean call's crash points (each point, each way it is crashed), which its states stand for."""
    ran_out: bool = False
    """The budget was spent with tries left to make."""
    clean_intent: int = 0
    """The clean call's intent: 0, or 1 where intent 0 warmed up a fresh file store."""
    planned: list[str] = field(default_factory=list)
    """The plan's paths by name, in the order they were tried."""
    costs: list[TryCost] = field(default_factory=list)
    """What each try cost (:mod:`.cost`), in every copy of the target."""
    jobs: list[Exploration] = field(default_factory=list)
    """The copies' own explorations, in order, where several explored side by side (``--jobs``)."""

    def run_of(self, result: PointResult) -> Exploration:
        """The exploration whose run made ``result``'s tries: its intents, verdicts and stories."""
        return result.explored_in or self

    @property
    def findings(self) -> list[PointResult]:
        return [p for p in self.points if p.finding is not None]

    @property
    def unavailable(self) -> list[PointResult]:
        """Points after whose kill the pod answered no call again: the exploration stopped there."""
        return [p for p in self.points if p.unavailable is not None]

    @property
    def states(self) -> int:
        """The clean call's distinct crash states: those tried and those not."""
        return sum(1 for p in self.points if len(p.path) == 1) + len(self.untried)

    @property
    def inconclusive(self) -> list[str]:
        """Why the exploration cannot certify the points it did not find anything at: one line each."""
        untried = Untried(self.untried, self.states, self.options.budget_s, self.ran_out)
        return not_proven(self.points, untried, self.bypassed, self.ended, self.not_passed)


@dataclass(frozen=True, slots=True)
class Untried:
    """The crash states an exploration did not try, and why."""

    names: Sequence[str]
    states: int
    """The call's distinct states, tried or not."""
    budget_s: float
    ran_out: bool
    """The budget was spent (else the run ended first, which says why of its own)."""

    def reason(self) -> str | None:
        if not self.names:
            return None
        shown = ", ".join(self.names[:UNTRIED_SHOWN]) + (", ..." if len(self.names) > UNTRIED_SHOWN else "")
        covered = self.states - len(self.names)
        why = (
            f"the budget of {self.budget_s:g} s ran out: {covered} of {self.states} crash states tried, "
            f"{covered / self.states:.0%}; raise --budget to try them all"
            if self.ran_out
            else f"{covered} of {self.states} crash states tried before the run ended"
        )
        states = "crash state" if len(self.names) == 1 else "crash states"
        return f"not tried: {len(self.names)} {states} ({shown}): {why}"


UNTRIED_SHOWN = 8
"""Untried states a reason names, the others counted."""


def not_proven(
    points: Sequence[PointResult],
    untried: Untried,
    bypassed: str | None,
    ended: str | None,
    not_passed: Sequence[str] = (),
) -> list[str]:
    """Why an exploration cannot certify what it found nothing at: the store changed behind it, it was
    cut short, points asked for were never passed, states not tried, points with too few proven tries."""
    reasons = []
    if not_passed:
        reasons.append(
            f"asked for with --only, never passed by the call: {', '.join(not_passed)} (the clean call "
            "passed the points in the table; name one of those)"
        )
    if bypassed is not None:
        reasons.append(bypassed)
    if ended is not None:
        reasons.append(f"the exploration ended early ({ended})")
    if (why := untried.reason()) is not None:
        reasons.append(why)
    return reasons + [r for p in points if (r := p.inconclusive) is not None]


@dataclass(frozen=True)
class Planned:
    """An exploration ready to run: the user's scenario, the one it runs, and its run directory."""

    scenario: Scenario
    exploring: Scenario
    run_dir: Path
    options: ExploreOptions

    @property
    def repeat(self) -> int:
        return self.options.repeat

    @property
    def only(self) -> tuple[str, ...] | None:
        return self.options.only


def prepare(
    scenario: Scenario, results_dir: Path, options: ExploreOptions, *, run_id: str | None = None
) -> Planned:
    """The exploring scenario and a new run directory for it under ``results_dir``."""
    exploring = exploring_scenario(scenario, options)
    run_dir = rundir.prepare_run_dir(results_dir, exploring, run_id)
    return Planned(scenario, exploring, run_dir, options)


async def explore(
    planned: Planned, *, out: TextIO = sys.stderr, progress_interval_s: float | None = 1.0
) -> Exploration:
    """Run the exploration, audit it with the auditor, and group its tries by point."""
    started = time.monotonic()
    await execute(planned.exploring, planned.run_dir, out=out, progress_interval_s=progress_interval_s)
    auditing = time.monotonic()
    audit = audit_and_report(planned.run_dir, html=False)
    found = read_exploration(planned, audit, started, audit_s=time.monotonic() - auditing)
    explored = {p.name for p in found.points}
    found.not_passed = [name for name in planned.only or () if name not in explored]
    return found


def read_exploration(
    planned: Planned, audit: AuditResult, started: float, *, audit_s: float = 0.0
) -> Exploration:
    """Group an audited exploration run's intents by the path they were held along, each try judged
    by the auditor and counted only where the history proves its crash (:mod:`.proof`); ``audit_s``,
    what the audit took, is shared among the tries' costs."""
    scenario, run_dir, repeat = planned.scenario, planned.run_dir, planned.repeat
    table = audit.intents
    judged = "verdict" in table.columns  # no intent started: the run ended before its first
    verdicts = dict(zip(table["intent"].tolist(), table["verdict"].tolist(), strict=True)) if judged else {}
    effects = dict(zip(table["intent"].tolist(), table["effects"].tolist(), strict=True)) if judged else {}
    events = list(read_history(run_dir / rundir.HISTORY))
    evidence = read_evidence(events)
    wiped_by, before_taken = _taken(table, evidence.tries, audit.checkpoints) if judged else ({}, {})
    answered = clean_call(evidence.windows)
    clean = clean_points(answered)
    details = {ev["point"]: {k: v for k, v in ev.items() if k in DETAILS} for ev in answered}
    clean_intent = evidence.clean_intent
    clean_verdict = before_taken.get(clean_intent, verdicts.get(clean_intent))
    if clean_verdict != Verdict.EXACTLY_ONCE.value:
        raise PreflightError(
            f"crashpoints: the clean call (intent {clean_intent}, nothing held) was "
            f"{clean_verdict or 'never made'}, with {effects.get(clean_intent, 0)} effects; it "
            "must succeed and be counted once before crashes can be judged "
            f"(see {run_dir / rundir.REPORT_MD})"
        )
    results: dict[str, PointResult] = {}
    plan = evidence.plan
    ran_out = plan is not None and plan.ran_out
    for name, labels, same in plan.planned if plan is not None else ():
        results[name] = PointResult(labelled(parse_path(name), labels), repeat, tuple(same), cut=ran_out)
    clean_calls: Counter[str] = Counter()
    for intent in sorted(verdicts):
        own = verdicts[intent]
        if intent in wiped_by:  # stored, then lost to a later try's crash: that point's damage
            crashed = evidence.tries[wiped_by[intent]]
            results.setdefault(crashed.path_name, PointResult(crashed.path, repeat)).wiped.setdefault(
                own, []
            ).append(intent)
        # Judged on what the store held before the later crash took it: twice is a duplicate still.
        own = before_taken.get(intent) or own
        one = evidence.tries.get(intent)
        if one is None:
            clean_calls[own] += 1
            continue
        result = results.setdefault(one.path_name, PointResult(one.path, repeat))
        result.held[intent] = one.held
        why = REFUSED if one.why is None and own == Verdict.REJECTED.value else one.why
        if why is None:
            result.proven.append(intent)
            result.verdicts[own] += 1
        else:
            result.unproven[intent] = why
            result.unproven_verdicts[own] += 1
    stuck = _unavailable_at(results, evidence.tries, audit)
    untried = [name for name, r in results.items() if not r.tries and not r.wiped and r.unavailable is None]
    for name in untried:
        del results[name]
    # A crash in a retry's recovery the budget left no time for: not a gap in the call's own states.
    later = [name for name in untried if len(parse_path(name)) > 1 and planned.only is None]
    return Exploration(
        scenario=scenario,
        run_dir=run_dir,
        repeat=repeat,
        clean=clean,
        details=details,
        points=list(results.values()),
        clean_calls=clean_calls,
        verdicts={**verdicts, **before_taken},
        effects=effects,
        audit=audit,
        seconds=time.monotonic() - started,
        untried=[name for name in untried if name not in later],
        deferred=later,
        bypassed=bypassed(clean, details, effects.get(clean_intent, 0), evidence.untraced),
        ended=None
        if evidence.status == RunStatus.COMPLETED.value or stuck
        else _ended(evidence.status, evidence.reason),
        options=planned.options,
        crash_points=plan.points if plan is not None else 0,
        ran_out=ran_out,
        clean_intent=clean_intent,
        planned=[name for name, _, _ in plan.planned] if plan is not None else [],
        costs=try_costs(events, [i for i, t in evidence.tries.items() if t.why is None], audit_s),
    )


_KILL = re.compile(r"^kill#([0-9]+) ")
REFUSED = "the server refused the retry after the crash, and nothing was stored: no retry was judged"
"""Why a try whose crash the history proves proves nothing: its intent ended ``rejected``. Safe for the
client (told, and nothing done), but what a retry after a crash there does was never seen; a server
that refuses every call after a restart would otherwise read as safe at every point."""


def _taken(
    table: Any, tries: dict[int, Try], checkpoints: Sequence[CheckpointRead]
) -> tuple[dict[int, int], dict[int, str]]:
    """Intents whose effects a later proven try's crash took: ``wiped``, those stored and then lost
    (with that try's intent), and each one's own verdict, judged on the most effects a reliable read
    of the store saw before (the exploration reads it before each call). An intent seen stored twice
    is a duplicate of its own point, whatever a later crash left of it; one no read saw stored (or saw
    no more of than is left) is neither: its loss may be its own call's (a key recorded before an
    effect that never came)."""
    if "vanished_after" not in table.columns or "cause" not in table.columns:
        return {}, {}
    owners = {number: t.intent for t in tries.values() if t.why is None for number in t.kills}
    reliable = [read for read in checkpoints if read.reliable]
    wiped: dict[int, int] = {}
    own: dict[int, str] = {}
    rows = zip(
        table["intent"].tolist(),
        table["verdict"].tolist(),
        table["cause"].tolist(),
        table["vanished_after"].tolist(),
        table["effects"].tolist(),
        table["client_status"].tolist(),
        strict=True,
    )
    for intent, verdict, cause, blamed, left, status in rows:
        match = _KILL.match(str(blamed or ""))
        owner = owners.get(int(match[1])) if match else None
        if owner is None or owner == intent:
            continue
        seen = max((read.count(int(intent)) for read in reliable), default=0)
        if seen <= left:
            continue
        judged = judge(ClientStatus[str(status).upper()], seen)
        if judged is not None:
            own[int(intent)] = judged.value
        if verdict == Verdict.LOST.value and cause == "vanished":
            wiped[int(intent)] = owner
    return wiped, own


def _unavailable_at(results: dict[str, PointResult], tries: dict[int, Try], audit: AuditResult) -> bool:
    """Mark the path of the try in flight when the pod was found unavailable (the run stopped on it:
    the last held try, which never ended); whether one was."""
    found = audit.summary.unavailable
    if not found or not tries:
        return False
    last = tries[max(tries)]
    results.setdefault(last.path_name, PointResult(last.path)).unavailable = "; ".join(
        row.sentence for row in found
    )
    return True


def _ended(status: str | None, reason: object) -> str:
    if status is None:
        return "the harness died before the run ended"
    return f"{status}: {reason}" if reason else status


def bypassed(
    clean: tuple[Point, ...], details: dict[str, dict[str, Any]], effects: int, untraced: str | None = None
) -> str | None:
    """Why the clean call's effect was made where the harness cannot hold it, or None: it left an effect
    in the store, and nothing of the call could have made it (no commit that wrote or may have, no
    downstream call)."""
    if effects == 0:
        return None
    for point in clean:
        if KINDS[point.kind].writes and details.get(point.name, {}).get("wrote") != "no":
            return None
    if untraced is not None:
        return (
            f"the store changed ({effects} effect of the clean call) while the harness saw no commit of the "
            f"call that wrote, and its file operations could not be traced: {untraced} (run as root, or "
            "give the harness CAP_SYS_PTRACE, or lower kernel.yama.ptrace_scope)"
        )
    return (
        f"the store changed ({effects} effect of the clean call) while the harness saw no commit of the "
        "call that wrote: the target does not write through {postgres_url} (or {sink_url}), nor in its "
        "data directory ({data_dir}), so its commits cannot be held; connect it to the store through the "
        "placeholder, or keep its files in {data_dir}"
    )
