"""The effect source's reads at checkpoints, as the run recorded them."""

from __future__ import annotations

from dataclasses import dataclass

from harness.audit.accumulators.base import Accumulator, Event, reads
from harness.errors import HistoryError
from harness.history import EventType, SeenEffects


@dataclass(frozen=True, slots=True)
class CheckpointRead:
    """One read of the effect source during the run (``effects_checkpoint``), kept compact.

    ``seen`` is the bitmap the run wrote (:class:`harness.history.SeenEffects`, the one codec):
    bit ``i`` (least significant bit first in each byte) set when intent ``i`` had at least one
    effect; ``counts`` has the intents with two or more. :mod:`harness.audit.vanished` reads them.
    """

    seq: int
    t: float
    when: str
    """``before_fault`` (the pod still up, just before a kill or rollout step) or ``after_restart``."""
    pod: str
    fault_seq: int | None
    """The seq of the fault (or pod_ready) event this read belongs to."""
    seen: bytes
    counts: dict[int, int]
    foreign: int
    """Effects whose marker is not one of this run's intents."""
    error: str | None
    """Why the read failed (or was abandoned); it saw nothing then."""
    took_s: float | None
    unstable: bool = False
    """Its re-reads never agreed (a store caught mid-rewrite): what it saw is evidence of nothing."""
    torn: bool = False
    """Lines of the store did not parse (a rewrite in progress): what it saw was there, what it did not
    see may have been in the part being written."""
    began: float = 0.0
    """When the read began (its ``read_at``; older histories: ``t`` less ``took_s``), on the run's clock."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def reliable(self) -> bool:
        """What it saw can be judged by: it succeeded, and it agreed with its re-read where it had one."""
        return self.error is None and not self.unstable

    @property
    def witness(self) -> bool:
        """What it did not see can be judged by too: reliable, and of a store that was whole."""
        return self.reliable and not self.torn

    def count(self, i: int) -> int:
        """Effects of intent ``i`` this read saw."""
        if not self.ok:
            return 0
        if i in self.counts:
            return self.counts[i]
        byte = i >> 3
        return (self.seen[byte] >> (i & 7)) & 1 if byte < len(self.seen) else 0


class CheckpointReads(Accumulator):
    """The run's checkpoint reads of the effect source, in order; fills ``Fold.checkpoints``.

    A read whose ``seen`` cannot be decoded is kept as a failed read (the audit
    goes on without it, as it would without that read), not as a damaged history.
    """

    def __init__(self) -> None:
        self.reads: list[CheckpointRead] = []

    @reads(EventType.EFFECTS_CHECKPOINT)
    def checkpoint(self, ev: Event) -> None:
        error = ev.get("error")
        found = None
        if error is None:
            try:
                found = SeenEffects.from_event(ev)
            except HistoryError:
                error = "its record cannot be read (a damaged seen or counts)"
        fault_seq = ev.get("fault_seq")
        took = ev.get("took_s")
        self.reads.append(
            CheckpointRead(
                seq=ev.get("seq", -1),
                t=ev["t"],
                when=str(ev.get("when", "")),
                pod=str(ev.get("pod", "")),
                fault_seq=fault_seq if type(fault_seq) is int else None,
                seen=found.bitmap if found else b"",
                counts=found.counts if found else {},
                foreign=found.foreign if found else 0,
                error=None if error is None else str(error),
                took_s=float(took) if isinstance(took, int | float) else None,
                unstable=ev.get("unstable") is True,
                torn=ev.get("torn") is True,
                began=float(ev["read_at"])
                if isinstance(ev.get("read_at"), int | float)
                else ev["t"] - (float(took) if isinstance(took, int | float) else 0.0),
            )
        )
