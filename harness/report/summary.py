"""The human-readable summary of one audit, for the terminal and for report.md."""

from __future__ import annotations

from typing import Any

from harness.audit.verdicts import FINDINGS, Verdict
from harness.report.tables import ci, markdown_table, pct


def verdict_table(summary: dict[str, Any]) -> str:
    rows = []
    for v in Verdict:
        count = summary["verdicts"][v.value]
        if count == 0 and v not in (Verdict.EXACTLY_ONCE, Verdict.DUPLICATE, Verdict.LOST):
            continue
        rate = summary["rates"][v.value]
        rows.append(
            [v.value + (" !" if v in FINDINGS and count else ""), count, pct(rate["rate"]), ci(rate["ci95"])]
        )
    return markdown_table(["verdict", "intents", "rate", "95% CI (Wilson)"], rows)


def fault_table(summary: dict[str, Any]) -> str:
    """Verdicts among the intents each kind of fault hit: which fault the duplicates come from."""
    rows = []
    for kind, f in summary.get("by_fault", {}).items():
        d = f["duplicate"]
        rows.append(
            [
                kind,
                f["events"],
                f["intents_hit"],
                d["count"],
                f["verdicts"].get("lost", 0),
                pct(d["rate"]),
                ci(d["ci95"]),
            ]
        )
    if not rows:
        return ""
    return markdown_table(
        ["fault", "events", "intents hit", "duplicates", "lost", "duplicate rate among hit", "95% CI"], rows
    )


def headline(summary: dict[str, Any]) -> str:
    d = summary["rates"][Verdict.DUPLICATE.value]
    return (
        f"duplicates: {d['count']} of {d['n']} intents = {pct(d['rate'])} "
        f"(95% CI {ci(d['ci95'])}) with {summary['faults'].get('kill', 0)} kills, "
        f"{summary['faults']['pod_exits']} pod exits"
    )


def facts(summary: dict[str, Any]) -> list[str]:
    a, i, f, e = summary["attempts"], summary["intents"], summary["faults"], summary["effects"]
    lines = [
        f"run {summary['run_id']} ({summary['scenario']}, seed {summary['seed']}): {summary['status']}"
        + (f" ({summary['status_reason']})" if summary.get("status_reason") else "")
        + f" in {summary['duration_s']:.1f}s",
        f"intents: {i['started']} started of {i['planned']} planned, {i['ended']} ended",
        f"attempts: {a['total']} ({a['retries']} retries): ok {a['ok']}, "
        f"transport errors {a['transport_error']}, "
        f"timeouts {a['timeout']}, tool errors {a['tool_error']}, protocol errors {a['protocol_error']}",
        f"faults: {f.get('kill', 0)} kills, {f['pod_exits']} pod exits, "
        f"{f['crashes']} crashes, {f['attempts_hit_by_pod_fault']} attempts in flight at a pod fault",
        f"effects: {e['total']} found"
        + (f", {e['foreign']} not from this run's intents" if e["foreign"] else ""),
    ]
    causes = summary["causes"]["duplicate"]
    if causes:
        lines.append("duplicate causes: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
    gate = summary["gate"]
    if gate["violations"]:
        lines.append("gate: FAILED: " + "; ".join(gate["violations"]))
    return lines


def render_text(summary: dict[str, Any]) -> str:
    faults = fault_table(summary)
    return "\n".join(
        [
            *facts(summary),
            "",
            verdict_table(summary),
            *(["", faults] if faults else []),
            "",
            headline(summary),
        ]
    )


def render_markdown(summary: dict[str, Any], scenario_yaml: str) -> str:
    gate = summary["gate"]
    gate_line = (
        "Gate: **failed**: " + "; ".join(gate["violations"])
        if gate["violations"]
        else "Gate: passed (or none configured)."
    )
    return "\n".join(
        [
            f"# Retry-safety report: {summary['scenario']} ({summary['run_id']})",
            "",
            f"**{headline(summary)}**",
            "",
            *(f"- {line}" for line in facts(summary)),
            "",
            "## Verdicts",
            "",
            verdict_table(summary),
            "",
            "Rates are intents with the verdict over intents started; "
            "intervals are 95% Wilson score intervals.",
            "`!` marks retry-safety violations. "
            "Per-intent rows: `intents.csv`; machine-readable: `summary.json`.",
            "",
            gate_line,
            "",
            "## By fault",
            "",
            fault_table(summary) or "No fault hit an attempt.",
            "",
            "An intent counts under every fault that hit one of its attempts; a duplicate's cause in",
            "`intents.csv` is the first of kill, crash, sever_response, stall, sever_request, delay.",
            "",
            "## Scenario as run",
            "",
            "```yaml",
            scenario_yaml.rstrip(),
            "```",
            "",
        ]
    )
