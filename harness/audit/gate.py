"""The gate: which findings turn a run into a failing exit code, for CI.

A finding is data, not an error; the gate is where a team says which findings
fail their build. Pure: a function of the scenario's gate and the summary. Each
finding is judged on its own (a ``GateCheck``): failed, passed, expected (a
canary that showed), or not gated, and a finding that is not gated is said in
words, never passed over in silence.

Per verdict (duplicate, lost, applied_despite_error), the first that applies:
``expect`` (fails when absent), a threshold (``max_duplicates``,
``max_duplicate_rate``, ``max_lost``: fails above it), ``fail_on`` (fails on one
intent; unset: every finding), else not gated. An inconclusive run fails unless
``allow_inconclusive``; a pod that answered no call after a fault (unavailable), and a file
of the store that does not parse as its server reads it (store_unreadable), fail unless
``fail_on`` leaves them out.
"""

from __future__ import annotations

from harness.audit.findings import INCONCLUSIVE, SEVERITY, STORE_UNREADABLE, UNAVAILABLE
from harness.audit.summary import GateCheck, GateResult, Summary
from harness.history import Verdict
from harness.scenario import Gate

FAILED, PASSED, EXPECTED, NOT_GATED = "failed", "passed", "expected", "not_gated"


def _thresholds(gate: Gate, verdict: Verdict, count: int, started: int) -> list[str] | None:
    """The thresholds set for this verdict that it exceeds; None when none is set."""
    if verdict is Verdict.DUPLICATE:
        if gate.max_duplicates is None and gate.max_duplicate_rate is None:
            return None
        over = []
        if gate.max_duplicates is not None and count > gate.max_duplicates:
            over.append(f"{count} duplicates > max_duplicates {gate.max_duplicates}")
        rate = count / started if started else 0.0
        if gate.max_duplicate_rate is not None and rate > gate.max_duplicate_rate:
            over.append(f"duplicate rate {rate:.4%} > max_duplicate_rate {gate.max_duplicate_rate:.4%}")
        return over
    if verdict is Verdict.LOST and gate.max_lost is not None:
        return [f"{count} lost > max_lost {gate.max_lost}"] if count > gate.max_lost else []
    return None


def _check(gate: Gate, verdict: Verdict, count: int, started: int) -> GateCheck:
    name = verdict.value
    if name in gate.expect:
        if not count:
            return GateCheck(
                name,
                FAILED,
                f"expected {name} (a canary) and saw none: against a target known to be broken, "
                "that means the harness, not the target, is what broke",
            )
        return GateCheck(name, EXPECTED, f"{count} {name}, expected by gate.expect")
    over = _thresholds(gate, verdict, count, started)
    if over is not None:
        if over:
            return GateCheck(name, FAILED, "; ".join(over))
        return GateCheck(name, PASSED, f"{count} {name}, within the gate's threshold")
    if name in gate.failing:
        if count:
            why = f"fail_on {name}" if gate.fail_on is not None else f"the default gate fails on any {name}"
            return GateCheck(name, FAILED, f"{count} {name} ({why})")
        return GateCheck(name, PASSED, f"no {name}")
    if count:
        noun = "intent" if count == 1 else "intents"
        return GateCheck(name, NOT_GATED, f"{count} {name} {noun} not gated: fail_on does not list {name}")
    return GateCheck(name, PASSED, f"no {name} (not gated: fail_on does not list it)")


def _unavailable(gate: Gate, summary: Summary) -> GateCheck:
    found = len(summary.unavailable)
    if not found:
        return GateCheck(UNAVAILABLE, PASSED, "every pod answered calls again after its restarts")
    what = "; ".join(u.sentence for u in summary.unavailable)
    if UNAVAILABLE in gate.failing:
        return GateCheck(UNAVAILABLE, FAILED, f"unavailable: {what}")
    return GateCheck(UNAVAILABLE, NOT_GATED, f"unavailable, not gated (fail_on does not list it): {what}")


def _unreadable(gate: Gate, summary: Summary) -> GateCheck:
    found = summary.unreadable
    if not found:
        return GateCheck(STORE_UNREADABLE, PASSED, "every file of the store parses as its server reads it")
    what = "; ".join(u.sentence for u in found)
    if STORE_UNREADABLE in gate.failing:
        return GateCheck(STORE_UNREADABLE, FAILED, f"store unreadable: {what}")
    return GateCheck(
        STORE_UNREADABLE, NOT_GATED, f"store unreadable, not gated (fail_on does not list it): {what}"
    )


def evaluate_gate(gate: Gate, summary: Summary) -> GateResult:
    """Every finding judged by the gate, worst first; passed when none failed."""
    started = summary.intents.started
    checks = [_unavailable(gate, summary), _unreadable(gate, summary)]
    checks += [_check(gate, v, summary.verdicts[v], started) for v in SEVERITY]
    if not summary.inconclusive:
        checks.append(GateCheck(INCONCLUSIVE, PASSED, "the run tested what it planned"))
    elif gate.allow_inconclusive:
        reasons = "; ".join(summary.inconclusive)
        checks.append(
            GateCheck(INCONCLUSIVE, NOT_GATED, f"inconclusive run not gated (allow_inconclusive): {reasons}")
        )
    else:
        checks.append(GateCheck(INCONCLUSIVE, FAILED, "inconclusive: " + "; ".join(summary.inconclusive)))
    return GateResult(
        passed=all(c.status != FAILED for c in checks),
        violations=[c.message for c in checks if c.status == FAILED],
        not_gated=[c.message for c in checks if c.status == NOT_GATED],
        checks=checks,
    )
