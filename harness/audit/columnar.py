"""The fold of a long history at the cost of its parse, in memory set by the intents in flight.

:func:`harness.audit.fold.fold_history` folds a history event by event in
Python: for a million intents its loop costs more than parsing the file, and its
per-intent lists grow with the run. Here DuckDB's JSON reader parses the file (in
C++, on both cores, streamed in Arrow batches) and numpy folds each batch:

- an attempt's end finds its start by request id; attempts still in flight are
  carried to the next batch (a few: the run's concurrency);
- per-intent facts (attempts, outcomes, first and last times, the last reply and
  error code, pods, trace) are folded per batch and merged into the intents
  carried from earlier batches. An intent is final once it has ended and no
  attempt of it is in flight; final intents below every unfinished one are
  written, in index order, to an Arrow file in a temporary directory. So the
  fold holds the intents in flight, not the run;
- every other event (a few per fault) is looked up in the file by its ``seq``,
  parsed with orjson and fed, in order, to the Python fold's own accumulators:
  the fault record, sessions, checkpoints and timeline come from one code;
- the branches that tie the two together (an attempt a pod disruption broke, a
  stream fault pinned on the attempt it names, an error message, an ok reply
  that reads as a failure, a crash blamed on attempts closed just before it) are
  replayed in Python over their few rows, by the Python fold's rules. What they
  add to an intent is kept sparse (:class:`Sparse`) and joined when the intents
  are read back, so a crash or a balancer re-send recorded after an intent was
  written still counts.

It answers as the Python fold does (``tests/unit/test_columnar.py`` compares
them on histories of every shape). It reads a history as the history writer
writes it: one event per line, each line starting with its ``seq``, seqs
consecutive. It declines (returns None) any history it cannot take exactly: a
line that is not a JSON event object, a torn last line, an event missing a field
its type needs, an attempt that ends twice or without its start, an intent index
outside the run, events of an intent after it was written. The Python fold then
reads that history, and names the damaged line if one is. Blank lines are
skipped by both.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import (
    CRASH_WINDOW_S,
    MAX_UNPLANNED_INTENTS,
    POD_FAULT_KINDS,
    Intents,
    PodDisruptions,
    fault_label,
    frame_of,
)
from harness.audit.fold import MALFORMED, Fold, Record
from harness.audit.memory import give_back
from harness.audit.parse import OUTCOME_CODE, Kind, Parse, start
from harness.audit.scratch import Scratch
from harness.audit.verdicts import ClientStatus
from harness.errors import HistoryError
from harness.history import CODE_LIMIT, OUTCOMES, EventType, FaultKind, Outcome, excerpt

REORDER_ROWS = 1 << 22
"""Events parsed ahead of a stretch of the file not parsed yet, at most (see _in_order)."""
DIGESTS = ("marker_hash", "marker_check")
"""Columns of a chunk of intents beside those of ``Intents.frame``: DuckDB's ``hash`` of the marker,
and of the marker after a byte 1 (see :class:`harness.audit.effects.EffectTable`)."""
CHUNK_ROWS = 65_536
"""Intents per chunk handed to the judging (a chunk is ~15 MB of frame)."""

_SEQ = re.compile(rb'\{"seq":(-?\d+),')


class Declined(Exception):
    """This history is not one the columnar fold takes exactly; the Python fold reads it instead."""


@dataclass
class Sparse:
    """What the rare branches add to intents, by intent index: few intents have any."""

    hits: Counter[int] = field(default_factory=Counter)
    faults: dict[int, set[str]] = field(default_factory=dict)
    failure_replies: set[int] = field(default_factory=set)

    def add(self, i: int, kinds: Any) -> None:
        self.faults.setdefault(i, set()).update(kinds)


class IntentRows:
    """The folded intents, on disk, read back by intent index one chunk at a time.

    Owns the temporary directory of the Arrow file of the intents; :meth:`close`
    removes it.
    """

    def __init__(
        self,
        workdir: Scratch,
        path: Path | None,
        sparse: Sparse,
        *,
        has_pods: bool,
        has_traces: bool,
    ) -> None:
        self.workdir = workdir
        self.path = path
        """The Arrow file of the intents, in index order (None when no intent started)."""
        self.sparse = sparse
        self.has_pods = has_pods
        self.has_traces = has_traces

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
            "first_attempt_ms": _millis(raw.column("first_t")),
            "last_end_ms": _millis(raw.column("last_t")),
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


def _millis(seconds: pa.ChunkedArray) -> pa.Array:
    """Whole milliseconds (rounded half to even, as numpy rounds), null where there is no time."""
    return pc.cast(pc.round(pc.multiply(seconds, 1000.0)), pa.int64())


def fold_columnar(path: Path, parse: Parse | None = None) -> tuple[Fold, IntentRows] | None:
    """Fold the history at ``path``: the run's record (a Fold without its intents) and the intents;
    None when the history is one to leave to the Python fold (see :class:`Declined`).

    ``parse``: the parse of that history, already started (:func:`harness.audit.parse.start`); it is
    this function's to close. Without it, one is started here.
    """
    if parse is None:
        parse = start(path)
        if parse is None:
            return None
    try:
        folder = _Folder(parse.workdir)
        fold = folder.fold(path, parse)
    except Declined:
        parse.discard()
        return None
    except BaseException:
        parse.discard()
        raise
    finally:
        parse.close()  # the parse is done: the intents are read back with Arrow alone
        give_back()
    rows = IntentRows(
        parse.workdir, folder.written, folder.sparse, has_pods=folder.has_pods, has_traces=folder.has_traces
    )
    return fold, rows


def _parsed(parse: Parse) -> Iterator[pa.RecordBatch]:
    """The parse's batches; a line DuckDB cannot read as an event (not JSON, a field of another type)
    declines the history."""
    try:
        yield from parse.batches()
    except duckdb.Error:
        raise Declined from None


@contextmanager
def _taking() -> Iterator[None]:
    """Around an accumulator's handler: an event it refuses (a field missing or of another type, as
    the Python fold's own ``except`` reads them) declines the history, so that fold names the line.
    Any other exception is a bug and is raised."""
    try:
        yield
    except (HistoryError, orjson.JSONDecodeError, *MALFORMED):
        raise Declined from None


def _front(ready: list[pa.RecordBatch], rows: int) -> pa.RecordBatch:
    """``rows`` rows or more (fewer than twice that) taken off the front of ``ready``: a slice of its
    first run when that is long enough, else whole runs joined. Joining only whole runs, a short one
    is copied once, and the runs after it keep their own bounds (cutting them to exactly ``rows``
    copied every batch after the first short one)."""
    first = ready[0]
    if first.num_rows >= rows:
        if first.num_rows > rows:
            ready[0] = first.slice(rows)
        else:
            ready.pop(0)
        return first.slice(0, rows)
    taken: list[pa.RecordBatch] = []
    held = 0
    while held < rows:
        run = ready[0]
        if run.num_rows > rows:
            taken.append(run.slice(0, rows))
            ready[0] = run.slice(rows)
        else:
            taken.append(ready.pop(0))
        held += taken[-1].num_rows
    return pa.concat_batches(taken)


def _in_order(batches: Iterator[pa.RecordBatch], first: int, rows: int) -> Iterator[pa.RecordBatch]:
    """The scan's rows in seq order, in batches of ``rows`` to twice that.

    DuckDB scans a file in parallel, and its stream may hand a later stretch of
    lines before an earlier one; each stretch is in order. Stretches wait here
    until the one before them has come (the seqs of a history are consecutive),
    at most ``REORDER_ROWS`` rows of them.
    """
    waiting: list[tuple[int, int, pa.RecordBatch]] = []
    ready: list[pa.RecordBatch] = []
    held = 0
    expected = first
    count = 0
    for batch in batches:
        seq = batch.column("seq").to_numpy(zero_copy_only=False)
        if not len(seq):
            continue
        cuts = [0, *(np.flatnonzero(np.diff(seq) != 1) + 1).tolist(), len(seq)]
        for a, b in itertools.pairwise(cuts):
            heapq.heappush(waiting, (int(seq[a]), count, batch.slice(a, b - a)))
            count += 1
            held += b - a
        while waiting and waiting[0][0] == expected:
            _, _, run = heapq.heappop(waiting)
            held -= run.num_rows
            ready.append(run)
            expected += run.num_rows
        while sum(r.num_rows for r in ready) >= rows:
            yield _front(ready, rows)
        if held > REORDER_ROWS:
            raise Declined  # seqs with a gap: not a history this fold takes
    while waiting:
        ready.append(heapq.heappop(waiting)[2])
    if ready:
        whole = pa.concat_batches(ready)
        for begin in range(0, whole.num_rows, rows):
            yield whole.slice(begin, rows)


def _distinct(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sorted distinct values: by a bitmap over their range when it is dense (intents of a batch are)."""
    if not len(values):
        return values
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 8 * len(values):
        return np.unique(values)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[values - lo] = True
    return np.flatnonzero(present).astype(np.int64) + lo


