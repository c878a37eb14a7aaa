"""The human-readable summary of one audit, for the terminal and for report.md.

Both open with the headline (the worst finding, ``Summary.headline``), the other
findings, what the gate let through and the gate's result, before any table.

What a server said (error codes and messages, the answers quoted in a status or
an inconclusive reason) passes through a ``said`` function: :func:`harness.sanitize.plain` for
the terminal, :func:`~harness.sanitize.in_markdown` for report.md and the CI step summary
(:mod:`harness.sanitize`).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.audit.findings import SEVERITY, also
from harness.audit.stats import Rate
from harness.audit.summary import Summary
from harness.faultkinds.base import Source
from harness.faultkinds.registry import BLAME, kind_of
from harness.history import FINDINGS, Outcome, Verdict
from harness.report.stories import (
    control_lines,
    evidence_markdown,
    findings_markdown,
    replies_markdown,
)
from harness.report.tables import ci, markdown_table, pct
from harness.sanitize import cell, in_markdown, plain, terminal_line

Said = Callable[[str], str]
"""How a renderer shows a server's text in its kind of output."""


ALWAYS_SHOWN = (Verdict.EXACTLY_ONCE, Verdict.DUPLICATE, Verdict.LOST)


def verdict_table(summary: Summary) -> str:
    rows = []
    for v in Verdict:
        count = summary.verdicts[v]
        if count == 0 and v not in ALWAYS_SHOWN:
            continue
        rate = summary.rates[v]
        rows.append(
            [v.value + (" !" if v in FINDINGS and count else ""), count, pct(rate.value), ci(rate.ci95)]
        )
    return markdown_table(["verdict", "intents", "rate", "95% CI (Wilson)"], rows)


def _harm(duplicate: Rate, lost: int) -> list[object]:
    """The cells a fault's row and a replica's share: duplicates, lost, the duplicate rate, its interval."""
    return [duplicate.count, lost, pct(duplicate.value), ci(duplicate.ci95)]


def fault_table(summary: Summary) -> str:
    """Per fault: planned and injected, and verdicts among the intents it hit (where duplicates come from)."""
    rows = [
        [
            row.kind.value,
            row.planned
            if row.planned is not None
            else "—"
            if kind_of(row.kind).source is not Source.STREAM
            else "by rule",
            row.injected,
            row.intents_hit,
            *_harm(row.duplicate, row.lost),
        ]
        for row in summary.faults
    ]
    if not rows:
        return ""
    return markdown_table(
        [
            "fault",
            "planned",
            "injected",
            "intents hit",
            "duplicates",
            "lost",
            "duplicate rate among hit",
            "95% CI",
        ],
        rows,
    )


def replica_table(summary: Summary) -> str:
    """With several replicas: per replica, the intents first sent there and whether retries moved."""
    if not summary.replicas:
        return ""
    return markdown_table(
        [
            "replica",
            "intents first sent there",
            "duplicates",
            "lost",
            "duplicate rate",
            "95% CI",
            "retried on another replica",
            "duplicates among those",
        ],
        [
            [
                row.pod,
                row.intents,
                *_harm(row.duplicate, row.lost),
                row.moved,
                row.moved_duplicates,
            ]
            for row in summary.replicas
        ],
    )


def error_table(summary: Summary, said: Said = plain) -> str:
    """The most common error messages: why intents were rejected or retried."""
    if not summary.errors:
        return ""
    rows = [[e.outcome.value, said(e.code or ""), e.count, said(e.message)] for e in summary.errors]
    return markdown_table(["outcome", "code", "attempts", "message (first of its kind)"], rows, align="llrl")


def headline(summary: Summary) -> str:
    """The worst finding in one sentence (or the all-clear)."""
    return summary.headline.sentence


def gate_line(summary: Summary) -> str:
    gate = summary.gate
    if gate.violations:
        return "gate: FAILED: " + "; ".join(gate.violations)
    expected = [c.message for c in gate.checks if c.status == "expected"]
    return "gate: passed" + (f" ({'; '.join(expected)})" if expected else "")


