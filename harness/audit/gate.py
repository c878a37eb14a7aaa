"""The gate: thresholds that turn findings into a failing exit code, for CI.

A finding is data, not an error; the gate is where a team says which findings
fail their build. Pure: a function of the scenario's gate and the summary.
"""

from __future__ import annotations

from harness.audit.summary import GateResult, Summary
from harness.history import Verdict
from harness.scenario import Gate


def evaluate_gate(gate: Gate, summary: Summary) -> GateResult:
    """The gate's violations, each a sentence; passed when there are none (or no gate is set)."""
    violations = []
    dups = summary.verdicts[Verdict.DUPLICATE]
    lost = summary.verdicts[Verdict.LOST]
    started = summary.intents.started
    if gate.max_duplicates is not None and dups > gate.max_duplicates:
        violations.append(f"{dups} duplicates > max_duplicates {gate.max_duplicates}")
    if gate.max_duplicate_rate is not None and started and dups / started > gate.max_duplicate_rate:
        violations.append(
            f"duplicate rate {dups / started:.4%} > max_duplicate_rate {gate.max_duplicate_rate:.4%}"
        )
    if gate.max_lost is not None and lost > gate.max_lost:
        violations.append(f"{lost} lost > max_lost {gate.max_lost}")
    if (gate.fail_inconclusive or "inconclusive" in gate.fail_on) and summary.inconclusive:
        violations.append("inconclusive: " + "; ".join(summary.inconclusive))
    for name in gate.fail_on:
        if name != "inconclusive" and (count := summary.verdicts[Verdict(name)]):
            violations.append(f"{count} {name} (fail_on {name})")
    for name in gate.expect:
        if not summary.verdicts[Verdict(name)]:
            violations.append(
                f"expected {name} (a canary) and saw none: against a target known to be broken, "
                "that means the harness, not the target, is what broke"
            )
    return GateResult(passed=not violations, violations=violations)
