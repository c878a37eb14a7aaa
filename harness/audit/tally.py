"""What the summary, the finding classes and the stories need of the judged intents, added up chunk by chunk.

The judged per-intent table of a long run does not fit in memory, and need not:
the summary reads counts (verdicts, outcomes, attempts, causes, fault kinds by
verdict, replicas), the finding classes their first few intents, and the
stories a few rows. :class:`Tally` keeps exactly those, adding each judged
chunk (a slice of the table, in intent order) as it comes, so its size is set
by the kinds of findings, not by the run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.emptied import Emptied
from harness.audit.stories import PER_CLASS, TOLD
from harness.history import Outcome, Verdict

_EXACTLY_ONCE = Verdict.EXACTLY_ONCE.value
_DUPLICATE = Verdict.DUPLICATE.value


@dataclass
class ReplicaTally:
    """One replica's intents (by each intent's first attempt)."""

    intents: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    moved: int = 0
    """Intents whose retries went to another replica."""
    moved_duplicates: int = 0


@dataclass
class Tally:
    """Counts over every judged intent, and the few rows the stories are told from."""

    started: int = 0
    ended: int = 0
    attempts: int = 0
    attempts_hit: int = 0
    vanished: int = 0
    """Intents a checkpoint read saw stored (more of than the final count) and later gone: the auditor's
    count, from the reads (a loss across a restart, never seen stored, is not one)."""
    verdicts: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    causes: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(verdict, cause) -> intents, for every verdict but exactly once."""
    firsts: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """(verdict, cause) -> its first ``PER_CLASS`` intents by index."""
    fault_cells: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(``faults`` cell, verdict) -> intents, for intents some fault hit."""
    replicas: dict[str, ReplicaTally] | None = None
    """Pod -> its tally, in runs with several replicas (None in runs without)."""
    told: list[pa.Table] = field(default_factory=list)
    """Rows of intents that may get a story (the firsts of a told class)."""
    blamed: set[int] = field(default_factory=set)
    """Indices (in the fold's pod_faults) of the pod faults vanished effects are blamed on."""
    emptied: Emptied | None = None
    """The pod fault after which the store read empty or unreadable, if a read showed one."""
    acked_after: int = 0
    """Intents acknowledged after that fault."""
    stored_after: int = 0
    """Of those, the ones found stored at the end."""
    unreadable_held: Counter[int] = field(default_factory=Counter)
    """Per file of the store that does not parse (its index): the intents whose effects it held."""
    unreadable_lost: Counter[int] = field(default_factory=Counter)
    """Of those, the intents acknowledged and now lost with it."""

    def held(self, holder: npt.NDArray[np.int64], lost: npt.NDArray[np.bool_]) -> None:
        """Add a chunk's intents held by unreadable files (``holder``: the file's index, -1 for none) and
        which of them were acknowledged and are lost."""
        for counter, rows in ((self.unreadable_held, holder >= 0), (self.unreadable_lost, lost)):
            files, n = np.unique(holder[rows], return_counts=True)
            counter.update(dict(zip(files.tolist(), n.tolist(), strict=True)))

    def add(self, chunk: pa.Table) -> None:
        """Add a judged chunk (columns as in intents.csv, with ``client_status`` as names).

        Counted and grouped in Arrow: only the rows stories are told of become Python
        values (in pairs of audits of a million intents, grouping in pandas cost 0.06 s
        more CPU).
        """
        n = chunk.num_rows
        if not n:
            return
        self.started += n
        self.ended += n - _matching(chunk, "client_status", "in_progress")
        self.attempts += _total(chunk, "attempts")
        self.attempts_hit += _total(chunk, "attempts_hit_by_pod_fault")
        for count in pc.value_counts(chunk.column("verdict")).to_pylist():
            self.verdicts[str(count["values"])] += int(count["counts"])
        for o in Outcome:
            self.outcomes[o] += _total(chunk, f"n_{o.value}")
        findings = pc.not_equal(chunk.column("verdict"), _EXACTLY_ONCE)
        if pc.any(findings).as_py():
            self._findings(chunk.filter(findings))
        hit = pc.not_equal(chunk.column("faults"), "")
        if pc.any(hit).as_py():
            cells = chunk.filter(hit).select(["faults", "verdict"])
            for cell, verdict, k in _groups(cells, ["faults", "verdict"], [([], "count_all")]):
                self.fault_cells[(str(cell), str(verdict))] += int(k)
        if "first_pod" in chunk.column_names:
            self._replicas(chunk.select(["first_pod", "pods", "verdict"]))

    def _findings(self, rows: pa.Table) -> None:
        """The rows of a chunk whose verdict is not exactly once: their classes, and the firsts of each."""
        keep: list[int] = []
        for verdict, cause, n in _groups(rows, ["verdict", "cause"], [([], "count_all")]):
            key = (str(verdict), str(cause))
            self.causes[key] += int(n)
            first = self.firsts.setdefault(key, [])
            room = PER_CLASS - len(first)
            if room > 0:
                mine = pc.and_(
                    pc.equal(rows.column("verdict"), verdict), pc.equal(rows.column("cause"), cause)
                )
                theirs = rows.column("intent").filter(mine)
                taken = sorted(theirs.take(pc.bottom_k_unstable(theirs, room)).to_pylist())
                first.extend(taken)
                if key[0] in TOLD:
                    keep.extend(taken)
        if keep:
            self.told.append(rows.filter(pc.is_in(rows.column("intent"), pa.array(keep, pa.int64()))))

    def _replicas(self, chunk: pa.Table) -> None:
        replicas = self.replicas if self.replicas is not None else {}
        self.replicas = replicas
        sent = chunk.filter(pc.not_equal(chunk.column("first_pod"), ""))
        if not sent.num_rows:
            return
        moved = pc.match_substring(sent.column("pods"), ";")
        sent = sent.append_column("moved", moved).append_column(
            "moved_duplicate", pc.and_(moved, pc.equal(sent.column("verdict"), _DUPLICATE))
        )
        sums = [([], "count_all"), ("moved", "sum"), ("moved_duplicate", "sum")]
        for pod, verdict, n, n_moved, n_moved_duplicate in _groups(sent, ["first_pod", "verdict"], sums):
            mine = replicas.setdefault(str(pod), ReplicaTally())
            mine.intents += int(n)
            mine.verdicts[str(verdict)] += int(n)
            mine.moved += int(n_moved or 0)
            mine.moved_duplicates += int(n_moved_duplicate or 0)

    def told_rows(self) -> pa.Table:
        """The rows of the intents the stories are told of (a column all null in one chunk is typed
        null there: the types are unified, as JudgedIntents does)."""
        if not self.told:
            return pa.table({"intent": pa.array([], pa.int64())})
        return pa.concat_tables(self.told, promote_options="permissive")


def _groups(table: pa.Table, keys: list[str], aggregates: list[tuple[Any, str]]) -> list[tuple[Any, ...]]:
    """Each group's keys, then its aggregates; groups in the order they first appear (as Arrow groups on
    one thread)."""
    grouped = table.group_by(keys, use_threads=False).aggregate(aggregates)
    results = [name for name in grouped.column_names if name not in keys]
    return list(zip(*(grouped.column(name).to_pylist() for name in [*keys, *results]), strict=True))


def _matching(chunk: pa.Table, column: str, value: str) -> int:
    return int(pc.sum(pc.equal(chunk.column(column), value)).as_py() or 0)


def _total(chunk: pa.Table, column: str) -> int:
    return int(pc.sum(chunk.column(column)).as_py() or 0)
