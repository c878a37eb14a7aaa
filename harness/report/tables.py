"""Plain-text tables shared by the terminal and Markdown renderers."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``align`` is one of l/r per column (default: first l, rest r)."""
    align = align or "l" + "r" * (len(header) - 1)
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align, strict=True)]
        return "| " + " | ".join(parts) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def pct(x: float) -> str:
    return f"{x:.2%}"


def ci(bounds: Sequence[float]) -> str:
    return f"{bounds[0]:.2%}–{bounds[1]:.2%}"
