"""Effects that were seen and later were not: checkpoint reads joined with the final count.

The run reads the effect source at checkpoints (just before each kill or rollout
step, and once a restarted pod is ready again) and records what it saw as an
``effects_checkpoint`` event: this run's intents with at least one effect as a
bitmap, those with more as ``{index: count}``, other markers only counted. That
record is compact (a million intents are 125 kB a read; :class:`harness.history.SeenEffects`
is its codec), and :func:`seen_counts` turns a read into counts per intent for the audit.

An intent *vanished* when some read saw more of its effects than the final read
counts, and a pod went down (a kill, a rollout step, a crash) after the last read
that saw them: the store lost what it held across a restart (a file rewritten in
place, a start-up that begins empty). The loss is blamed on the first pod fault
after that read (``vanished_after``), the first moment a restart could lose it;
a read in between that saw less (one that caught a file mid-rewrite) does not
move the blame. When that last read is the one after a restart and no pod fault
came since, the restarted server threw away what its store still held (a file
torn by the crash, read as empty): the pod fault that restart followed is blamed.
Effects gone with no pod fault after the last read that saw them, and not seen by
a read after a restart, did not vanish in a restart: something else (a concurrent
writer, the server itself) removed them, and the other causes say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from harness.audit.accumulators import CheckpointRead, PodFault

NO_READ = -1


def seen_counts(read: CheckpointRead, intents: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """Effects of each of ``intents`` (intent indices) that the read saw; zeros for a failed read.

    Only the bytes of the bitmap that cover ``intents`` are unpacked: the audit
    asks a chunk of intents at a time.
    """
    if not read.ok or not len(intents):
        return np.zeros(len(intents), dtype=np.int32)
    first = (int(intents.min()) >> 3) << 3
    size = int(intents.max()) + 1 - first
    packed = np.zeros((size + 7) // 8, dtype=np.uint8)
    given = np.frombuffer(read.seen, dtype=np.uint8)[first >> 3 : (first >> 3) + len(packed)]
    packed[: len(given)] = given
    every = np.unpackbits(packed, count=size, bitorder="little").astype(np.int32)
    if read.counts:
        keys = np.fromiter(read.counts.keys(), dtype=np.int64, count=len(read.counts))
        values = np.fromiter(read.counts.values(), dtype=np.int64, count=len(read.counts))
        inside = (keys >= first) & (keys < first + size)
        every[keys[inside] - first] = values[inside]
    result: npt.NDArray[np.int32] = every[intents - first]
    return result


@dataclass(frozen=True)
class Vanishing:
    """Per intent (in the order given): what the checkpoint reads saw of it, and whether it vanished."""

    seen_max: npt.NDArray[np.int32]
    """The most effects any read saw."""
    vanished: npt.NDArray[np.bool_]
    after: npt.NDArray[np.object_]
    """The label of the pod fault a vanished intent's effects were lost in (``kill#3 pod-0 @12.40s``)."""
    fault: npt.NDArray[np.int64]
    """The index in ``pod_faults`` of that fault, or -1."""


def vanishing(
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    intents: npt.NDArray[np.int64],
    final: npt.NDArray[np.int64],
) -> Vanishing:
    """Which intents vanished, over whole columns (one pass per read, a few per run)."""
    n = len(intents)
    running = np.zeros(n, dtype=np.int32)
    last_seen = np.full(n, NO_READ, dtype=np.int64)
    """The seq of the last read that saw more of an intent's effects than the final count."""
    after_restart = np.zeros(n, dtype=bool)
    """Whether that read was the one after a restart."""
    for read in reads:
        if not read.ok:
            continue
        now = seen_counts(read, intents)
        more = now > final
        last_seen[more] = read.seq
        after_restart[more] = read.when == "after_restart"
        np.maximum(running, now, out=running)
    fault = np.full(n, -1, dtype=np.int64)
    after = np.full(n, "", dtype=object)
    seen = np.flatnonzero(last_seen != NO_READ)
    if pod_faults and len(seen):
        seqs = np.array([f.seq for f in pod_faults], dtype=np.int64)
        first = np.searchsorted(seqs, last_seen[seen], side="right")  # the first pod fault after it
        down = first < len(seqs)
        fault[seen[down]] = first[down]
        # Seen by the read after a restart and gone with no pod fault since: the restarted server
        # threw away what its store still held (it started empty on a torn file). The restart lost
        # it: blamed on the pod fault that restart followed.
        restarted = ~down & after_restart[seen] & (first > 0)
        fault[seen[restarted]] = first[restarted] - 1
        labels = np.array([f.label() for f in pod_faults], dtype=object)
        after[fault >= 0] = labels[fault[fault >= 0]]
    return Vanishing(seen_max=running, vanished=fault >= 0, after=after, fault=fault)
