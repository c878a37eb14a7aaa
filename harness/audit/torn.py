"""A store its server cannot read again: which pod fault tore it, and which intents it took.

A file of the store that does not parse in the format its server reads it in (a
JSON document rewritten in place and killed before its truncate) counts none of
its markers (:mod:`harness.effects.files`): the intents whose effects it held are
lost with it, blamed on the fault that tore it. That fault is found from what the
run directory shows: a checkpoint read that found the store whole (a witness)
came before the tear, and so did the file's last write (its modification time,
on the run's clock through ``epoch_s``); the first pod fault after both is the one
that cut the write short. Where the file changed after every pod fault (a
restarted server appended to it), the last pod fault after the witness is blamed;
where no pod fault came after the witness, the server tore its store by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import CheckpointRead, PodFault
from harness.audit.causes import Cause
from harness.effects.base import Unreadable

CLOCK_SLACK_S = 0.05
"""How much earlier than the file's last write a fault may seem to come and still be the one that cut it:
the fault is recorded as its signal is sent, and the process may write on for a moment; the file's time
is the kernel's coarse clock (behind, never ahead), the run's a monotonic one mapped to the wall clock
once (``epoch_s``, to the microsecond)."""


def tearing_fault(
    unreadable: Unreadable,
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    epoch_s: float | None,
) -> int | None:
    """The index in ``pod_faults`` of the fault that tore ``unreadable``, or None (no pod fault came after
    the last read that found the store whole: the server tore it by itself)."""
    whole = max((read.began for read in reads if read.witness), default=float("-inf"))
    after = [i for i, fault in enumerate(pod_faults) if fault.t > whole]
    if not after:
        return None
    if unreadable.changed is not None and epoch_s is not None:
        written = unreadable.changed - epoch_s - CLOCK_SLACK_S
        cut = next((i for i in after if pod_faults[i].t >= written), None)
        if cut is not None:
            return cut
    return after[-1]


def tearing_faults(
    unreadable: Sequence[Unreadable],
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    epoch: Any,
) -> list[int | None]:
    """:func:`tearing_fault` of each unreadable file (``epoch``: the history's ``epoch_s``, if it has one)."""
    epoch_s = float(epoch) if isinstance(epoch, int | float) else None
    return [tearing_fault(u, reads, pod_faults, epoch_s) for u in unreadable]


@dataclass(frozen=True, slots=True)
class Held:
    """Of a chunk of intents: which unreadable file held each one's effect, and why it is lost."""

    file: npt.NDArray[np.int64]
    """The index of the first unreadable file that holds its marker, -1 for none."""
    cause: npt.NDArray[np.object_]
    """The kind of the fault that tore that file (``no_fault`` where none did); empty where none held it."""
    labels: list[str]
    """Per file, the label of the fault that tore it (``kill#2 pod-0 @4.10s``), empty where none did."""

    @classmethod
    def of(
        cls,
        unreadable: Sequence[Unreadable],
        tore: Sequence[int | None],
        pod_faults: Sequence[PodFault],
        markers: pa.Array | pa.ChunkedArray,
    ) -> Held:
        found = np.full(len(markers), -1, dtype=np.int64)
        cause = np.full(len(markers), "", dtype=object)
        for index, (store, fault) in enumerate(zip(unreadable, tore, strict=True)):
            if not store.held:
                continue
            held = pa.array(sorted(store.held), markers.type)
            mine = np.asarray(
                pc.is_in(markers, value_set=held).fill_null(False).to_numpy(zero_copy_only=False)
            )
            mine &= found < 0
            found[mine] = index
            cause[mine] = pod_faults[fault].kind if fault is not None else Cause.NO_FAULT.value
        labels = [pod_faults[f].label() if f is not None else "" for f in tore]
        return cls(found, cause, labels)

    def label(self, rows: npt.NDArray[np.bool_], into: npt.NDArray[np.object_]) -> None:
        """Name, ``into`` an intent's ``vanished_after`` at ``rows``, the fault that tore its file."""
        for row in np.flatnonzero(rows).tolist():
            into[row] = self.labels[int(self.file[row])]
