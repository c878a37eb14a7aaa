"""What every HTML page of the harness shares: plots as embedded images, and its templates.

A run's report, a comparison and a trend are pages that open offline, so each
plot is a PNG in a data URI. matplotlib (Agg, no display) and Jinja2 are imported
when a page is drawn: the commands that draw none start without them.
"""

from __future__ import annotations

import base64
import importlib
import io
import threading
from typing import Any


def import_plotting() -> None:
    """Start importing matplotlib on a thread of its own: half a second of Python, most of what
    report.html costs, done while an audit waits on DuckDB and SQLite (a later import waits for it)."""
    threading.Thread(target=importlib.import_module, args=("matplotlib.figure",), daemon=True).start()


def figure(width: float = 10, height: float = 3.2) -> tuple[Any, Any]:
    """A matplotlib figure and its axes, drawn without a display: a ``Figure`` of its own, not
    pyplot's (whose import and global state were a third of the time report.html took)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def counts_format() -> Any:
    """Tick labels as whole numbers with thousands separators (1, 10, 1,000)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def no_labels() -> Any:
    """No tick labels (for minor ticks)."""
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def png(fig: Any) -> str:
    """The figure as an embeddable ``data:image/png`` URI (drawn by Agg)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def render(template: str, **context: Any) -> str:
    """One of ``report/templates/``, HTML-escaped."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("harness.report"), autoescape=select_autoescape(["html", "j2"]))
    return env.get_template(template).render(**context)
