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

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.audit.accumulators import frame_of
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
    told: list[pd.DataFrame] = field(default_factory=list)
    """Rows of intents that may get a story (the firsts of a told class)."""
    blamed: set[int] = field(default_factory=set)
    """Indices (in the fold's pod_faults) of the pod faults vanished effects are blamed on."""

    def add(self, chunk: pa.Table) -> None:
        """Add a judged chunk (columns as in intents.csv, with ``client_status`` as names).

        Counted in Arrow over the whole chunk; only the rows with a finding, or a
        fault, become pandas rows (a handful in a good run).
        """
        n = chunk.num_rows
        if not n:
            return
        self.started += n
        self.ended += n - _matching(chunk, "client_status", "in_progress")
        self.attempts += _total(chunk, "attempts")
        self.attempts_hit += _total(chunk, "attempts_hit_by_pod_fault")
        self.vanished += n - _matching(chunk, "vanished_after", "")
        for count in pc.value_counts(chunk.column("verdict")).to_pylist():
            self.verdicts[str(count["values"])] += int(count["counts"])
        for o in Outcome:
            self.outcomes[o] += _total(chunk, f"n_{o.value}")
        findings = pc.not_equal(chunk.column("verdict"), _EXACTLY_ONCE)
        if pc.any(findings).as_py():
            self._findings(chunk.filter(findings))
        hit = pc.not_equal(chunk.column("faults"), "")
        if pc.any(hit).as_py():
            cells = chunk.filter(hit).select(["faults", "verdict"]).to_pandas()
            counted = cells.groupby(["faults", "verdict"], sort=False).size()
            for (cell, verdict), k in zip(counted.index.tolist(), counted.to_numpy().tolist(), strict=True):
                self.fault_cells[(str(cell), str(verdict))] += int(k)
        if "first_pod" in chunk.column_names:
            self._replicas(chunk.select(["first_pod", "pods", "verdict"]).to_pandas())

    def _findings(self, rows: pa.Table) -> None:
        """The rows of a chunk whose verdict is not exactly once: their classes, and the firsts of each
        (only those become pandas rows whole)."""
        keep: list[int] = []
        found = rows.select(["intent", "verdict", "cause"]).to_pandas()
        for (verdict, cause), group in found.groupby(["verdict", "cause"], sort=False)["intent"]:
            key = (str(verdict), str(cause))
            self.causes[key] += len(group)
            first = self.firsts.setdefault(key, [])
            room = PER_CLASS - len(first)
            if room > 0:
                taken = sorted(int(i) for i in group.nsmallest(room))
                first.extend(taken)
                if key[0] in TOLD:
                    keep.extend(taken)
        if keep:
            self.told.append(
                frame_of(rows.filter(pc.is_in(rows.column("intent"), pa.array(keep, pa.int64()))))
            )

    def _replicas(self, chunk: pd.DataFrame) -> None:
        replicas = self.replicas if self.replicas is not None else {}
        self.replicas = replicas
        sent = chunk[chunk["first_pod"] != ""]
        if not len(sent):
            return
        moved = sent["pods"].str.contains(";", regex=False)
        dup = sent["verdict"] == _DUPLICATE
        for pod, group in sent.groupby("first_pod", sort=False):
            mine = replicas.setdefault(str(pod), ReplicaTally())
            mine.intents += len(group)
            mine.verdicts.update({str(v): int(n) for v, n in group["verdict"].value_counts().items()})
            rows = sent["first_pod"] == pod
            mine.moved += int((rows & moved).sum())
            mine.moved_duplicates += int((rows & moved & dup).sum())

    def told_rows(self) -> pd.DataFrame:
        """The rows of the intents the stories are told of."""
        return pd.concat(self.told, ignore_index=True) if self.told else pd.DataFrame({"intent": []})


def _matching(chunk: pa.Table, column: str, value: str) -> int:
    return int(pc.sum(pc.equal(chunk.column(column), value)).as_py() or 0)


def _total(chunk: pa.Table, column: str) -> int:
    return int(pc.sum(chunk.column(column)).as_py() or 0)