class _LineFinder:
    """The line of a history that holds a given seq, found by bisection over the file's bytes.

    The few events the fold parses in Python (faults, pods, checkpoints) are
    looked up this way: lines are in seq order and each starts with its seq
    (``{"seq":N,``), as the history writer writes them; a line that does not is
    a history the columnar fold declines.
    """

    PROBE = 4096

    def __init__(self, path: Path) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.size = os.fstat(self.f.fileno()).st_size
        self.low = 0
        """Where the previous line found started: seqs are looked up in increasing order."""

    def close(self) -> None:
        self.f.close()

    def _line_from(self, offset: int) -> tuple[int, int, bytes]:
        """(start, seq, line) of the first line starting at or after ``offset`` (seq -1 past the end)."""
        f = self.f
        if offset > 0:
            f.seek(offset - 1)
            skipped = 0
            while True:
                chunk = f.read(self.PROBE)
                if not chunk:
                    return self.size, -1, b""
                nl = chunk.find(b"\n")
                if nl >= 0:
                    offset = offset - 1 + skipped + nl + 1
                    break
                skipped += len(chunk)
        if offset >= self.size:
            return self.size, -1, b""
        f.seek(offset)
        line = f.readline()
        match = _SEQ.match(line)
        if match is None:
            raise Declined
        return offset, int(match.group(1)), line

    def first_seq(self) -> int:
        """The seq of the history's first line."""
        return self._line_from(0)[1]

    def find(self, seq: int) -> bytes:
        lo, hi = self.low, self.size
        while hi - lo > self.PROBE:
            mid = (lo + hi) // 2
            start, found, line = self._line_from(mid)
            if found == seq:
                self.low = start
                return line
            if found < 0 or found > seq:
                hi = mid
            else:
                lo = start + 1
        start, found, line = self._line_from(lo)
        while 0 <= found < seq:
            start, found, line = self._line_from(start + 1)
        if found != seq:
            raise Declined
        self.low = start
        return line


