"""Audit a run: fold the history, join the effects, judge every intent, find causes, summarise, gate.

Offline only: everything it knows comes from the run directory (the history,
the scenario as run, the effects: the target's SQLite file, the sink's record,
or ``effects.json``; the pod logs, and a control run's summary). So a run can be
audited again at any time, and a partial run as well as a complete one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness import rundir
from harness.audit.accumulators import frame_of
from harness.audit.begin import Begun, begin
from harness.audit.causes import READS as CAUSE_READS
from harness.audit.causes import causes
from harness.audit.columnar import fold_columnar
from harness.audit.control import compare_control
from harness.audit.effects import EffectTable, Hashes
from harness.audit.emptied import emptied
from harness.audit.fixes import fix_for
from harness.audit.fold import CheckpointRead, Fold, PodFault, fold_history
from harness.audit.gate import evaluate_gate
from harness.audit.intent_rows import CHUNK_ROWS, DIGESTS, IntentRows, texts
from harness.audit.memory import no_cycle_collection
from harness.audit.ordinary import OrdinaryReplies
from harness.audit.podlogs import evidence
from harness.audit.runfacts import run_facts
from harness.audit.scratch import Scratch
from harness.audit.stories import TOLD, FindingClass, History, Story, classes, tell
from harness.audit.summary import EffectCounts, Summary, UnreadableStore, summarize
from harness.audit.tally import Tally
from harness.audit.torn import Held, tearing_faults
from harness.audit.vanished import lost_across, pod_faults_cleared, vanishing
from harness.audit.verdicts import EXACTLY_ONCE_CODE, STATUS_NAMES, VERDICT_ORDER, ClientStatus, verdict_codes
from harness.errors import AuditError, HistoryError, UsageError
from harness.history import has_events, read_batches
from harness.scenario import Scenario

_STATUS_NAMES = pa.array(STATUS_NAMES.tolist(), pa.string())
_VERDICT_NAMES = pa.array([None if v is None else v.value for v in VERDICT_ORDER], pa.string())


PLOTTED = ("verdict", "client_status", "attempts", "first_attempt_ms", "last_end_ms")
"""The columns report.html reads of every intent."""


class JudgedIntents:
    """The judged per-intent table of an audit, on disk (Arrow's file format), read in chunks or whole.

    The audit writes it one chunk at a time as it judges them. ``explain`` reads
    the one row it tells, and intents.csv and intents.parquet can be written
    from it again. report.html reads ``PLOTTED`` from a narrow copy of its own:
    Arrow reads a batch whole, so a few columns of the full file cost as much as
    all of them (a quarter of a second at a million intents). Only a caller that
    asks for the whole table (``AuditResult.intents``: the OpenTelemetry export,
    crash points, tests) holds it in memory.
    """

    def __init__(self, *, whole: bool = True) -> None:
        """``whole`` False: only the narrow copy is kept (``mcp-chaos audit``, which reads no row again:
        the whole table of 3M intents is 390 MB written for nothing)."""
        # Removed with the object (an AuditResult lives as long as its caller needs its rows).
        self._folder = Scratch()
        self.path: Path | None = self._folder.path / "judged.arrow" if whole else None
        self.narrow = self._folder.path / "plotted.arrow"
        self._writers: list[pa.ipc.RecordBatchFileWriter] = []
        self._schema: pa.Schema | None = None
        self.columns: list[str] = []

    def write(self, chunk: pa.Table) -> None:
        if self._schema is None:
            self._schema = chunk.schema
            self.columns = list(chunk.column_names)
            narrow = pa.schema([self._schema.field(c) for c in PLOTTED])
            self._writers = [pa.ipc.new_file(str(self.narrow), narrow)]
            if self.path is not None:
                self._writers.append(pa.ipc.new_file(str(self.path), self._schema))
        elif chunk.schema != self._schema:
            chunk = chunk.select(self.columns).cast(self._schema)
        self._writers[0].write_table(chunk.select(list(PLOTTED)).combine_chunks())
        if self.path is not None:  # one batch per chunk: one read each later
            self._writers[1].write_table(chunk.combine_chunks())

    def remove(self) -> None:
        """Remove the files now, for a caller done with the rows (else they go with this object, which
        a reference cycle can keep until the cycle collector runs)."""
        self._folder.cleanup()

    def close_writer(self) -> None:
        writers, self._writers = self._writers, []
        for writer in writers:
            writer.close()

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The rows in intent order, a chunk at a time (only ``columns``, if given)."""
        if self._schema is None:
            return
        with pa.OSFile(str(self._file(columns))) as source:
            reader = pa.ipc.open_file(source)
            for n in range(reader.num_record_batches):
                batch = reader.get_batch(n)
                yield batch if columns is None else batch.select(list(columns))

    def _file(self, columns: Sequence[str] | None) -> Path:
        """The narrow copy when it holds ``columns``, else the whole file."""
        if columns is not None and set(columns) <= set(PLOTTED):
            return self.narrow
        if self.path is None:
            raise AuditError(
                "this audit kept only the columns report.html plots; audit_run(..., keep_rows=True) keeps all"
            )
        return self.path

    def rows_of(self, intents: Sequence[int]) -> pa.Table:
        """The rows of these intents only (a chunk at a time: the table is never whole in memory)."""
        wanted = pa.array(list(intents), pa.int64())
        found = [b.filter(pc.is_in(b.column("intent"), value_set=wanted)) for b in self.batches()]
        found = [b for b in found if b.num_rows]
        if not found:
            return pa.table({"intent": pa.array([], pa.int64())})
        return pa.Table.from_batches(found)

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows at once (only ``columns``, if given)."""
        if self._schema is None:
            return pd.DataFrame({c: [] for c in columns or ("intent",)})
        with pa.OSFile(str(self._file(columns))) as source:
            table = pa.ipc.open_file(source).read_all()
            return frame_of(table if columns is None else table.select(list(columns)))


@dataclass
class AuditResult:
    """The audit of one run: a row per started intent (on disk), and the summary CI and people read."""

    run_dir: Path
    scenario: Scenario
    judged: JudgedIntents
    summary: Summary
    keyed: bool = True
    """Whether each attempt of an intent carries its key (``run_started``'s ``keyed``)."""
    pod_events: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    """(t, what): pod faults by kind, ``pod_exited`` and ``pod_ready``, as the history has them."""
    pod_faults: list[PodFault] = dataclasses.field(default_factory=list)
    checkpoints: list[CheckpointRead] = dataclasses.field(default_factory=list)
    _intents: pd.DataFrame | None = None

    @property
    def intents(self) -> pd.DataFrame:
        """Every started intent's row at once (read from disk on first use: small runs, tests)."""
        if self._intents is None:
            self._intents = self.judged.frame()
        return self._intents

    @property
    def gate_passed(self) -> bool:
        return self.summary.gate.passed


def _no_history() -> Iterable[Sequence[Mapping[str, Any]]]:
    return ()


class IntentChunks(Protocol):
    """The fold's started intents, in index order, a chunk at a time (columns of ``Intents.frame``)."""

    def chunks(self) -> Iterator[pa.Table]: ...


@dataclass
class FrameChunks:
    """The Python fold's frame as chunks of Arrow: its started intents, ``CHUNK_ROWS`` at a time."""

    frame: pd.DataFrame

    def chunks(self) -> Iterator[pa.Table]:
        started = self.frame["client_status"] != ClientStatus.NOT_STARTED
        table = self.frame if started.all() else self.frame[started]
        for start in range(0, len(table), CHUNK_ROWS):
            part = pa.Table.from_pandas(table.iloc[start : start + CHUNK_ROWS], preserve_index=False)
            yield part.replace_schema_metadata(None)


def judge_fold(
    fold: Fold,
    effects: Counter[str],
    scenario: Scenario,
    run_dir: Path,
    history: History = _no_history,
) -> AuditResult:
    """Join effects to the Python fold's history, judge every intent, find causes, summarise, gate."""
    table = EffectTable.of(effects)
    try:
        return judge(fold, FrameChunks(fold.intents), table, scenario, run_dir, history)
    finally:
        table.close()


def _unusual_replies(
    ordinary: OrdinaryReplies,
    chunk: pa.Table,
    status: npt.NDArray[Any],
    counted: npt.NDArray[np.int64],
    failing: npt.NDArray[np.bool_],
    vanished: npt.NDArray[np.bool_],
) -> pa.Table:
    """The chunk with the lost intents whose reply is unlike every stored intent's marked as replies
    that read as failures (:mod:`harness.audit.ordinary`): the evidence of a failure said in a language
    no word list reads. Their verdict stays lost; their cause becomes ``error_as_success``."""
    replies = chunk.column("reply")
    acked = status == ClientStatus.OK
    ordinary.learn(replies, acked & (counted > 0))
    unusual = ordinary.unusual(replies, acked & (counted == 0) & ~failing & ~vanished)
    if not unusual.any():
        return chunk
    where = chunk.column_names.index("reply_reads_as_failure")
    return chunk.set_column(where, "reply_reads_as_failure", pa.array(failing | unusual))


def _after_emptied(
    tally: Tally, t: float, chunk: pa.Table, status: npt.NDArray[Any], counted: npt.NDArray[np.int64]
) -> None:
    """Count the intents acknowledged after the fault that emptied the store (at ``t`` s), and those
    of them found stored: whether every later write was lost too."""
    ended_ms = chunk.column("last_end_ms").cast(pa.float64()).to_numpy(zero_copy_only=False)
    after = (status == ClientStatus.OK) & (np.nan_to_num(ended_ms, nan=-1.0) / 1000.0 > t)
    tally.acked_after += int(after.sum())
    tally.stored_after += int((after & (counted > 0)).sum())


WINDOW = ("first_attempt_ms", "last_end_ms")
"""An intent's attempts, from the first's start to the last's end (ms since the run began)."""


def judge(
    fold: Fold,
    rows: IntentChunks,
    effects: EffectTable,
    scenario: Scenario,
    run_dir: Path,
    history: History = _no_history,
    sink: Callable[[pa.Table], None] | None = None,
    keep_rows: bool = True,
) -> AuditResult:
    """Join effects to the folded intents chunk by chunk, judge each, find causes; summarise, apply the gate.

    Memory is a chunk and the tally (counts, and the few rows stories are told
    of), whatever the run's size; the judged rows go to disk (:class:`JudgedIntents`;
    without ``keep_rows``, only the columns report.html plots), and to ``sink`` (the
    report's files, written meanwhile). ``history`` opens the history again for the
    stories (a targeted second read).
    """
    judged = JudgedIntents(whole=keep_rows)
    tally = Tally(emptied=emptied(fold.checkpoints, fold.pod_faults))
    ordinary = OrdinaryReplies()
    matched = 0
    tore = tearing_faults(effects.unreadable, fold.checkpoints, fold.pod_faults, fold.run.get("epoch_s"))
    tally.blamed.update(f for f in tore if f is not None)
    try:
        for chunk in rows.chunks():
            hashes: Hashes | None = None
            if "marker_hash" in chunk.column_names:  # the columnar fold's: DuckDB hashed the markers
                hashes = (chunk.column("marker_hash").to_numpy(), chunk.column("marker_check").to_numpy())
                chunk = chunk.drop_columns(list(DIGESTS))
            counted_effects = effects.lookup(chunk.column("marker"), hashes)
            matched += int(counted_effects.sum())
            status = chunk.column("client_status").to_numpy()
            failing = chunk.column("reply_reads_as_failure").to_numpy(zero_copy_only=False)
            codes = verdict_codes(status, counted_effects, failing)
            intents = chunk.column("intent").to_numpy()
            gone = vanishing(fold.checkpoints, fold.pod_faults, intents, counted_effects)
            chunk = _unusual_replies(ordinary, chunk, status, counted_effects, failing, gone.vanished)
            # Acknowledged and not found at the end: when, to tell a loss across a restart from one
            # the server made by itself (only the lost need it).
            lost = (status == ClientStatus.OK) & (counted_effects == 0) & ~gone.vanished
            acked_ms = np.full(len(intents), np.nan)
            if lost.any():
                ended_ms = chunk.column("last_end_ms").cast(pa.float64()).to_numpy(zero_copy_only=False)
                acked_ms[lost] = ended_ms[lost]
            across = lost_across(fold.checkpoints, fold.pod_faults, intents, acked_ms)
            cleared = np.zeros(len(intents), dtype=bool)
            twice = counted_effects > 1
            if twice.any() and fold.checkpoints:
                times = [chunk.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False) for c in WINDOW]
                cleared[twice] = pod_faults_cleared(
                    fold.checkpoints, fold.pod_faults, intents[twice], times[0][twice], times[1][twice]
                )
            lost_after = gone.after.copy()
            lost_after[across >= 0] = [fold.pod_faults[f].label() for f in across[across >= 0]]
            held = Held.of(effects.unreadable, tore, fold.pod_faults, chunk.column("marker"))
            held_lost = (held.file >= 0) & (status == ClientStatus.OK) & (counted_effects == 0)
            held.label(held_lost, lost_after)  # lost with the file the fault tore
            named = gone.vanished | (across >= 0) | held_lost
            judged_chunk = (
                chunk.set_column(
                    chunk.column_names.index("client_status"), "client_status", _STATUS_NAMES.take(status)
                )
                .append_column("effects", pa.array(counted_effects, pa.int64()))
                .append_column("verdict", _VERDICT_NAMES.take(codes))
                .append_column("vanished_after", texts(lost_after, np.flatnonzero(named)))
            )
            cause = np.full(len(codes), "", dtype=object)
            findings = np.flatnonzero(codes != EXACTLY_ONCE_CODE)
            if len(findings):
                rows_found = judged_chunk.select(list(CAUSE_READS)).take(findings)
                cause[findings] = causes(
                    rows_found,
                    gone.vanished[findings],
                    (across >= 0)[findings],
                    cleared[findings],
                    held.cause[findings],
                )
            judged_chunk = judged_chunk.append_column("cause", texts(cause, findings))
            # Seen by a read and gone since; not those lost across a restart (never seen stored), whose
            # vanished_after names the restart too.
            if tally.emptied is not None:
                _after_emptied(tally, tally.emptied.fault.t, chunk, status, counted_effects)
            tally.vanished += int(gone.vanished.sum())
            tally.blamed.update(int(f) for f in gone.fault[gone.vanished])
            tally.blamed.update(int(f) for f in across[across >= 0])
            tally.held(held.file, held_lost)
            tally.add(judged_chunk)
            judged.write(judged_chunk)
            if sink is not None:
                sink(judged_chunk)
    finally:
        judged.close_writer()
    examples: list[str] = []
    if matched == effects.total:
        foreign = 0
    else:
        foreign, examples = effects.foreign()
    counted = EffectCounts(total=effects.total, foreign=foreign, foreign_examples=examples)
    unreadable = [
        UnreadableStore(
            u.path,
            u.format,
            u.error,
            tally.unreadable_held[i],
            tally.unreadable_lost[i],
            fold.pod_faults[fault].label() if fault is not None else "",
        )
        for i, (u, fault) in enumerate(zip(effects.unreadable, tore, strict=True))
    ]
    facts = run_facts(fold.run, scenario)
    summary = summarize(fold, tally, counted, facts, run_dir, unreadable)
    fixes = partial(fix_for, keyed=facts.keyed)
    found = classes(tally.causes, tally.firsts)
    told = sorted({i for verdict, _, _, first in found if verdict in TOLD for i in first})
    stories = tell(tally.told_rows(), told, history, fold.checkpoints, fold.pod_faults, fixes)
    summary = dataclasses.replace(
        summary,
        classes=[
            FindingClass(
                verdict, cause, n, fixes(verdict, cause), [stories[i] for i in first if i in stories]
            )
            for verdict, cause, n, first in found
        ],
        evidence=evidence(run_dir, fold.pod_faults, sorted(tally.blamed)),
        control=compare_control(run_dir, summary.verdicts, summary.intents.started),
    )
    summary = dataclasses.replace(summary, gate=evaluate_gate(scenario.gate, summary))
    return AuditResult(
        run_dir=run_dir,
        scenario=scenario,
        judged=judged,
        summary=summary,
        keyed=facts.keyed,
        pod_events=fold.pod_events,
        pod_faults=fold.pod_faults,
        checkpoints=fold.checkpoints,
    )


def audit_run(
    run_dir: Path,
    sink: Callable[[pa.Table], None] | None = None,
    begun: Begun | None = None,
    *,
    keep_rows: bool = True,
) -> AuditResult:
    """Audit a run directory, complete or partial.

    The history is folded by :mod:`harness.audit.columnar` (DuckDB, bounded
    memory) unless it declines the file (damaged, torn, unusual), when the
    Python fold reads it and names what is wrong; the effect source is read
    meanwhile, on another thread, into an :class:`EffectTable` (``begun``: the
    parse and that read already started, see :mod:`harness.audit.begin`). ``sink`` is given each
    judged chunk as it is judged (see :func:`judge`); without ``keep_rows`` the result
    holds only the columns report.html plots (``intents`` and ``story_of`` then fail).
    """
    with no_cycle_collection():
        return _audit(run_dir, sink, begun if begun is not None else begin(run_dir), keep_rows)


def _audit(
    run_dir: Path, sink: Callable[[pa.Table], None] | None, begun: Begun, keep_rows: bool
) -> AuditResult:
    scenario = begun.scenario
    history = run_dir / rundir.HISTORY
    rows: IntentChunks | None = None
    try:
        if not has_events(history):
            raise HistoryError(
                f"{history}: it holds no event (it is empty, or one line cut short): the run recorded "
                "nothing, or the file was written over: nothing to judge, so no verdict (run it again)"
            )
        folded = fold_columnar(history, begun.history) if begun.history is not None else None
        if folded is None:
            fold = fold_history(read_batches(history), str(history))
            rows = FrameChunks(fold.intents)
        else:
            fold, rows = folded
    except BaseException:
        begun.discard()
        raise
    try:
        try:
            table = begun.effects.result()
        except AuditError as exc:
            if fold.collect_error is not None:
                raise AuditError(f"the final read of effects failed: {fold.collect_error}") from None
            ended = fold.ended or {}
            if ended.get("status") == "failed":
                raise AuditError(
                    f"this run failed before it measured anything ({ended.get('reason')}); {exc.message}"
                ) from None
            raise
        try:
            return judge(fold, rows, table, scenario, run_dir, lambda: read_batches(history), sink, keep_rows)
        finally:
            table.close()
    finally:
        if isinstance(rows, IntentRows):
            rows.close()


def story_of(result: AuditResult, intent: int) -> Story:
    """The story of any started intent of an audited run (its history read again, up to its end)."""
    return stories_of(result, [intent])[intent]


def stories_of(result: AuditResult, intents: Sequence[int]) -> dict[int, Story]:
    """The stories of started intents of an audited run, from one more read of its history."""
    rows = result.judged.rows_of(list(intents))
    if rows.num_rows < len(set(intents)):
        told = set(rows.column("intent").to_pylist())
        missing = next(i for i in intents if i not in told)
        raise UsageError(f"intent {missing} never started in {result.run_dir}")
    history = result.run_dir / rundir.HISTORY
    fixes = partial(fix_for, keyed=result.keyed)
    return tell(
        rows, list(intents), lambda: read_batches(history), result.checkpoints, result.pod_faults, fixes
    )
