"""JUnit XML, the format every CI shows as tests: one test case per thing a team gates on.

For a run: one case per finding the gate judges (lost, applied_despite_error,
duplicate, inconclusive: failed, passed, or skipped with the reason when the
gate does not list it) and one per fault row (failing when the intents it hit
show duplicates or lost effects, with the numbers). ``mcp-chaos contract`` writes one case per check
with the same builder.
Every text goes through :func:`harness.sanitize.xml`: a server's
text may hold characters XML cannot carry, and a JUnit file CI cannot parse shows nothing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from harness.audit.gate import FAILED, NOT_GATED
from harness.audit.summary import Summary
from harness.history import Verdict
from harness.sanitize import xml


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    failure: str | None = None
    """Why it failed (the message CI shows), or None."""
    details: str = ""
    skipped: str | None = None
    error: str | None = None
    """Why it could not be judged (a contract check that stopped), or None."""


def document(suite: str, classname: str, cases: Sequence[Case], seconds: float) -> str:
    """A ``<testsuites>`` document with one suite."""
    suite = xml(suite)
    node = ET.Element(
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(sum(c.failure is not None for c in cases)),
        errors=str(sum(c.error is not None for c in cases)),
        skipped=str(sum(c.skipped is not None for c in cases)),
        time=f"{seconds:.3f}",
    )
    for c in cases:
        case = ET.SubElement(node, "testcase", classname=xml(classname), name=xml(c.name), time="0")
        details = xml(c.details)
        if c.failure is not None:
            failure = ET.SubElement(case, "failure", message=xml(c.failure), type="finding")
            failure.text = details or xml(c.failure)
        elif c.error is not None:
            error = ET.SubElement(case, "error", message=xml(c.error), type="check")
            error.text = details or xml(c.error)
        elif c.skipped is not None:
            ET.SubElement(case, "skipped", message=xml(c.skipped))
        elif details:
            ET.SubElement(case, "system-out").text = details
    root = ET.Element(
        "testsuites", name=suite, tests=node.get("tests", "0"), failures=node.get("failures", "0")
    )
    root.append(node)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def run_cases(summary: Summary) -> list[Case]:
    cases = []
    for check in summary.gate.checks:
        name = f"gate.{check.name}"
        if check.status == FAILED:
            cases.append(Case(name, check.message))
        elif check.status == NOT_GATED:
            cases.append(Case(name, skipped=check.message))
        else:
            cases.append(Case(name, details=check.message))
    for row in summary.faults:
        planned = f"{row.injected} of {row.planned} planned" if row.planned is not None else f"{row.injected}"
        low, high = row.duplicate.ci95
        numbers = (
            f"{row.duplicate.count} duplicates, {row.lost} lost among {row.intents_hit} intents hit "
            f"({row.duplicate.value:.2%} duplicate, 95% CI {low:.2%}-{high:.2%}); {planned} injected"
        )
        bad = row.duplicate.count or row.lost or row.verdicts.get(Verdict.APPLIED_DESPITE_ERROR, 0)
        cases.append(Case(f"fault.{row.kind.value}", numbers if bad else None, details=numbers))
    return cases


def run_junit(summary: Summary, seconds: float, more: Sequence[Case] = ()) -> str:
    """The run's cases, and ``more`` beside them (the remembered findings replayed before it)."""
    cases = [*run_cases(summary), *more]
    return document(f"mcp-chaos run {summary.scenario}", f"mcp-chaos.{summary.scenario}", cases, seconds)
