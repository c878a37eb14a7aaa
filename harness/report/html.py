"""``report.html``: one self-contained page per run, plots embedded, readable without a network.

Jepsen's rate and latency plots are the model: a timeline of completed intents
per second with every pod fault marked, the pod's down-time shaded and each
duplicate or lost intent as a point where it began, so a person sees at a glance
whether the anomalies sit right after the kills. Then the verdict rates with
their intervals, anomalies by fault kind, intent latency per client outcome,
attempts per intent, and the recovery after each kill.

The plots are drawn with matplotlib (Agg, no display) from the audit's per-intent
table and the pod events the audit's fold collected on its one pass (faults,
pod exits and readiness), so a run of a million intents is read only once. The page is a Jinja2 template.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.audit.auditor import PLOTTED, AuditResult
from harness.faultkinds.registry import COLOURS
from harness.history import FINDINGS, Verdict
from harness.report import pages
from harness.report.sequence import sequence_svg
from harness.report.stories import class_title, story_lines
from harness.report.text import facts, gate_line, headline_lines

REPORT_HTML = "report.html"


@dataclass(slots=True)
class Timeline:
    """Pod faults and readiness from the history, in seconds since the run started."""

    faults: list[tuple[float, str]] = field(default_factory=list)
    down: list[tuple[float, float]] = field(default_factory=list)


def timeline_of(pod_events: Sequence[tuple[float, str]]) -> Timeline:
    """Pod faults, and the spans the pod was down (from a kill, pause or exit until ready again)."""
    timeline = Timeline()
    down_since: float | None = None
    for t, what in pod_events:
        if what == "pod_exited" or what in COLOURS:  # a pod fault drawn on the timeline takes it down
            down_since = t if down_since is None else down_since
        elif what == "pod_ready" and down_since is not None:
            timeline.down.append((down_since, t))
            down_since = None
        if what not in ("pod_exited", "pod_ready"):
            timeline.faults.append((t, what))
    return timeline


def plot_timeline(intents: pd.DataFrame, timeline: Timeline) -> str:
    fig, ax = pages.figure()
    ended = intents["last_end_ms"].dropna().to_numpy() / 1000.0
    if len(ended):
        seconds = np.arange(0, max(1.0, float(ended.max())) + 1.0)
        counts, edges = np.histogram(ended, bins=seconds)
        ax.step(edges[:-1], counts, where="post", color="#2c3e50", linewidth=1, label="intents completed / s")
    for start, end in timeline.down:
        ax.axvspan(start, end, color="#bdc3c7", alpha=0.6, linewidth=0)
    for t, kind in timeline.faults:
        if kind in COLOURS:
            ax.axvline(t, color=COLOURS[kind], linewidth=1, alpha=0.8)
    top = ax.get_ylim()[1] or 1.0
    for verdict, marker, color in ((Verdict.DUPLICATE, "v", "#c0392b"), (Verdict.LOST, "x", "#2980b9")):
        rows = intents[intents["verdict"] == verdict.value]
        if len(rows):
            xs = rows["first_attempt_ms"].fillna(0).to_numpy() / 1000.0
            ax.scatter(
                xs,
                np.full(len(xs), top * 0.97),
                marker=marker,
                color=color,
                s=18,
                label=verdict.value,
                zorder=3,
            )
    from matplotlib.lines import Line2D

    handles = [
        *ax.get_legend_handles_labels()[0],
        *[Line2D([], [], color=c, label=k) for k, c in COLOURS.items()],
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_xlabel("seconds since the run started (grey: pod down)")
    ax.set_ylabel("intents completed / s")
    return pages.png(fig)


def plot_rates(result: AuditResult) -> str:
    fig, ax = pages.figure(6, 2.8)
    names = [v.value for v in FINDINGS]
    rates = [result.summary.rates[v] for v in FINDINGS]
    values = np.array([r.value for r in rates]) * 100
    lows = values - np.array([r.ci95[0] for r in rates]) * 100
    highs = np.array([r.ci95[1] for r in rates]) * 100 - values
    ax.bar(names, values, color=["#c0392b", "#2980b9", "#e67e22"])
    ax.errorbar(names, values, yerr=[lows, highs], fmt="none", ecolor="black", capsize=6)
    ax.set_ylabel("% of intents (95% CI, Wilson)")
    return pages.png(fig)


def plot_faults(result: AuditResult) -> str | None:
    rows = result.summary.faults
    if not rows:
        return None
    fig, ax = pages.figure(6, 2.8)
    kinds = [r.kind.value for r in rows]
    x = np.arange(len(kinds))
    ax.bar(x - 0.2, [r.duplicate.count for r in rows], width=0.4, color="#c0392b", label="duplicates")
    ax.bar(x + 0.2, [r.lost for r in rows], width=0.4, color="#2980b9", label="lost")
    ax.set_xticks(x, kinds)
    ax.set_ylabel("intents hit")
    ax.legend(fontsize=8)
    return pages.png(fig)


def latency_table(intents: pd.DataFrame) -> list[dict[str, Any]]:
    """Intent latency (first attempt to last end) per client outcome: p50, p90, p99, max."""
    span = (intents["last_end_ms"] - intents["first_attempt_ms"]).rename("ms")
    rows = []
    for status, group in span.groupby(intents["client_status"]):
        values = group.dropna()
        if len(values):
            q = values.quantile([0.5, 0.9, 0.99])
            rows.append(
                {
                    "status": status,
                    "n": len(values),
                    "p50": q[0.5],
                    "p90": q[0.9],
                    "p99": q[0.99],
                    "max": values.max(),
                }
            )
    return rows


def plot_attempts(intents: pd.DataFrame) -> str:
    fig, ax = pages.figure(6, 2.8)
    counts = intents["attempts"].value_counts().sort_index()
    ax.bar(counts.index.astype(str), counts.to_numpy(), color="#16a085")
    ax.set_yscale("log")
    # Counts as plain numbers: the log scale's own labels (10^k) are TeX, and drawing them builds
    # matplotlib's mathtext parser, a tenth of a second of one core after the audit.
    ax.yaxis.set_major_formatter(pages.counts_format())
    ax.yaxis.set_minor_formatter(pages.no_labels())
    ax.set_xlabel("attempts per intent")
    ax.set_ylabel("intents (log)")
    return pages.png(fig)


def recovery(intents: pd.DataFrame, timeline: Timeline) -> list[dict[str, Any]]:
    """After each kill: seconds until the pod was ready again, and until the first intent that
    completed after that (answers already on their way when the pod died do not count)."""
    ok = intents.loc[intents["client_status"] == "ok", "last_end_ms"].dropna().to_numpy() / 1000.0
    ok_ends = np.sort(ok)
    rows = []
    for t, kind in timeline.faults:
        if kind != "kill":
            continue
        ready = next((end for start, end in timeline.down if start <= t + 0.001 and end >= t), t)
        after = ok_ends[np.searchsorted(ok_ends, ready, side="right") :]
        first_ok = None if not len(after) else float(after[0] - t)
        rows.append({"at": t, "ready_after": ready - t, "recovered_after": first_ok})
    return rows


def findings(result: AuditResult) -> list[dict[str, Any]]:
    """Each finding class with its stories: the lines of each, and its picture (escaped SVG)."""
    return [
        {
            "title": class_title(found),
            "fix": found.fix,
            "stories": [
                {"lines": story_lines(story, fix=False), "svg": sequence_svg(story)}
                for story in found.stories
            ],
        }
        for found in result.summary.classes
    ]


def render_html(result: AuditResult) -> str:
    timeline = timeline_of(result.pod_events)
    # The columns the plots read, not the whole table (a long run's would not fit).
    intents = result.judged.frame(PLOTTED)
    summary = result.summary
    first, *others = headline_lines(summary)
    return pages.render(
        "report.html.j2",
        summary=summary,
        headline=first,
        under_headline=others,
        gate=gate_line(summary),
        findings=findings(result),
        facts=facts(summary),
        timeline=plot_timeline(intents, timeline),
        rates=plot_rates(result),
        faults=plot_faults(result),
        attempts=plot_attempts(intents),
        latency=latency_table(intents),
        recovery=recovery(intents, timeline),
        verdicts=[(v.value, summary.verdicts[v], summary.rates[v]) for v in Verdict if summary.verdicts[v]],
        scenario_yaml=result.scenario.dump_yaml(),
    )
