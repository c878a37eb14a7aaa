"""Effects that were seen and later were not: checkpoint reads joined with the final count.

The run reads the effect source at checkpoints (just before each kill or rollout
step, and once a restarted pod is ready again) and records what it saw as an
``effects_checkpoint`` event: this run's intents with at least one effect as a
bitmap, those with more as ``{index: count}``, other markers only counted. That
record is compact (a million intents are 125 kB a read) and this module is its
one codec: :func:`encode_seen` for the writer, :func:`seen_counts` for the audit.

An intent *vanished* when some read saw more of its effects than the final read
counts, and a pod went down (a kill, a rollout step, a crash) between the last
read that saw them and the first that did not: the store lost what it had
acknowledged across a restart (a file rewritten in place, a start-up that begins
empty). The drop is blamed on the last such pod fault (``vanished_after``). A drop
with no pod fault in between is not a vanishing: something else (a concurrent
writer, the server itself) removed it, and the other causes say so.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from harness.audit.accumulators import CheckpointRead, PodFault

NO_READ = -1


def encode_seen(counts: Mapping[str, int], namespace: str) -> dict[str, Any]:
    """``seen``, ``counts`` and ``foreign`` of an ``effects_checkpoint`` from effects per marker.

    This run's markers are ``{namespace}-m{index}`` (``harness.workload``); any other
    marker with effects is counted in ``foreign`` and not listed.
    """
    prefix = f"{namespace}-m"
    indices: dict[int, int] = {}
    foreign = 0
    for marker, n in counts.items():
        digits = marker[len(prefix) :] if marker.startswith(prefix) else ""
        if digits.isascii() and digits.isdigit() and n > 0:
            indices[int(digits)] = indices.get(int(digits), 0) + n
        elif n > 0:
            foreign += n
    bits = np.zeros(max(indices, default=-1) + 1, dtype=bool)
    bits[list(indices)] = True
    seen = np.packbits(bits, bitorder="little").tobytes()
    return {
        "seen": base64.b64encode(seen).decode("ascii"),
        "counts": {str(i): n for i, n in sorted(indices.items()) if n >= 2},
        "foreign": foreign,
    }


def seen_counts(read: CheckpointRead, intents: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """Effects of each of ``intents`` (intent indices) that the read saw; zeros for a failed read."""
    if not read.ok or not len(intents):
        return np.zeros(len(intents), dtype=np.int32)
    size = int(intents.max()) + 1
    packed = np.zeros((size + 7) // 8, dtype=np.uint8)
    given = np.frombuffer(read.seen, dtype=np.uint8)[: len(packed)]
    packed[: len(given)] = given
    every = np.unpackbits(packed, count=size, bitorder="little").astype(np.int32)
    for i, n in read.counts.items():
        if 0 <= i < size:
            every[i] = n
    result: npt.NDArray[np.int32] = every[intents]
    return result


@dataclass(frozen=True)
class Vanishing:
    """Per intent (in the order given): what the checkpoint reads saw of it, and whether it vanished."""

    seen_max: npt.NDArray[np.int32]
    """The most effects any read saw."""
    vanished: npt.NDArray[np.bool_]
    after: npt.NDArray[np.object_]
    """The label of the pod fault a vanished intent's effects were lost across (``kill#3 pod-0 @12.40s``)."""
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
    seen_seq = np.full(n, NO_READ, dtype=np.int64)
    """The seq of the last read that still saw an intent's most effects (before any drop)."""
    drop_seq = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    """The seq of the first read that saw fewer; the final read (max) when none did."""
    for read in reads:
        if not read.ok:
            continue
        now = seen_counts(read, intents)
        undropped = drop_seq == np.iinfo(np.int64).max
        dropped = undropped & (now < running)
        drop_seq[dropped] = read.seq
        still = undropped & ~dropped & (now > 0)
        seen_seq[still] = read.seq
        np.maximum(running, now, out=running)
    lower = running > final
    fault = np.full(n, -1, dtype=np.int64)
    after = np.full(n, "", dtype=object)
    if pod_faults and lower.any():
        seqs = np.array([f.seq for f in pod_faults], dtype=np.int64)
        last = np.searchsorted(seqs, drop_seq[lower], side="right") - 1
        between = (last >= 0) & (seqs[np.maximum(last, 0)] > seen_seq[lower])
        fault[np.flatnonzero(lower)[between]] = last[between]
        labels = np.array([f.label() for f in pod_faults], dtype=object)
        after[fault >= 0] = labels[fault[fault >= 0]]
    return Vanishing(seen_max=running, vanished=fault >= 0, after=after, fault=fault)
