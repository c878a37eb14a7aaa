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

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import CheckpointRead, PodFault
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


def holders(unreadable: Sequence[Unreadable], markers: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """For each marker, the index of the first unreadable file that holds it, or -1."""
    found = np.full(len(markers), -1, dtype=np.int64)
    for index, store in enumerate(unreadable):
        if not store.held:
            continue
        held = pa.array(sorted(store.held), markers.type)
        mine = pc.is_in(markers, value_set=held).fill_null(False).to_numpy(zero_copy_only=False)
        found[(found < 0) & np.asarray(mine, dtype=bool)] = index
    return found
