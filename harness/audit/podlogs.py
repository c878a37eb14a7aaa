"""Evidence from the pod logs: the error-looking lines around each pod fault.

A pod's log (``pods/<pod>.log`` in the run directory) holds every start of it,
each opened by ``--- pod-0: start #N at HH:MM:SS ---``. A kill or crash ends start
N (the fold knows which: the pod's starts before it); start N+1 is the restart.
What a person needs next to the fault is there: the end of start N (a traceback,
a failed write) and the beginning of start N+1 (``Error loading notes: ...``, a
store recovered as empty). So per fault, at most ``LINES`` error-looking lines:
the last of the section it ended, the first of the restart, each one line of at
most 300 characters.

Offline, like the rest of the audit: these files are part of the run directory,
and the runner redacted them (the scenario's secrets) when the run ended. A log
is read once, line by line, keeping a few lines per section, so a chatty server's
large log costs time but not memory.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import rundir
from harness.audit.accumulators import PodFault
from harness.history import excerpt

LINES = 10
"""Error-looking lines per fault: up to half from the end of the start it ended, the rest after."""
FAULTS = 20
"""Pod faults whose log lines a report shows (the first ones; vanished effects' faults first)."""

_SECTION = re.compile(rb"^--- (?P<pod>\S+): start #(?P<n>\d+) at [^\n]* ---\s*$")
_ERROR = re.compile(
    rb"Traceback|Error|ERROR|Exception|EXCEPTION|FATAL|Fatal|fatal:|panic|PANIC|CRITICAL|Critical"
    rb"|\berror:|\bfailed\b|\bFailed\b|Killed|Segmentation fault|corrupt"
)


@dataclass(frozen=True, slots=True)
class FaultEvidence:
    """The pod log around one pod fault."""

    fault: str
    """Its label: ``kill#3 pod-0 @12.40s``."""
    pod: str
    before: list[str]
    """Error-looking lines at the end of the start the fault ended."""
    after: list[str]
    """Error-looking lines at the beginning of the start after it."""
    sections: bool = True
    """False when the log has no start sections (a container's): the lines are the log's last."""


@dataclass
class _Section:
    head: list[str]
    tail: deque[str]


def _sections(path: Path, keep: int) -> dict[int, _Section]:
    """Start number -> its first and last ``keep`` error-looking lines (0: a log without sections)."""
    sections: dict[int, _Section] = {}
    current = sections.setdefault(0, _Section([], deque(maxlen=keep)))
    with open(path, "rb") as log:
        for raw in log:
            marker = _SECTION.match(raw)
            if marker is not None:
                current = sections.setdefault(int(marker["n"]), _Section([], deque(maxlen=keep)))
                continue
            if _ERROR.search(raw) is None:
                continue
            line = excerpt(raw.decode("utf-8", "replace"))
            if len(current.head) < keep:
                current.head.append(line)
            current.tail.append(line)
    return sections


def evidence(run_dir: Path, faults: Sequence[PodFault], first: Iterable[int] = ()) -> list[FaultEvidence]:
    """The pod log lines of up to ``FAULTS`` pod faults: those indexed by ``first``, then in order."""
    order = list(dict.fromkeys([*first, *range(len(faults))]))[:FAULTS]
    chosen = sorted(order)
    logs: dict[str, dict[int, _Section] | None] = {}
    found = []
    half = LINES // 2
    for index in chosen:
        fault = faults[index]
        if fault.pod not in logs:
            path = run_dir / rundir.PODS / f"{fault.pod}.log"
            logs[fault.pod] = _sections(path, LINES) if rundir.own_regular_file(path, run_dir) else None
        sections = logs[fault.pod]
        if sections is None:
            continue
        if len(sections) == 1:  # no start sections: the log's last error-looking lines
            lines = list(sections[0].tail)[-LINES:]
            if lines:
                found.append(FaultEvidence(fault.label(), fault.pod, lines, [], sections=False))
            continue
        ended, restart = sections.get(fault.start), sections.get(fault.start + 1)
        after = restart.head[:LINES] if restart is not None else []
        before = list(ended.tail)[-max(half, LINES - len(after)) :] if ended is not None else []
        after = after[: LINES - len(before)]
        if before or after:
            found.append(FaultEvidence(fault.label(), fault.pod, before, after))
    return found