def _markdown_gate(summary: Summary) -> str:
    if summary.gate.violations:
        return "Gate: **failed**: " + "; ".join(summary.gate.violations)
    return "Gate: " + gate_line(summary).removeprefix("gate: ")


def headline_lines(summary: Summary, line: Said = terminal_line) -> list[str]:
    """The headline, the other findings (``also: ...``) and what the gate did not gate; ``line``
    shows each in its kind of output (an inconclusive run's reason may quote the server)."""
    return [
        line(text)
        for text in (headline(summary), *(also(f) for f in summary.findings[1:]), *summary.gate.not_gated)
    ]


def cause_line(summary: Summary) -> list[str]:
    """``causes: lost: no_fault 152, kill 6; duplicate: kill 1`` (worst verdict first)."""
    order: list[Verdict] = [v for v in SEVERITY if v in summary.causes]
    order += [v for v in summary.causes if v not in order]
    parts = [
        f"{v.value}: "
        + ", ".join(f"{c} {n}" for c, n in sorted(summary.causes[v].items(), key=lambda kv: -kv[1]))
        for v in order
    ]
    return ["causes: " + "; ".join(parts)] if parts else []


def _protocol_line(summary: Summary) -> list[str]:
    """What the target spoke, and for 2025 sessions what became of them."""
    if summary.protocol is None:
        return []
    line = f"protocol: {summary.protocol}"
    sessions = summary.sessions
    if sessions.opened:
        after = ", ".join(
            f"{n} after a {k}" if k != "none" else f"{n} before any pod fault"
            for k, n in sessions.lost_after.items()
        )
        line += f"; sessions: {sessions.opened} opened, {sessions.lost} lost" + (
            f" ({after})" if after else ""
        )
        if summary.attempts.by_outcome[Outcome.SESSION_LOST]:
            line += (
                f"; {summary.attempts.by_outcome[Outcome.SESSION_LOST]} attempts answered 'session not found'"
            )
    if sessions.resumed or sessions.resume_failed:
        line += (
            f"; broken streams: {sessions.resumed} resumed, {sessions.resume_failed} could not be "
            "resumed and were re-issued"
        )
    return [line]


def _pacing_line(summary: Summary) -> list[str]:
    """How the pod faults were paced against the workload (see harness/faults/pacing.py)."""
    pacing = summary.pacing
    if pacing is None:
        return []
    held = (
        f"{pacing.held} of {pacing.faults} held dispatch, {pacing.held_s:.1f}s in all"
        if pacing.held
        else f"none of {pacing.faults} held dispatch"
    )
    return [f"pod faults paced: {held}; in flight at each: {pacing.least_in_flight} or more"]


def facts(summary: Summary, said: Said = plain) -> list[str]:
    a, i, p, e = summary.attempts, summary.intents, summary.pods, summary.effects
    by = a.by_outcome
    lines = [
        f"run {summary.run_id} ({summary.scenario}, seed {summary.seed}): {summary.status.value}"
        + (f" ({said(summary.status_reason)})" if summary.status_reason else "")
        + f" in {summary.duration_s:.1f}s",
        f"intents: {i.started} started of {i.planned} planned, {i.ended} ended",
        f"attempts: {a.total} ({a.retries} retries): ok {by[Outcome.OK]}, "
        f"transport errors {by[Outcome.TRANSPORT_ERROR]}, timeouts {by[Outcome.TIMEOUT]}, "
        f"tool errors {by[Outcome.TOOL_ERROR]}, protocol errors {by[Outcome.PROTOCOL_ERROR]}"
        + "".join(
            f", {o.value.replace('_', ' ')} {by[o]}"
            for o in (Outcome.SESSION_LOST, Outcome.AUTH_ERROR, Outcome.INPUT_REQUIRED)
            if by[o]
        ),
        f"pods: {p.exits} exits, {p.crashes} crashes, {p.attempts_hit} attempts in flight at a pod fault",
        *_pacing_line(summary),
        *_protocol_line(summary),
        f"effects: {e.total} found" + (f", {e.foreign} not from this run's intents" if e.foreign else ""),
    ]
    lines += cause_line(summary)
    c = summary.checkpoints
    if c.reads:
        lines.append(
            f"checkpoint reads of the effects: {c.reads} ({c.failed} failed, {c.took_s:.1f}s in all); "
            f"{c.vanished} intents seen and later gone"
        )
    for reason in summary.inconclusive:
        lines.append(f"INCONCLUSIVE: {said(reason)}")
    if summary.errors:
        top = summary.errors[0]
        lines.append(
            f"most common error: {top.count}× {top.outcome.value}"
            + (f" {said(top.code)}" if top.code else "")
            + f": {said(top.message)}"
        )
    if summary.replies_as_failure:
        top = summary.failure_replies[0]
        lines.append(
            f"ok replies that read as failures: {summary.replies_as_failure} (most common: {top.count}× "
            f"{said(top.message)})"
        )
    lines += control_lines(summary)
    return lines


