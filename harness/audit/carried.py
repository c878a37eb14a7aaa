"""The intents the columnar fold carries between batches: their facts as numpy columns, their text as Arrow.

An intent is carried until it is final (ended, no attempt in flight) and every
intent below it is; then :meth:`Partial.table` makes its row of the intents file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from harness.audit.intent_rows import DIGESTS
from harness.audit.scan import Declined
from harness.audit.verdicts import ClientStatus
from harness.history import OUTCOMES


class Texts:
    """The text of the events that intents not yet written point at (by seq), kept as Arrow.

    Markers, keys, replies, codes and traces are taken from DuckDB's batches when
    the intents that hold them are written, instead of each becoming a Python
    string as it is folded and an Arrow string again when written (a third of the
    fold's own time when they did). What no carried intent points at is dropped.
    The marker's two hashes (``DIGESTS``) ride along: DuckDB computes them while
    it parses, and the effects are looked up by them (:meth:`EffectTable.lookup`).
    """

    COLUMNS = ("marker", "key", "reply", "code", "trace_id", *DIGESTS)

    def __init__(self) -> None:
        self.parts: list[pa.RecordBatch] = []
        self._seqs: npt.NDArray[np.int64] | None = None

    def keep(self, batch: pa.RecordBatch) -> None:
        """The text columns of ``batch`` (its own buffers, not a copy: filtering them cost more)."""
        self.parts.append(batch.select(["seq", *self.COLUMNS]))
        self._seqs = None

    def at(self, seqs: npt.NDArray[np.int64], *columns: str) -> list[pa.Array]:
        """``columns`` of the events at ``seqs`` (null where the seq is -1: no such event)."""
        if not len(seqs) or seqs.max() < 0:  # none (an error code, most often): nothing to look up
            return [pa.nulls(len(seqs), pa.uint64() if c in DIGESTS else pa.string()) for c in columns]
        if self._seqs is None:
            self._seqs = np.concatenate(
                [np.zeros(0, np.int64), *(p.column("seq").to_numpy() for p in self.parts)]
            )
        where = np.minimum(np.searchsorted(self._seqs, seqs), max(len(self._seqs) - 1, 0))
        present = seqs >= 0
        found = present & (self._seqs[where] == seqs) if len(self._seqs) else np.zeros(len(seqs), bool)
        if (found != present).any():
            raise Declined  # text pointed at and not kept: cannot happen in a history this fold takes
        kept = pa.Table.from_batches(self.parts, self.parts[0].schema)  # some seq was found: parts exist
        taken = kept.select(list(columns)).take(pa.array(where, pa.int64(), mask=~found))
        return [column.combine_chunks() for column in taken.columns]

    def drop_before(self, seq: int) -> None:
        """Forget the events before ``seq`` (no intent still to be written points at them)."""
        kept = [p for p in self.parts if p.column("seq")[p.num_rows - 1].as_py() >= seq]
        if len(kept) != len(self.parts):
            self.parts, self._seqs = kept, None


@dataclass
class Partial:
    """Per-intent facts folded so far, one row per intent (sorted by intent), as numpy columns.

    ``n_started``/``n_ended`` count intent_started/intent_ended; ``first_seq`` is the seq of the
    first attempt's start (-1 before any), ``last_seq`` of the last attempt's end; ``reply_seq`` and
    ``code_seq`` of the last ok end with a reply and the last failed end with a code.

    Text is held by the seq of the event that carries it (marker and key: ``started_seq``; the
    trace: ``first_seq``; reply and code: ``reply_seq``, ``code_seq``), not as Python strings:
    :class:`Texts` keeps those events' text in Arrow until the intents are written.
    """

    intent: npt.NDArray[np.int64]
    n_started: npt.NDArray[np.int64]
    n_ended: npt.NDArray[np.int64]
    started_seq: npt.NDArray[np.int64]
    status: npt.NDArray[np.int8]
    attempts: npt.NDArray[np.int32]
    first_seq: npt.NDArray[np.int64]
    first_t: npt.NDArray[np.float64]
    pods: npt.NDArray[np.object_]
    last_seq: npt.NDArray[np.int64]
    last_t: npt.NDArray[np.float64]
    reply_seq: npt.NDArray[np.int64]
    code_seq: npt.NDArray[np.int64]
    outcomes: npt.NDArray[np.int32]
    """Shape (rows, len(OUTCOMES)): ended attempts by outcome.

    Counts are 32-bit, as the frame has them: the intents file is a fifth smaller than with 64."""

    @classmethod
    def empty(cls, intents: npt.NDArray[np.int64]) -> Partial:
        n = len(intents)
        none = np.full(n, None, dtype=object)
        return cls(
            intent=intents,
            n_started=np.zeros(n, np.int64),
            n_ended=np.zeros(n, np.int64),
            started_seq=np.full(n, -1, np.int64),
            status=np.zeros(n, np.int8),
            attempts=np.zeros(n, np.int32),
            first_seq=np.full(n, -1, np.int64),
            first_t=np.full(n, np.nan),
            pods=none.copy(),
            last_seq=np.full(n, -1, np.int64),
            last_t=np.full(n, np.nan),
            reply_seq=np.full(n, -1, np.int64),
            code_seq=np.full(n, -1, np.int64),
            outcomes=np.zeros((n, len(OUTCOMES)), np.int32),
        )

    def take(self, rows: npt.NDArray[Any]) -> Partial:
        return Partial(**{f: getattr(self, f)[rows] for f in self.__dataclass_fields__})

    @staticmethod
    def concat(parts: list[Partial]) -> Partial:
        joined = Partial(
            **{f: np.concatenate([getattr(p, f) for p in parts]) for f in Partial.__dataclass_fields__}
        )
        return joined.take(np.argsort(joined.intent, kind="stable"))

    def absorb(self, older: Partial) -> None:
        """Fold ``older`` (the same intents' facts from earlier batches, rows aligned) into this."""
        if ((self.n_started > 0) & (older.n_started > 0)).any():
            raise Declined  # an intent started twice (in two batches)
        self.started_seq = np.where(older.started_seq >= 0, older.started_seq, self.started_seq)
        self.n_started = self.n_started + older.n_started
        self.status = np.where(self.n_ended > 0, self.status, older.status)
        self.n_ended = self.n_ended + older.n_ended
        earlier = older.first_seq >= 0
        self.first_seq = np.where(earlier, older.first_seq, self.first_seq)
        self.first_t = np.where(earlier, older.first_t, self.first_t)
        mine, theirs = self.pods != None, older.pods != None  # noqa: E711 (elementwise)
        pods = np.where(mine, self.pods, older.pods)
        for row in np.flatnonzero(mine & theirs).tolist():  # the older attempts came first
            pods[row] = older.pods[row] + "\x1f" + self.pods[row]
        self.pods = pods
        self.attempts = self.attempts + older.attempts
        later = self.last_seq >= 0
        self.last_seq = np.where(later, self.last_seq, older.last_seq)
        self.last_t = np.where(later, self.last_t, older.last_t)
        replied = self.reply_seq >= 0
        self.reply_seq = np.where(replied, self.reply_seq, older.reply_seq)
        coded = self.code_seq >= 0
        self.code_seq = np.where(coded, self.code_seq, older.code_seq)
        self.outcomes = self.outcomes + older.outcomes

    def table(self, texts: Texts, *, pods: bool, traces: bool) -> pa.Table:
        """The rows as the part of the Arrow file the fold writes (IntentRows reads them back); without
        ``pods`` or ``traces`` (none seen yet, so none among these rows) those columns are null."""
        in_progress = int(ClientStatus.IN_PROGRESS)
        status = np.where(self.n_ended > 0, self.status, in_progress).astype(np.int8)
        marker, key, *digests = texts.at(self.started_seq, "marker", "key", *DIGESTS)
        n = len(self.intent)
        columns: dict[str, Any] = {
            "intent": self.intent,
            "marker": marker,
            "key": key,
            **dict(zip(DIGESTS, digests, strict=True)),
            "client_status": status,
            "attempts": self.attempts,
            **{f"n_{o}": self.outcomes[:, n] for n, o in enumerate(OUTCOMES)},
            "first_t": pa.array(self.first_t, pa.float64(), mask=np.isnan(self.first_t)),
            "last_t": pa.array(self.last_t, pa.float64(), mask=np.isnan(self.last_t)),
            "reply": texts.at(self.reply_seq, "reply")[0],
            "code": texts.at(self.code_seq, "code")[0],
            "pods": pa.array(self.pods, pa.string()) if pods else pa.nulls(n, pa.string()),
            "trace_id": texts.at(self.first_seq, "trace_id")[0] if traces else pa.nulls(n, pa.string()),
        }
        return pa.table(columns)
