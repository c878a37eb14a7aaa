"""The live status of a run in progress: a rich panel on a terminal, a repeated plain line in CI logs.

It renders a :class:`Snapshot` the runner takes of its parts; it knows nothing
of drivers or pods, only of the numbers a person watching a run wants.

"Anomalies so far" are what the client saw, not what the audit will find: an
ambiguous attempt (the exchange broke or timed out) may or may not have taken
effect, and only the effect count at the end tells a duplicate from a clean
retry. The status says so, so nobody reads a live count as a verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float
    """Seconds since the run started."""
    finished: int
    planned: int
    attempts: int
    in_flight: int
    pod_faults_done: int
    pod_faults_planned: int
    pods_ready: int
    """Replicas ready to serve (most targets have one pod)."""
    pods: int = 1
    holding: bool = False
    """A due fault holds dispatching (waiting for the pod)."""
    stream_faults: int | None = None
    """Stream faults the proxy injected so far; None when the run has no stream rules."""
    ambiguous: int = 0
    """Attempts whose exchange broke or timed out: they may or may not have taken effect."""
    gave_up: int = 0
    """Intents that ended without a successful attempt."""
    tool_errors: int = 0

    def line(self) -> str:
        stream = "" if self.stream_faults is None else f" · stream faults {self.stream_faults}"
        return (
            f"[{self.t:7.1f}s] intents {self.finished}/{self.planned} "
            f"({self.finished / max(1, self.planned):.0%})"
            f" · attempts {self.attempts} · in flight {self.in_flight}"
            f" · pod faults {self.pod_faults_done}/{self.pod_faults_planned}{stream}"
            f" · ambiguous {self.ambiguous} · gave up {self.gave_up} · tool errors {self.tool_errors}"
            f" · {self._pods_word()}" + (" · holding for a fault" if self.holding else "")
        )

    def _pods_word(self) -> str:
        if self.pods == 1:
            return f"pod {'ready' if self.pods_ready else 'DOWN'}"
        return f"pods ready {self.pods_ready}/{self.pods}"

    def panel(self) -> Group:
        """The same numbers for a terminal: a bar, then one row per question a watcher asks."""
        bar = ProgressBar(total=max(1, self.planned), completed=self.finished, width=40)
        head = Table.grid(padding=(0, 1))
        head.add_row(
            bar,
            Text(f"{self.finished}/{self.planned} intents ({self.finished / max(1, self.planned):.0%})"),
            Text(f"{self.t:.1f}s", style="dim"),
        )
        rows = Table.grid(padding=(0, 2))
        rows.add_column(style="bold")
        rows.add_column()
        if self.pods > 1:
            style = "green" if self.pods_ready == self.pods else "yellow" if self.pods_ready else "bold red"
            pod = Text(f"{self.pods_ready}/{self.pods} replicas ready", style=style)
        elif self.pods_ready:
            pod = Text("ready", style="green")
        else:
            pod = Text("DOWN", style="bold red")
        if self.holding:
            pod.append(" · holding dispatch for a due fault", style="yellow")
        rows.add_row("pod", pod)
        rows.add_row("traffic", f"{self.attempts} attempts · {self.in_flight} in flight")
        faults = f"pod {self.pod_faults_done}/{self.pod_faults_planned}"
        if self.stream_faults is not None:
            faults += f" · stream {self.stream_faults}"
        rows.add_row("faults", faults)
        anomalies = Text(
            f"{self.ambiguous} ambiguous attempts · {self.gave_up} gave up · {self.tool_errors} tool errors",
            style="yellow" if self.ambiguous or self.gave_up else "",
        )
        anomalies.append("  (seen by the client; the audit counts effects)", style="dim")
        rows.add_row("anomalies", anomalies)
        return Group(head, rows)


class LiveStatus:
    """Shows the snapshot every ``interval_s``: redrawn in place on a terminal, else a line per 5 s or more.

    The panel is redrawn from the event loop (``auto_refresh=False``), so no
    thread reads the driver's counters while it changes them.
    """

    def __init__(self, out: TextIO, interval_s: float) -> None:
        self.out = out
        console = Console(file=out, highlight=False)
        self.tty = console.is_terminal and not console.is_dumb_terminal
        self.interval_s = interval_s if self.tty else max(interval_s, 5.0)
        self._live = Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self._started = False

    async def run(self, snapshot: Callable[[], Snapshot]) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.show(snapshot())

    def show(self, snap: Snapshot) -> None:
        if not self.tty:
            self.out.write(snap.line() + "\n")
            self.out.flush()
            return
        if not self._started:
            self._live.start()
            self._started = True
        self._live.update(snap.panel(), refresh=True)

    def finish(self) -> None:
        """Leave the last panel on screen (the runner shows a final snapshot just before)."""
        if self._started:
            self._live.stop()
            self._started = False
