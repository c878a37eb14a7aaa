"""What a contract run leaves: a terminal table, contract.md, contract.json, and JUnit XML for CI.

Results arrive redacted and cut (:func:`harness.contract.told`); each writer
escapes them for its kind of output (:mod:`harness.sanitize`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.contract.framework import CheckResult, CheckVerdict
from harness.report.junit import Case, document
from harness.report.tables import markdown_table
from harness.sanitize import cell, json_safe, markdown, terminal

CONTRACT_MD = "contract.md"
CONTRACT_JSON = "contract.json"
MARK = {
    CheckVerdict.PASS: "pass",
    CheckVerdict.FAIL: "FAIL",
    CheckVerdict.NOT_APPLICABLE: "n/a",
    CheckVerdict.ERROR: "ERROR",
}


def render_table(results: Sequence[CheckResult]) -> str:
    """The table a terminal shows (and contract.md starts with): a why on one line, without markup."""
    rows = [[r.id, MARK[r.verdict], cell(r.why)] for r in results]
    return markdown_table(["check", "verdict", "why"], rows, align="lll")


def terminal_table(results: Sequence[CheckResult]) -> str:
    """:func:`render_table` for a terminal: no control character reaches it."""
    rows = [[r.id, MARK[r.verdict], terminal(" ".join(r.why.split())).replace("|", "\\|")] for r in results]
    return markdown_table(["check", "verdict", "why"], rows, align="lll")


def summary_line(results: Sequence[CheckResult], seconds: float) -> str:
    counts = {v: sum(r.verdict is v for r in results) for v in CheckVerdict}
    errors = f", {counts[CheckVerdict.ERROR]} could not finish" if counts[CheckVerdict.ERROR] else ""
    return (
        f"contract: {counts[CheckVerdict.PASS]} passed, {counts[CheckVerdict.FAIL]} failed, "
        f"{counts[CheckVerdict.NOT_APPLICABLE]} not applicable{errors}, in {seconds:.1f}s"
    )


def all_kept(results: Sequence[CheckResult]) -> bool:
    """No check failed and every check finished: what CI gates on."""
    return all(r.verdict in (CheckVerdict.PASS, CheckVerdict.NOT_APPLICABLE) for r in results)


def as_json(results: Sequence[CheckResult], *, scenario: str, seconds: float) -> dict[str, Any]:
    document: dict[str, Any] = json_safe(
        {
            "scenario": scenario,
            "seconds": round(seconds, 3),
            "passed": all_kept(results),
            "checks": [
                {
                    "id": r.id,
                    "title": r.title,
                    "verdict": r.verdict.value,
                    "why": r.why,
                    "evidence": r.evidence,
                }
                for r in results
            ],
        }
    )
    return document


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
            f"{r.title}. {markdown(r.why)}.\n",
            "```json",
            _fenced(json.dumps(json_safe(r.evidence), indent=2, ensure_ascii=False, default=str)),
            "```\n",
        ]
    return "\n".join(parts)


def _fenced(text: str) -> str:
    """Text inside a code fence that cannot close it (JSON puts no string at a line's start, but a
    backtick run is escaped anyway) nor carry control characters."""
    return terminal(text).replace("```", "`\u200b``")


def junit(results: Sequence[CheckResult], *, scenario: str, seconds: float) -> str:
    """One test case per check; failures carry the why and the evidence, a check that could not finish
    is an error, n/a is skipped."""
    cases = [
        Case(
            r.id,
            failure=r.why if r.verdict is CheckVerdict.FAIL else None,
            details=json.dumps(json_safe(r.evidence), indent=2, ensure_ascii=False, default=str),
            skipped=r.why if r.verdict is CheckVerdict.NOT_APPLICABLE else None,
            error=r.why if r.verdict is CheckVerdict.ERROR else None,
        )
        for r in results
    ]
    return document(f"mcp-chaos contract {scenario}", f"contract.{scenario}", cases, seconds)


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