class _Disruptions(PodDisruptions):
    """The Python fold's pod disruptions, also logging each with its seq (SQL joins attempts to them)."""

    def __init__(self, intents: Intents) -> None:
        super().__init__(intents)
        self.log: list[tuple[int, str, str]] = []
        self.new: list[tuple[int, str, str]] = []
        self.crashes_seen: list[tuple[int, float, str]] = []
        """(seq, t, pod) of each unannounced pod exit in the current segment."""

    def _disrupt(self, pod: str, kind: str, ev: Any) -> None:
        super()._disrupt(pod, kind, ev)
        self.log.append((ev["seq"], kind, pod))
        self.new.append((ev["seq"], kind, pod))
        if kind == FaultKind.CRASH:
            self.crashes_seen.append((ev["seq"], ev["t"], pod))


class _Texts:
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
class _Partial:
    """Per-intent facts folded so far, one row per intent (sorted by intent), as numpy columns.

    ``n_started``/``n_ended`` count intent_started/intent_ended; ``first_seq`` is the seq of the
    first attempt's start (-1 before any), ``last_seq`` of the last attempt's end; ``reply_seq`` and
    ``code_seq`` of the last ok end with a reply and the last failed end with a code.

    Text is held by the seq of the event that carries it (marker and key: ``started_seq``; the
    trace: ``first_seq``; reply and code: ``reply_seq``, ``code_seq``), not as Python strings:
    :class:`_Texts` keeps those events' text in Arrow until the intents are written.
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
    def empty(cls, intents: npt.NDArray[np.int64]) -> _Partial:
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

    def take(self, rows: npt.NDArray[Any]) -> _Partial:
        return _Partial(**{f: getattr(self, f)[rows] for f in self.__dataclass_fields__})

    @staticmethod
    def concat(parts: list[_Partial]) -> _Partial:
        joined = _Partial(
            **{f: np.concatenate([getattr(p, f) for p in parts]) for f in _Partial.__dataclass_fields__}
        )
        return joined.take(np.argsort(joined.intent, kind="stable"))

    def absorb(self, older: _Partial) -> None:
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

    def table(self, texts: _Texts, *, pods: bool, traces: bool) -> pa.Table:
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


class _Folder:
    """One pass over a history's segments; its state is the intents and attempts in flight."""

    def __init__(self, workdir: Scratch) -> None:
        self.out = workdir.path / "intents.arrow"
        self.writer: pa.ipc.RecordBatchFileWriter | None = None
        self.sink: pa.NativeFile | None = None
        self.written: Path | None = None
        """``out`` once an intent has been written to it."""
        self.sparse = Sparse()
        self.texts = _Texts()
        self.has_pods = False
        self.has_traces = False
        self.intents = Intents()
        self.disruptions = _Disruptions(self.intents)
        # Intents would size lists to the plan, and StreamFaults looks for attempts in flight: neither
        # is here (the plan is noted in _other, stream faults are pinned on the attempts below).
        self.record = Record(self.intents, self.disruptions)
        self.others = self.record.handlers()
        self.plan, self.sessions = self.record.plan, self.record.sessions
        self.errors, self.failing = self.record.errors, self.record.failing
        self.rule_hits: Counter[int] = Counter()
        self.stream_faults: list[tuple[int, int, str]] = []
        self.recent: deque[tuple[float, float, int, str | None]] = deque()
        """Connection-closed attempts no disruption explains, within CRASH_WINDOW_S of the last
        (PodDisruptions.recent)."""
        self.last_t = 0.0
        self.last_seq = -(1 << 62)
        self.limit = MAX_UNPLANNED_INTENTS
        self.released = -1
        """Every intent at or below this index has been written (or will never be a row)."""
        self.open_ids = np.zeros(0, np.int64)
        """Attempts in flight (request ids, sorted), with their intent, start seq, start t and pod."""
        self.open_intent = np.zeros(0, np.int64)
        self.open_seq = np.zeros(0, np.int64)
        self.open_t = np.zeros(0, np.float64)
        self.open_pod = np.zeros(0, dtype=object)
        self.carried = _Partial.empty(np.zeros(0, np.int64))
        """Intents not final yet (not ended, or an attempt in flight), and final ones not yet written."""

    def fold(self, path: Path, parse: Parse) -> Fold:
        self.lines = _LineFinder(path)
        try:
            for batch in _in_order(_parsed(parse), self.lines.first_seq(), parse.rows):
                self._batch(batch)
            self._release(everything=True)
        finally:
            self.lines.close()
            pa.default_memory_pool().release_unused()  # the parsed batches: give their pages back
            if self.writer is not None:
                self.writer.close()
            if self.sink is not None:
                self.sink.close()
        return self.record.fold(
            pd.DataFrame(), rule_hits=self.rule_hits, last_t=self.last_t, open_attempts=len(self.open_ids)
        )

    def _batch(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        k = batch.column("k").to_numpy()
        if batch.column("bad").to_numpy(zero_copy_only=False).any():
            raise Declined  # an event missing a field its type needs
        seq = batch.column("seq").to_numpy()
        if len(seq) and (seq[0] <= self.last_seq or (len(seq) > 1 and not (np.diff(seq) > 0).all())):
            raise Declined  # lines not in seq order: not as the history writer writes them
        self.last_seq = int(seq[-1])
        self.texts.keep(batch)
        self._rare(seq[k == Kind.OTHER])
        intent = batch.column("intent").to_numpy()
        if ((k != Kind.OTHER) & ((intent < 0) | (intent >= self.limit))).any():
            raise Declined
        t = batch.column("t").to_numpy()
        self._fold_hot(
            k,
            seq,
            t,
            intent,
            batch.column("id").to_numpy(),
            batch.column("oc").to_numpy(),
            batch.column("closed").to_numpy(zero_copy_only=False),
        )
        attempt_events = np.flatnonzero((k == Kind.ATTEMPT_STARTED) | (k == Kind.ATTEMPT_ENDED))
        if len(attempt_events):
            self.last_t = float(t[attempt_events[-1]])

    def _strings(self, name: str, rows: npt.NDArray[np.bool_]) -> npt.NDArray[np.object_]:
        """A text column of the batch at ``rows``, as Python strings (None for null)."""
        column = self.batch.column(name).filter(pa.array(rows))
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)

    def _rare(self, seqs: npt.NDArray[np.int64]) -> None:
        """Every event that is not one of the four per-intent ones, through the accumulators, in order."""
        self.disruptions.new = []
        self.disruptions.crashes_seen = []
        self.stream_faults = []
        for seq in seqs.tolist():
            with _taking():
                self._other(seq)

    def _other(self, seq: int) -> None:
        """One event that is not a per-intent one: the branches tied to intents here, the rest through
        the accumulators."""
        ev = orjson.loads(self.lines.find(seq))
        if type(ev) is not dict or ev.get("seq") != seq or type(ev.get("type")) is not str:
            raise Declined
        if ev.get("t").__class__ not in (float, int):
            raise Declined
        typ = ev["type"]
        if typ == EventType.FAULT and ev["fault"] not in POD_FAULT_KINDS and "id" in ev:
            if "rule" in ev:
                self.rule_hits[ev["rule"]] += 1
            if type(ev["id"]) is int:
                self.stream_faults.append((seq, ev["id"], fault_label(ev)))
        elif typ == EventType.BALANCER_RETRY:
            if type(ev["intent"]) is not int:
                raise Declined
            # Recorded after the run: joined when the intents are read back (started ones only).
            self.sparse.add(ev["intent"], (FaultKind.BALANCER_RETRY.value,))
        elif typ == EventType.RUN_STARTED:
            planned = ev.get("intents")
            int(ev.get("intents", 0))  # refused here as Intents refuses it (Intents is not a handler here)
            self.limit = planned if type(planned) is int and planned > 0 else MAX_UNPLANNED_INTENTS
        for handle in self.others.get(typ, ()):
            handle(ev)

    def _fold_hot(
        self,
        k: npt.NDArray[Any],
        seq: npt.NDArray[np.int64],
        t: npt.NDArray[np.float64],
        intent: npt.NDArray[np.int64],
        ids: npt.NDArray[np.int64],
        oc: npt.NDArray[Any],
        closed: npt.NDArray[np.bool_],
    ) -> None:
        # Attempts: this batch's starts join those carried; each end finds its start by request id.
        is_start, is_end = k == Kind.ATTEMPT_STARTED, k == Kind.ATTEMPT_ENDED
        st = np.flatnonzero(is_start)
        en = np.flatnonzero(is_end)
        st_pod = self._strings("pod", is_start)
        all_ids = np.concatenate([self.open_ids, ids[st]])
        all_intent = np.concatenate([self.open_intent, intent[st]])
        all_seq = np.concatenate([self.open_seq, seq[st]])
        all_t = np.concatenate([self.open_t, t[st]])
        all_pod = np.concatenate([self.open_pod, st_pod])
        order = np.argsort(all_ids, kind="stable")
        sorted_ids = all_ids[order]
        if len(sorted_ids) > 1 and (np.diff(sorted_ids) == 0).any():
            raise Declined  # a request id started twice while in flight
        end_ids = ids[en]
        where = np.searchsorted(sorted_ids, end_ids)
        found = where < len(sorted_ids)
        found[found] = sorted_ids[where[found]] == end_ids[found]
        if not found.all():
            raise Declined  # an attempt that ended without its start
        match = order[where]  # index into all_* of each end's start
        if len(match) > 1 and np.bincount(match, minlength=len(all_ids)).max() > 1:
            raise Declined  # an attempt that ended twice
        e_seq, e_t, e_oc = seq[en], t[en], oc[en]
        s_seq, s_t, s_intent, s_pod = all_seq[match], all_t[match], all_intent[match], all_pod[match]
        if (e_seq < s_seq).any() or (e_oc < 0).any():
            raise Declined  # an end before its start, an outcome the harness does not write
        keep = np.ones(len(all_ids), dtype=bool)
        keep[match] = False
        self.open_ids, self.open_intent = all_ids[keep], all_intent[keep]
        self.open_seq, self.open_t, self.open_pod = all_seq[keep], all_t[keep], all_pod[keep]
        if (st_pod != None).any():  # noqa: E711
            self.has_pods = True
        if not self.has_traces and self.batch.column("trace_id").null_count < len(k):
            self.has_traces = True

        self._hits(s_seq, e_seq, s_t, e_t, s_intent, s_pod, closed[en])
        self._pin_stream_faults(all_ids, all_intent, all_seq, end_ids, e_seq)
        self._rare_ends(is_end, end_ids, s_intent)

        # Per-intent facts of this batch, one row per intent it touched.
        intent_events = (k == Kind.INTENT_STARTED) | (k == Kind.INTENT_ENDED)
        touched = _distinct(np.concatenate([intent[intent_events], intent[st], s_intent]))
        part = _Partial.empty(touched)
        n = len(touched)
        started = np.flatnonzero(k == Kind.INTENT_STARTED)
        if len(started):
            r = np.searchsorted(touched, intent[started])
            if np.bincount(r, minlength=n).max() > 1:
                raise Declined  # an intent started twice
            part.n_started[r] = 1
            part.started_seq[r] = seq[started]
        finished = np.flatnonzero(k == Kind.INTENT_ENDED)
        if len(finished):
            r = np.searchsorted(touched, intent[finished])
            if np.bincount(r, minlength=n).max() > 1:
                raise Declined  # an intent ended twice
            part.n_ended[r] = 1
            part.status[r] = self.batch.column("status").to_numpy(zero_copy_only=False)[finished]
            # An intent must have started before it ends (here, or in an earlier batch).
            begun = part.started_seq[r]
            if ((begun < 0) & ~self._started_before(touched[r])).any() or (begun > seq[finished]).any():
                raise Declined
        if len(st):
            r = np.searchsorted(touched, intent[st])
            part.attempts += np.bincount(r, minlength=n)
            first = np.full(n, len(r), dtype=np.int64)
            np.minimum.at(first, r, np.arange(len(r)))  # starts are in seq order: the first per intent
            rows = np.flatnonzero(first < len(r))
            at = first[rows]
            part.first_seq[rows] = seq[st][at]
            part.first_t[rows] = t[st][at]
            if self.has_pods:
                for row, pod in zip(r.tolist(), st_pod.tolist(), strict=True):
                    if pod is not None:
                        have = part.pods[row]
                        part.pods[row] = pod if have is None else have + "\x1f" + pod
        if len(en):
            r = np.searchsorted(touched, s_intent)
            np.add.at(part.outcomes, (r, e_oc.astype(np.int64)), 1)
            ok = OUTCOME_CODE[Outcome.OK.value]
            replied = (e_oc == ok) & (
                self.batch.column("reply").is_valid().to_numpy(zero_copy_only=False)[en]
            )
            if replied.any():
                self._last(part, r, replied, e_seq)
            coded = (e_oc != ok) & (self.batch.column("code").is_valid().to_numpy(zero_copy_only=False)[en])
            if coded.any():
                self._last(part, r, coded, e_seq, code=True)
            last_end = np.full(n, -1, dtype=np.int64)
            np.maximum.at(last_end, r, np.arange(len(r)))
            rows = np.flatnonzero(last_end >= 0)
            part.last_seq[rows] = e_seq[last_end[rows]]
            part.last_t[rows] = e_t[last_end[rows]]
        self._merge(part)

    @staticmethod
    def _last(
        part: _Partial,
        r: npt.NDArray[np.int64],
        rows: npt.NDArray[np.bool_],
        seqs: npt.NDArray[np.int64],
        *,
        code: bool = False,
    ) -> None:
        """The seq of the last end (in seq order) among ``rows`` of each intent: its reply's or its code's."""
        sub = r[rows]
        last = np.full(len(part.intent), -1, dtype=np.int64)
        np.maximum.at(last, sub, np.arange(len(sub)))
        have = np.flatnonzero(last >= 0)
        (part.code_seq if code else part.reply_seq)[have] = seqs[rows][last[have]]

    def _started_before(self, intents: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        carried = self.carried
        at = np.searchsorted(carried.intent, intents)
        inside = at < len(carried.intent)
        result = np.zeros(len(intents), dtype=bool)
        result[inside] = (carried.intent[at[inside]] == intents[inside]) & (carried.n_started[at[inside]] > 0)
        return result

    def _hits(
        self,
        s_seq: npt.NDArray[np.int64],
        e_seq: npt.NDArray[np.int64],
        s_t: npt.NDArray[np.float64],
        e_t: npt.NDArray[np.float64],
        s_intent: npt.NDArray[np.int64],
        s_pod: npt.NDArray[np.object_],
        closed: npt.NDArray[np.bool_],
    ) -> None:
        """Attempts a pod disruption broke (the disruptions between their start and end, on their pod
        when they name one), and the crash window of those whose connection closed with none."""
        log = self.disruptions.log
        hit = np.zeros(len(s_seq), dtype=bool)
        if log:
            pods = {None, *(p for _, _, p in log)} if self.has_pods else {None}
            for pod in pods:
                mine = np.array([s for s, _, p in log if pod is None or p == pod], dtype=np.int64)
                kinds = [kd for _, kd, p in log if pod is None or p == pod]
                if not len(mine):
                    continue
                watch = (s_pod == None) if pod is None else (s_pod == pod)  # noqa: E711
                lo = np.searchsorted(mine, s_seq, side="right")
                hi = np.searchsorted(mine, e_seq, side="left")
                got = watch & (hi > lo)
                hit |= got
                for a in np.flatnonzero(got).tolist():
                    i = int(s_intent[a])
                    self.sparse.hits[i] += 1
                    self.sparse.add(i, kinds[lo[a] : hi[a]])
        lonely = np.flatnonzero(closed & ~hit)
        if len(lonely) or self.disruptions.crashes_seen:
            ends = [
                (int(e_seq[a]), float(e_t[a]), float(s_t[a]), int(s_intent[a]), s_pod[a])
                for a in lonely.tolist()
            ]
            self._blame_crashes(ends, self.disruptions.crashes_seen)

    def _blame_crashes(
        self, closed: list[tuple[int, float, float, int, Any]], crashes: list[tuple[int, float, str]]
    ) -> None:
        """PodDisruptions.closed and the crash branch of PodDisruptions.exited, replayed in seq order."""
        crash = FaultKind.CRASH.value
        recent = self.recent
        steps: list[tuple[int, int, tuple[Any, ...]]] = [(s, 0, (e, st, i, p)) for s, e, st, i, p in closed]
        steps += [(s, 1, (t, pod)) for s, t, pod in crashes]
        for _, step, data in sorted(steps, key=lambda x: x[0]):
            if step == 0:
                end_t = data[0]
                recent.append(data)
                while recent and recent[0][0] < end_t - CRASH_WINDOW_S:
                    recent.popleft()
            else:
                t, on_pod = data
                others: deque[tuple[float, float, int, str | None]] = deque()
                for end_t, start_t, j, on in recent:
                    if on is not None and on != on_pod:
                        others.append((end_t, start_t, j, on))
                    elif end_t >= t - CRASH_WINDOW_S and start_t <= t:
                        self.sparse.hits[j] += 1
                        self.sparse.add(j, (crash,))
                recent = others
        self.recent = recent

    def _pin_stream_faults(
        self,
        all_ids: npt.NDArray[np.int64],
        all_intent: npt.NDArray[np.int64],
        all_seq: npt.NDArray[np.int64],
        end_ids: npt.NDArray[np.int64],
        e_seq: npt.NDArray[np.int64],
    ) -> None:
        """A fault that names its request is pinned on the attempt with that id in flight at the fault."""
        for f_seq, rid, label in self.stream_faults:
            for a in np.flatnonzero(all_ids == rid).tolist():
                if all_seq[a] >= f_seq:
                    continue
                done = np.flatnonzero(end_ids == rid)
                if len(done) and e_seq[done[0]] < f_seq:
                    continue
                self.sparse.add(int(all_intent[a]), (label,))

    def _rare_ends(
        self, is_end: npt.NDArray[np.bool_], end_ids: npt.NDArray[np.int64], s_intent: npt.NDArray[np.int64]
    ) -> None:
        """Error messages and ok replies that read as failures, tallied in history order; resumed streams."""
        batch = self.batch
        ok = OUTCOME_CODE[Outcome.OK.value]
        message = batch.column("message").is_valid().to_numpy(zero_copy_only=False)
        oc = batch.column("oc").to_numpy()
        failed = is_end & message & (oc != ok)
        if failed.any():
            mask = pa.array(failed)
            outcomes = [OUTCOMES[code] for code in oc[failed].tolist()]  # each end's is known (_fold_hot)
            codes = batch.column("code").filter(mask).to_pylist()
            for outcome, code, text in zip(
                outcomes, codes, batch.column("message").filter(mask).to_pylist(), strict=True
            ):
                ev: dict[str, Any] = {"message": orjson.loads(text)}
                if code is not None:
                    ev["code"] = orjson.loads(code)
                with _taking():
                    self.errors.tally(ev, outcome)
        flagged = batch.column("flagged").to_numpy(zero_copy_only=False) & (
            batch.column("oc").to_numpy() == ok
        )
        flagged &= batch.column("reply").is_valid().to_numpy(zero_copy_only=False)
        if flagged.any():
            intent_of = dict(zip(end_ids.tolist(), s_intent.tolist(), strict=True))
            mask = pa.array(flagged)
            ids = batch.column("id").filter(mask).to_pylist()
            for rid, reply in zip(ids, batch.column("reply").filter(mask).to_pylist(), strict=True):
                with _taking():
                    self.failing.reply({"reply": reply}, intent_of[rid])
            self.sparse.failure_replies = self.intents.failure_replies
        resumed = batch.column("resumed").is_valid().to_numpy(zero_copy_only=False)
        if resumed.any():
            for value in batch.column("resumed").filter(pa.array(resumed)).to_pylist():
                with _taking():
                    self.sessions.resumed[orjson.loads(value)] += 1

    def _merge(self, part: _Partial) -> None:
        """This segment's facts into the carried intents; write out those final below the watermark."""
        carried = self.carried
        at = np.searchsorted(part.intent, carried.intent)
        inside = at < len(part.intent)
        inside[inside] = part.intent[at[inside]] == carried.intent[inside]
        if inside.any():  # intents in flight across batches: few (the run's concurrency)
            rows = at[inside]
            both = part.take(rows)
            both.absorb(carried.take(np.flatnonzero(inside)))
            for f in _Partial.__dataclass_fields__:
                getattr(part, f)[rows] = getattr(both, f)
        if len(part.intent) and part.intent[0] <= self.released:
            raise Declined  # an event of an intent already written: not a history this fold takes
        untouched = ~inside
        self.carried = (
            _Partial.concat([carried.take(np.flatnonzero(untouched)), part]) if untouched.any() else part
        )
        self._release(everything=False)

    def _release(self, *, everything: bool) -> None:
        """Write the carried intents that are final and below every unfinished one, in index order."""
        c = self.carried
        if not len(c.intent):
            return
        in_flight = np.isin(c.intent, self.open_intent)
        final = (c.n_ended > 0) & ~in_flight
        if (final & (c.n_started == 0)).any():
            raise Declined  # an intent that ended without having started
        if everything:
            out = c.n_started > 0
            rest = np.zeros(len(c.intent), dtype=bool)
        else:
            pending = (c.n_started > 0) & ~final
            # Written in index order: only below the first intent still unfinished.
            below = final & (c.intent < c.intent[pending].min()) if pending.any() else final
            out = below
            rest = ~below
        if out.all():
            rows = c
        elif out.any():
            rows = c.take(np.flatnonzero(out))
        if out.any():
            table = rows.table(self.texts, pods=self.has_pods, traces=self.has_traces)
            if self.writer is None:
                # Arrow's own file format: written and read back at memory speed, unlike Parquet.
                # Through a buffer: Arrow writes each of a batch's ~60 buffers with a call of its own,
                # 10,000 system calls for a million intents.
                self.sink = pa.BufferedOutputStream(pa.OSFile(str(self.out), "wb"), buffer_size=1 << 20)
                self.writer = pa.ipc.new_file(self.sink, table.schema)
                self.written = self.out
            self.writer.write_table(table)
            self.released = int(rows.intent[-1])
        self.carried = c.take(np.flatnonzero(rest)) if rest.any() else _Partial.empty(np.zeros(0, np.int64))
        c = self.carried
        handles = np.concatenate([c.started_seq, c.first_seq, c.reply_seq, c.code_seq])
        handles = handles[handles >= 0]
        self.texts.drop_before(int(handles.min()) if len(handles) else self.last_seq + 1)
