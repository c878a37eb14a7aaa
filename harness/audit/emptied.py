"""A total loss told as what it is: the store empty (or unreadable) after one pod fault.

A store that a restart throws away (a file rewritten as empty, a database the server
no longer opens) loses everything written before the fault, and often everything
after it: the server acknowledges each later write and keeps it nowhere the audit
reads. Counted per intent, that reads as four causes ("lost_across_restart 1450,
no_fault 492, kill 32, vanished 26") where there is one story: the store was empty
after kill#1, and every later write was acknowledged and not stored. The
checkpoint reads show it: the first read after a restart that found nothing of the
run (or could not read the store at all, and no later read could) where an earlier
read had found effects. Pure: the reads and pod faults are the fold's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.audit.accumulators import CheckpointRead, PodFault


@dataclass(frozen=True, slots=True)
class Emptied:
    """The pod fault after which the store read empty or unreadable, and what it held before."""

    fault: PodFault
    held: int
    """Intents an earlier read found stored (the last read that found any)."""
    unreadable: str | None = None
    """Why the store could not be read from then on (None: it was read, and empty)."""
    foreign: bool = False
    """It still held records of no intent of this run (it lost this run's, not everything)."""

    def sentence(self, acked_after: int, stored_after: int) -> str:
        """The story, first: what the store was after the fault, and what became of the writes after it
        (``acked_after``: intents acknowledged after the fault; ``stored_after``: those found stored)."""
        fault = self.fault.label()
        if self.unreadable is not None:
            what = f"the store was unreadable after {fault} ({self.unreadable})"
        elif self.foreign:
            what = f"the store held none of this run's effects after {fault}"
        else:
            what = f"the store was empty after {fault}"
        what += f", where a read before it had found {self.held} intents stored"
        if not acked_after:
            return what
        if not stored_after:
            return f"{what}; every later write was acknowledged and not stored ({acked_after} intents)"
        missing = acked_after - stored_after
        return f"{what}; of the {acked_after} writes acknowledged after it, {missing} were not stored"


def stored_in(read: CheckpointRead) -> int:
    """Intents of this run the read found stored (its bitmap has a bit for each)."""
    return int.from_bytes(read.seen, "little").bit_count() if read.ok else 0


def emptied(reads: Sequence[CheckpointRead], pod_faults: Sequence[PodFault]) -> Emptied | None:
    """The first pod fault after which the store read empty or unreadable while an earlier read had
    found this run's effects in it; None when no read shows that."""
    held = 0
    for index, read in enumerate(reads):
        if read.reliable and (found := stored_in(read)):
            held = found
            continue
        if not held or read.when != "after_restart":
            continue
        fault = next((f for f in reversed(pod_faults) if f.seq < read.seq and f.pod == read.pod), None)
        if fault is None:
            continue
        if read.witness:  # read whole, and nothing of the run in it
            return Emptied(fault, held, foreign=read.foreign > 0)
        if not read.ok and all(not later.ok for later in reads[index + 1 :]):
            return Emptied(fault, held, unreadable=read.error)
    return None