def render_text(summary: Summary) -> str:
    """The terminal's report: the headline first, the gate's result last (what the exit code says)."""
    faults = fault_table(summary)
    replicas = replica_table(summary)
    return "\n".join(
        [
            *headline_lines(summary),
            "",
            *facts(summary),
            "",
            verdict_table(summary),
            *(["", faults] if faults else []),
            *(["", replicas] if replicas else []),
            "",
            gate_line(summary),
        ]
    )


def render_markdown(summary: Summary, scenario_yaml: str) -> str:
    errors = error_table(summary, in_markdown)
    first, *others = headline_lines(summary, cell)
    return "\n".join(
        [
            f"# Retry-safety report: {summary.scenario} ({summary.run_id})",
            "",
            f"**{first}**",
            "",
            *(f"- {line}" for line in others),
            *([""] if others else []),
            _markdown_gate(summary),
            "",
            *(f"- {line}" for line in facts(summary, in_markdown)),
            "",
            *(line for part in (findings_markdown(summary),) if part for line in (*part, "")),
            "## Verdicts",
            "",
            verdict_table(summary),
            "",
            "Rates are intents with the verdict over intents started; "
            "intervals are 95% Wilson score intervals.",
            "`!` marks retry-safety violations. "
            "Per-intent rows: `intents.csv`; machine-readable: `summary.json`.",
            "",
            "## By fault",
            "",
            fault_table(summary) or "No fault was planned or hit an attempt.",
            "",
            "An intent counts under every fault that hit one of its attempts; a finding's cause in",
            "`intents.csv` is the first of " + ", ".join(k.value for k in BLAME) + " that hit it",
            "(see Findings for the causes that are not faults).",
            *(
                [
                    "",
                    "Faults that did not happen:",
                    "",
                    *(f"- {m.kind} {m.trigger}: {m.reason}" for m in summary.missed_faults),
                ]
                if summary.missed_faults
                else []
            ),
            *(
                [
                    "",
                    "## By replica",
                    "",
                    replica_table(summary),
                    "",
                    "Each intent counts under the replica its first attempt went to; a retry that a "
                    "balancer sent to another replica is a test of whatever state the replicas do not share.",
                ]
                if summary.replicas
                else []
            ),
            "",
            "## Errors",
            "",
            errors or "No attempt ended with an error message.",
            "",
            *(
                line
                for part in (replies_markdown(summary), evidence_markdown(summary))
                if part
                for line in (*part, "")
            ),
            "## Scenario as run",
            "",
            "```yaml",
            scenario_yaml.rstrip(),
            "```",
            "",
        ]
    )


def render_step_summary(summary: Summary) -> str:
    """What a CI job page shows (``$GITHUB_STEP_SUMMARY`` on GitHub): the report without its scenario."""
    return render_markdown(summary, "").split("## Scenario as run", 1)[0].rstrip() + "\n\n"
