"""Evidence from the pod logs: the error-looking lines around each pod fault.

A pod's log (``pods/<pod>.log`` in the run directory) holds every start of it,
each opened by ``--- pod-0: start #N at HH:MM:SS ---``. A kill or crash ends start
N (the fold knows which: the pod's starts before it); start N+1 is the restart.
What a person needs next to the fault is there: the end of start N (a traceback,
a failed write) and the beginning of start N+1 (``Error loading notes: ...``, a
store recovered as empty). So per fault, at most ``LINES`` error-looking lines:
the last of the section it ended, the first of the restart, each one line of at
most 300 characters. A line repeated (a stack trace a server logs on every call, its
timestamps and numbers aside) is shown once, with how many times it came: one server's
229k copies of the same trace filled the section and said nothing more than one does.

Offline, like the rest of the audit: these files are part of the run directory,
and the runner redacted them (the scenario's secrets) when the run ended. A log
is read once, line by line, keeping a few lines per section, so a chatty server's
large log costs time but not memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


_VARYING = re.compile(r"0x[0-9a-fA-F]+|\d+")
"""What differs between two copies of one log line: timestamps, line numbers, ids, addresses."""


def _shape(line: str) -> str:
    """A line with what varies between its copies taken out: the key repeats are counted by."""
    return _VARYING.sub("#", line)


class _Lines:
    """Distinct lines in the order they first came (or, ``last``, in the order they last came), at most
    ``keep`` of them, each with how many times it came while kept."""

    def __init__(self, keep: int, *, last: bool) -> None:
        self.keep = keep
        self.last = last
        self.lines: dict[str, list[Any]] = {}
        """Shape -> [the line as first seen, its count]; a dict keeps the order."""

    def add(self, line: str) -> None:
        shape = _shape(line)
        kept = self.lines.get(shape)
        if kept is not None:
            kept[1] += 1
            if self.last:  # the most recent last: moved to the end
                self.lines[shape] = self.lines.pop(shape)
            return
        if len(self.lines) >= self.keep:
            if not self.last:
                return
            del self.lines[next(iter(self.lines))]
        self.lines[shape] = [line, 1]

    def shown(self) -> list[str]:
        return [line if n == 1 else f"{line} (repeated {n}×)" for line, n in self.lines.values()]


@dataclass
class _Section:
    head: _Lines
    tail: _Lines


def _section(keep: int) -> _Section:
    return _Section(_Lines(keep, last=False), _Lines(keep, last=True))


def _sections(path: Path, keep: int) -> dict[int, _Section]:
    """Start number -> its first and last ``keep`` distinct error-looking lines (0: a log without
    sections)."""
    sections: dict[int, _Section] = {}
    current = sections.setdefault(0, _section(keep))
    with open(path, "rb") as log:
        for raw in log:
            marker = _SECTION.match(raw)
            if marker is not None:
                current = sections.setdefault(int(marker["n"]), _section(keep))
                continue
            if _ERROR.search(raw) is None:
                continue
            line = excerpt(raw.decode("utf-8", "replace"))
            current.head.add(line)
            current.tail.add(line)
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
            lines = sections[0].tail.shown()[-LINES:]
            if lines:
                found.append(FaultEvidence(fault.label(), fault.pod, lines, [], sections=False))
            continue
        ended, restart = sections.get(fault.start), sections.get(fault.start + 1)
        after = restart.head.shown()[:LINES] if restart is not None else []
        before = ended.tail.shown()[-max(half, LINES - len(after)) :] if ended is not None else []
        after = after[: LINES - len(before)]
        if before or after:
            found.append(FaultEvidence(fault.label(), fault.pod, before, after))
    return found
