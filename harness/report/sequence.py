"""A story as a small picture: an intent's attempts on a time axis, the faults and the checkpoint reads.

Inline SVG in report.html (no script, no network): one row per attempt, a bar
from its start to its end coloured by outcome, a red line at each pod fault of
the story, and a diamond per checkpoint read with the effects it saw. Built as
text; every piece of text in it (labels, server replies in titles) is escaped
here, so it is safe to put in the page as it is.
"""

from __future__ import annotations

from html import escape

from harness.audit.stories import Story

WIDTH = 640
ROW = 18
LEFT = 120
"""Room for the row labels."""
TOP = 26
"""Room for the checkpoint reads and fault labels."""
MAX_ROWS = 12
COLORS = {
    "ok": "#27ae60",
    "tool_error": "#c0392b",
    "transport_error": "#e67e22",
    "timeout": "#8e44ad",
    "session_lost": "#7f8c8d",
}
OTHER = "#95a5a6"
FAULT = "#c0392b"


def sequence_svg(story: Story) -> str:
    """The picture of one story, as an ``<svg>`` element."""
    steps = story.steps[:MAX_ROWS]
    times = [s.start_t for s in steps] + [s.end_t for s in steps if s.end_t is not None]
    times += [t for t, _ in story.pod_faults] + [r.t for r in story.reads]
    if not times:
        return ""
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1e-3)
    plot = WIDTH - LEFT - 10

    def x(t: float) -> float:
        return round(LEFT + (t - t0) / span * plot, 1)

    height = TOP + ROW * (len(steps) + (len(story.steps) > MAX_ROWS)) + 18
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" font-family="sans-serif" font-size="10">',
        f"<title>{escape(f'intent {story.intent}: {story.verdict} ({story.cause})')}</title>",
    ]
    for n, step in enumerate(steps):
        y = TOP + n * ROW
        end = step.end_t if step.end_t is not None else t1
        color = COLORS.get(step.outcome or "", OTHER)
        said = f"{step.outcome or 'no answer'} {step.detail or ''} {step.text or ''}".strip()
        label = f"#{step.attempt} req {step.request_id}"
        parts += [
            f'<text x="4" y="{y + 12}">{escape(label)}</text>',
            f'<rect x="{x(step.start_t)}" y="{y + 3}" width="{max(x(end) - x(step.start_t), 2)}" '
            f'height="{ROW - 6}" fill="{color}"><title>{escape(said)}</title></rect>',
        ]
    if len(story.steps) > MAX_ROWS:
        y = TOP + len(steps) * ROW
        parts.append(f'<text x="4" y="{y + 12}">{escape(f"… {len(story.steps) - MAX_ROWS} more")}</text>')
    bottom = TOP + ROW * len(steps)
    for t, label in story.pod_faults:
        parts += [
            f'<line x1="{x(t)}" y1="{TOP - 4}" x2="{x(t)}" y2="{bottom}" stroke="{FAULT}" stroke-width="1.5">'
            f"<title>{escape(label)}</title></line>",
            f'<text x="{x(t) + 2}" y="{TOP - 6}" fill="{FAULT}">{escape(label.split(" ")[0])}</text>',
        ]
    for read in story.reads:
        cx, cy = x(read.t), TOP - 16
        seen = "failed" if read.error else f"{read.effects}"
        what = f"checkpoint read {read.when} {read.pod} @{read.t:.2f}s: {seen}"
        parts += [
            f'<polygon points="{cx},{cy - 5} {cx + 5},{cy} {cx},{cy + 5} {cx - 5},{cy}" '
            f'fill="{"#2980b9" if read.effects else "#ffffff"}" stroke="#2980b9">'
            f"<title>{escape(what)}</title></polygon>",
        ]
    axis = bottom + 12
    parts += [
        f'<text x="{LEFT}" y="{axis}">{t0:.2f}s</text>',
        f'<text x="{WIDTH - 10}" y="{axis}" text-anchor="end">{t1:.2f}s</text>',
        "</svg>",
    ]
    return "".join(parts)
