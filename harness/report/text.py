"""The human-readable summary of one audit, for the terminal and for report.md.

What a server said (error codes and messages, the answers quoted in a status or
an inconclusive reason) passes through a ``said`` function: :func:`plain` for
the terminal, :func:`in_markdown` for report.md and the CI step summary
(:mod:`harness.sanitize`).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.audit.summary import Summary
from harness.history import FINDINGS, FaultKind, Outcome, Verdict
from harness.report.tables import ci, markdown_table, pct
from harness.sanitize import bounded, cell, terminal

Said = Callable[[str], str]
"""How a renderer shows a server's text in its kind of output."""


def plain(text: str) -> str:
    """A server's text on a terminal: one line, no control characters, an excerpt."""
    return terminal(bounded(" ".join(text.split())))


def in_markdown(text: str) -> str:
    """A server's text in Markdown (a list item or a table cell): one line, no markup, an excerpt."""
    return cell(bounded(text))


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


def fault_table(summary: Summary) -> str:
    """Per fault: planned and injected, and verdicts among the intents it hit (where duplicates come from)."""
    rows = [
        [
            row.kind.value,
            row.planned
            if row.planned is not None
            else "—"
            if row.kind in (FaultKind.CRASH, FaultKind.BALANCER_RETRY)
            else "by rule",
            row.injected,
            row.intents_hit,
            row.duplicate.count,
            row.lost,
            pct(row.duplicate.value),
            ci(row.duplicate.ci95),
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
                row.duplicate.count,
                row.lost,
                pct(row.duplicate.value),
                ci(row.duplicate.ci95),
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


def _kills(summary: Summary) -> str:
    """``8 kills``; with rollouts also ``6 pods replaced by rollouts``."""
    row = summary.fault(FaultKind.KILL)
    if row is None:
        text = "0 kills"
    elif row.planned is not None and row.planned != row.injected:
        text = f"{row.injected} of {row.planned} planned kills"
    else:
        text = f"{row.injected} kills"
    rollout = summary.fault(FaultKind.ROLLOUT)
    if rollout is not None:
        of = f" of {rollout.planned} planned" if rollout.planned not in (None, rollout.injected) else ""
        text += f", {rollout.injected}{of} pods replaced by rollouts"
    return text


def headline(summary: Summary) -> str:
    d = summary.duplicates
    text = (
        f"duplicates: {d.count} of {d.n} intents = {pct(d.value)} "
        f"(95% CI {ci(d.ci95)}) with {_kills(summary)}, {summary.pods.exits} pod exits"
    )
    return text + (" (INCONCLUSIVE)" if not summary.conclusive else "")


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
    if summary.duplicate_causes:
        lines.append(
            "duplicate causes: " + ", ".join(f"{k} {v}" for k, v in summary.duplicate_causes.items())
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
    if summary.gate.violations:
        lines.append("gate: FAILED: " + "; ".join(summary.gate.violations))
    return lines


def render_text(summary: Summary) -> str:
    faults = fault_table(summary)
    replicas = replica_table(summary)
    return "\n".join(
        [
            *facts(summary),
            "",
            verdict_table(summary),
            *(["", faults] if faults else []),
            *(["", replicas] if replicas else []),
            "",
            headline(summary),
        ]
    )


def render_markdown(summary: Summary, scenario_yaml: str) -> str:
    gate = summary.gate
    gate_line = (
        "Gate: **failed**: " + "; ".join(gate.violations)
        if gate.violations
        else "Gate: passed (or none configured)."
    )
    errors = error_table(summary, in_markdown)
    return "\n".join(
        [
            f"# Retry-safety report: {summary.scenario} ({summary.run_id})",
            "",
            f"**{headline(summary)}**",
            "",
            *(f"- {line}" for line in facts(summary, in_markdown)),
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
            fault_table(summary) or "No fault was planned or hit an attempt.",
            "",
            "An intent counts under every fault that hit one of its attempts; a duplicate's cause in",
            "`intents.csv` is the first of " + ", ".join(k.value for k in FaultKind) + ".",
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
