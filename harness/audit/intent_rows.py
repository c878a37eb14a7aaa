"""The folded intents as the judging reads them: an Arrow file read back one chunk at a time.

The columnar fold (:mod:`harness.audit.columnar`) writes each intent once it is
final; what the rare branches add later (a crash blamed on it, a balancer's
re-send) is kept sparse and joined here, when the intents are read back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import frame_of
from harness.audit.scratch import Scratch
from harness.history import CODE_LIMIT, OUTCOMES, excerpt

DIGESTS = ("marker_hash", "marker_check")
"""Columns of a chunk of intents beside those of ``Intents.frame``: DuckDB's ``hash`` of the marker,
and of the marker after a byte 1 (see :class:`harness.audit.effects.EffectTable`)."""
CHUNK_ROWS = 65_536
"""Intents per chunk handed to the judging (a chunk is ~15 MB of frame)."""


@dataclass
class Sparse:
    """What the rare branches add to intents, by intent index: few intents have any."""

    hits: Counter[int] = field(default_factory=Counter)
    faults: dict[int, set[str]] = field(default_factory=dict)
    failure_replies: set[int] = field(default_factory=set)

    def add(self, i: int, kinds: Any) -> None:
        self.faults.setdefault(i, set()).update(kinds)


@dataclass(eq=False)
class IntentRows:
    """The folded intents, on disk, read back by intent index one chunk at a time.

    Owns the temporary directory of the Arrow file of the intents; :meth:`close`
    removes it.
    """

    workdir: Scratch
    path: Path | None
    """The Arrow file of the intents, in index order (None when no intent started)."""
    sparse: Sparse
    _: KW_ONLY
    has_pods: bool
    has_traces: bool

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[pa.Table]:
        """The fold's per-intent rows (started intents, by index), ``rows`` intents at a time."""
        if self.path is None:
            return
        with pa.OSFile(str(self.path)) as source:  # not mapped: mapped pages would count as ours
            reader = pa.ipc.open_file(source)
            pending: list[pa.RecordBatch] = []
            held = 0
            for n in range(reader.num_record_batches):
                batch = reader.get_batch(n)
                pending.append(batch)
                held += batch.num_rows
                if held >= rows:
                    yield self._chunk(pa.Table.from_batches(pending))
                    pending, held = [], 0
            if pending:
                yield self._chunk(pa.Table.from_batches(pending))

    def _chunk(self, raw: pa.Table) -> pa.Table:
        """A chunk with the columns of :meth:`Intents.frame`, in its order, with the same values, and the
        marker's ``DIGESTS`` after its key."""
        index = raw.column("intent").to_numpy()
        n = len(index)
        sparse = self.sparse
        hits = np.zeros(n, dtype=np.int32)
        faults = np.full(n, "", dtype=object)
        marked = np.zeros(0, dtype=np.int64)
        if sparse.hits or sparse.faults:
            marked = np.flatnonzero(
                np.isin(index, np.fromiter({*sparse.hits, *sparse.faults}, dtype=np.int64))
            )
            for row in marked.tolist():
                i = int(index[row])
                hits[row] = sparse.hits.get(i, 0)
                kinds = sparse.faults.get(i)
                if kinds:
                    faults[row] = ";".join(sorted(kinds))
        raw_codes = raw.column("code")
        codes = np.full(n, "", dtype=object)
        present = np.zeros(0, dtype=np.int64)
        if raw_codes.null_count < n:
            present = np.flatnonzero(raw_codes.is_valid().to_numpy(zero_copy_only=False))
            for row, text in zip(present.tolist(), raw_codes.take(present).to_pylist(), strict=True):
                codes[row] = excerpt(str(orjson.loads(text)), CODE_LIMIT)
        failing = np.zeros(n, dtype=bool)
        if sparse.failure_replies:
            failing = np.isin(index, np.fromiter(sparse.failure_replies, dtype=np.int64))
        columns: dict[str, Any] = {
            "intent": index,
            "marker": raw.column("marker"),
            "key": raw.column("key"),
            **{name: raw.column(name) for name in DIGESTS},
            "client_status": raw.column("client_status"),
            "attempts": raw.column("attempts"),
            **{f"n_{o}": raw.column(f"n_{o}") for o in OUTCOMES},
            "attempts_hit_by_pod_fault": hits,
            "faults": texts(faults, marked),
            "first_attempt_ms": millis(raw.column("first_t")),
            "last_end_ms": millis(raw.column("last_t")),
            "code": texts(codes, present),
            "reply": raw.column("reply").fill_null(""),
            "reply_reads_as_failure": failing,
        }
        if self.has_pods:
            first = np.full(n, "", dtype=object)
            every = np.full(n, "", dtype=object)
            for row, pods in enumerate(raw.column("pods").to_pylist()):
                if pods:
                    seen = list(dict.fromkeys(pods.split("\x1f")))
                    first[row], every[row] = seen[0], ";".join(seen)
            columns["first_pod"], columns["pods"] = texts(first), texts(every)
        if self.has_traces:
            columns["trace_id"] = raw.column("trace_id").fill_null("")
        return pa.table(columns)

    def frame(self) -> pd.DataFrame:
        """Every started intent at once, as :meth:`Intents.frame` has them (small runs, tests)."""
        chunks = [chunk.drop_columns(list(DIGESTS)) for chunk in self.chunks()]
        return frame_of(pa.concat_tables(chunks)) if chunks else pd.DataFrame()

    def close(self) -> None:
        self.workdir.cleanup()


def texts(values: npt.NDArray[np.object_], rows: npt.NDArray[np.int64] | None = None) -> pa.Array:
    """A text column; with ``rows``, one whose values are empty strings but at those rows, and only those
    become Arrow strings (a take puts them in place: building a million empty strings one by one cost
    more than judging them)."""
    if rows is None:
        return pa.array(values, pa.string())
    at = np.zeros(len(values), dtype=np.int32)
    at[rows] = np.arange(1, len(rows) + 1, dtype=np.int32)
    return pa.array(["", *values[rows].tolist()], pa.string()).take(pa.array(at))


def millis(seconds: pa.ChunkedArray) -> pa.Array:
    """Whole milliseconds (rounded half to even, as numpy rounds), null where there is no time."""
    return pc.cast(pc.round(pc.multiply(seconds, 1000.0)), pa.int64())
