"""What a contract run leaves: a terminal table, contract.md, contract.json, and JUnit XML for CI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.contract.checks import CheckResult, CheckVerdict
from harness.report.tables import markdown_table

CONTRACT_MD = "contract.md"
CONTRACT_JSON = "contract.json"
MARK = {CheckVerdict.PASS: "pass", CheckVerdict.FAIL: "FAIL", CheckVerdict.NOT_APPLICABLE: "n/a"}


def render_table(results: Sequence[CheckResult]) -> str:
    rows = [[r.id, MARK[r.verdict], r.why] for r in results]
    return markdown_table(["check", "verdict", "why"], rows, align="lll")


def summary_line(results: Sequence[CheckResult], seconds: float) -> str:
    counts = {v: sum(r.verdict is v for r in results) for v in CheckVerdict}
    return (
        f"contract: {counts[CheckVerdict.PASS]} passed, {counts[CheckVerdict.FAIL]} failed, "
        f"{counts[CheckVerdict.NOT_APPLICABLE]} not applicable, in {seconds:.1f}s"
    )


def as_json(results: Sequence[CheckResult], *, scenario: str, seconds: float) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "seconds": round(seconds, 3),
        "passed": all(r.verdict is not CheckVerdict.FAIL for r in results),
        "checks": [
            {"id": r.id, "title": r.title, "verdict": r.verdict.value, "why": r.why, "evidence": r.evidence}
            for r in results
        ],
    }


def render_markdown(results: Sequence[CheckResult], *, scenario: str, seconds: float) -> str:
    parts = [
        f"# Contract checks: {scenario}\n",
        f"**{summary_line(results, seconds)}**\n",
        render_table(results),
        "",
    ]
    for r in results:
        parts += [
            f"## {r.id}: {MARK[r.verdict]}\n",
            f"{r.title}. {r.why}.\n",
            "```json",
            json.dumps(r.evidence, indent=2, ensure_ascii=False, default=str),
            "```\n",
        ]
    return "\n".join(parts)


def junit(results: Sequence[CheckResult], *, scenario: str, seconds: float) -> str:
    """One test case per check; failures carry the why and the evidence, n/a is skipped."""
    suite = ET.Element(
        "testsuite",
        name=f"mcp-chaos contract {scenario}",
        tests=str(len(results)),
        failures=str(sum(r.verdict is CheckVerdict.FAIL for r in results)),
        skipped=str(sum(r.verdict is CheckVerdict.NOT_APPLICABLE for r in results)),
        errors="0",
        time=f"{seconds:.3f}",
    )
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"contract.{scenario}", name=r.id)
        if r.verdict is CheckVerdict.FAIL:
            failure = ET.SubElement(case, "failure", message=r.why, type="contract")
            failure.text = json.dumps(r.evidence, indent=2, ensure_ascii=False, default=str)
        elif r.verdict is CheckVerdict.NOT_APPLICABLE:
            ET.SubElement(case, "skipped", message=r.why)
    suites = ET.Element("testsuites")
    suites.append(suite)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_reports(
    run_dir: Path, results: Sequence[CheckResult], *, scenario: str, seconds: float
) -> list[Path]:
    md, js = run_dir / CONTRACT_MD, run_dir / CONTRACT_JSON
    md.write_text(render_markdown(results, scenario=scenario, seconds=seconds), encoding="utf-8")
    js.write_text(
        json.dumps(
            as_json(results, scenario=scenario, seconds=seconds), indent=2, ensure_ascii=False, default=str
        )
        + "\n",
        encoding="utf-8",
    )
    return [md, js]
