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

An acknowledged intent no read ever saw, missing at the end, is not thereby lost
by the server on its own (``no_fault``): that needs evidence. It is *lost across
a restart* (:func:`lost_across`) when a pod fault came after its acknowledgement
and no reliable read between the two showed the server dropped it: it may have
been on its way to the store and lost with the pod, and nothing the run saw says
otherwise. What shows the server lost it by itself is no pod fault after the
acknowledgement at all, or a read after it and before the next pod fault that
found work started after it and not it (the store kept later writes and not this
one: a lost update). A read that found nothing later shows only that the write was
not durable yet (a server that saves later), and one of a store caught mid-write
(``torn``: lines that did not parse) may have missed it in the part being written.
A read whose re-reads never agreed (``unstable``) is evidence of nothing, here and
above.
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
        if not read.reliable:
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


def highest_seen(read: CheckpointRead) -> int:
    """The highest intent index the read saw an effect of; -1 for none."""
    bitmap = read.seen.rstrip(b"\0")
    if not bitmap:
        return -1
    return (len(bitmap) - 1) * 8 + bitmap[-1].bit_length() - 1


def lost_across(
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    intents: npt.NDArray[np.int64],
    acked_ms: npt.NDArray[np.float64],
) -> npt.NDArray[np.int64]:
    """Per intent, the index in ``pod_faults`` of the first pod fault after its acknowledgement
    (``acked_ms``: when its successful attempt ended, NaN for none), or -1: no pod fault came after it,
    or a reliable read between the two did not find it while it found an intent started after it: the
    store kept later work and not this (the server lost it by itself, shown). A read that found nothing
    later shows only that the write was not durable yet, which the fault then made final."""
    n = len(intents)
    fault = np.full(n, -1, dtype=np.int64)
    if not pod_faults or not n:
        return fault
    fault_t = np.array([f.t for f in pod_faults], dtype=np.float64)
    acked = ~np.isnan(acked_ms)
    ack_t = np.where(acked, acked_ms, 0.0) / 1000.0
    first = np.searchsorted(fault_t, ack_t, side="right")
    after = acked & (first < len(pod_faults))
    next_t = np.where(after, fault_t[np.minimum(first, len(pod_faults) - 1)], np.inf)
    absent = np.zeros(n, dtype=bool)
    for read in reads:
        if not read.witness:
            continue
        # After the acknowledgement means the read *began* after it: a before_fault read is recorded
        # only as its fault strikes, and work goes on between the two.
        between = after & (read.began > ack_t) & (read.t <= next_t) & (intents < highest_seen(read))
        if between.any():
            absent |= between & (seen_counts(read, intents) == 0)
    chosen = after & ~absent
    fault[chosen] = first[chosen]
    return fault


def pod_faults_cleared(
    reads: Sequence[CheckpointRead],
    pod_faults: Sequence[PodFault],
    intents: npt.NDArray[np.int64],
    first_ms: npt.NDArray[np.float64],
    last_ms: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Per intent, whether the evidence clears the pod faults during its attempts of its duplicate:
    after each of them, the first reliable read once the pod was back saw no effect of it. A retry
    after a kill repeats an effect only if the effect was there when the pod died; a restart that
    finds none, the kill did not leave one behind (the second came from something else: a severed
    response and its retry). NaN times: no attempt, never cleared."""
    n = len(intents)
    cleared = np.zeros(n, dtype=bool)
    if not pod_faults or not n:
        return cleared
    started = np.where(np.isnan(first_ms), np.inf, first_ms) / 1000.0
    ended = np.where(np.isnan(last_ms), -np.inf, last_ms) / 1000.0
    during = np.zeros(n, dtype=np.int32)
    blank = np.zeros(n, dtype=np.int32)
    for fault in pod_faults:
        hit = (started <= fault.t) & (fault.t <= ended)
        if not hit.any():
            continue
        during += hit
        after = next(
            (r for r in reads if r.t > fault.t and r.when == "after_restart" and r.pod == fault.pod), None
        )
        if after is not None and after.witness:
            blank += hit & (seen_counts(after, intents) == 0)
    cleared[(during > 0) & (blank == during)] = True
    return cleared
