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
  add to an intent is kept sparse (:class:`harness.audit.intent_rows.Sparse`)
  and joined when the intents are read back, so a crash or a balancer re-send
  recorded after an intent was written still counts.

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

from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd
import pyarrow as pa

from harness.audit.accumulators import (
    CRASH_WINDOW_S,
    MAX_UNPLANNED_INTENTS,
    POD_FAULT_KINDS,
    Intents,
    PodDisruptions,
    fault_label,
)
from harness.audit.carried import Partial, Texts
from harness.audit.fold import MALFORMED, Fold, Record
from harness.audit.intent_rows import IntentRows, Sparse
from harness.audit.memory import give_back
from harness.audit.parse import OUTCOME_CODE, Kind, Parse, start
from harness.audit.scan import Declined, LineFinder, in_order, parsed
from harness.audit.scratch import Scratch
from harness.errors import HistoryError
from harness.history import OUTCOMES, EventType, FaultKind, Outcome


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


@contextmanager
def _taking() -> Iterator[None]:
    """Around an accumulator's handler: an event it refuses (a field missing or of another type, as
    the Python fold's own ``except`` reads them) declines the history, so that fold names the line.
    Any other exception is a bug and is raised."""
    try:
        yield
    except (HistoryError, orjson.JSONDecodeError, *MALFORMED):
        raise Declined from None


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


class _Folder:
    """One pass over a history's segments; its state is the intents and attempts in flight."""

    def __init__(self, workdir: Scratch) -> None:
        self.out = workdir.path / "intents.arrow"
        self.writer: pa.ipc.RecordBatchFileWriter | None = None
        self.sink: pa.NativeFile | None = None
        self.written: Path | None = None
        """``out`` once an intent has been written to it."""
        self.sparse = Sparse()
        self.texts = Texts()
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
        self.carried = Partial.empty(np.zeros(0, np.int64))
        """Intents not final yet (not ended, or an attempt in flight), and final ones not yet written."""

    def fold(self, path: Path, parse: Parse) -> Fold:
        self.lines = LineFinder(path)
        try:
            for batch in in_order(parsed(parse), self.lines.first_seq(), parse.rows):
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
        part = Partial.empty(touched)
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
        part: Partial,
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

    def _merge(self, part: Partial) -> None:
        """This segment's facts into the carried intents; write out those final below the watermark."""
        carried = self.carried
        at = np.searchsorted(part.intent, carried.intent)
        inside = at < len(part.intent)
        inside[inside] = part.intent[at[inside]] == carried.intent[inside]
        if inside.any():  # intents in flight across batches: few (the run's concurrency)
            rows = at[inside]
            both = part.take(rows)
            both.absorb(carried.take(np.flatnonzero(inside)))
            for f in Partial.__dataclass_fields__:
                getattr(part, f)[rows] = getattr(both, f)
        if len(part.intent) and part.intent[0] <= self.released:
            raise Declined  # an event of an intent already written: not a history this fold takes
        untouched = ~inside
        self.carried = (
            Partial.concat([carried.take(np.flatnonzero(untouched)), part]) if untouched.any() else part
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
        self.carried = c.take(np.flatnonzero(rest)) if rest.any() else Partial.empty(np.zeros(0, np.int64))
        c = self.carried
        handles = np.concatenate([c.started_seq, c.first_seq, c.reply_seq, c.code_seq])
        handles = handles[handles >= 0]
        self.texts.drop_before(int(handles.min()) if len(handles) else self.last_seq + 1)
