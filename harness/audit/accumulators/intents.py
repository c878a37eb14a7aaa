"""Every intent's row and the attempts in flight: the per-intent accumulator, and its frame's types."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from harness.audit.accumulators.base import MAX_UNPLANNED_INTENTS, Accumulator, Event, reads
from harness.errors import HistoryError
from harness.history import OUTCOMES, EventType


def _millis(seconds: list[float]) -> pd.api.extensions.ExtensionArray:
    return pd.array(np.round(np.array(seconds, dtype=np.float64) * 1000), dtype="Int64")


NULLABLE_INTS = ("first_attempt_ms", "last_end_ms")
"""Integer columns of the intents that may be null: pandas' Int64 in :meth:`Intents.frame`."""


def frame_of(table: pa.Table) -> pd.DataFrame:
    """An Arrow table of intents (judged or not) as a pandas frame with :meth:`Intents.frame`'s types."""
    frame: pd.DataFrame = table.to_pandas()
    for name in NULLABLE_INTS:
        if name in frame.columns:
            frame[name] = frame[name].astype("Int64")  # from float64 with NaN where null
    return frame


class Intents(Accumulator):
    """Every intent's row and every attempt in flight: fills ``Fold.intents`` and ``Fold.open_attempts``.

    Per-intent counters are plain lists indexed by intent (indexing a list is far
    cheaper than a numpy scalar), sized to the run's plan from ``run_started``
    and grown when an older history has none. The fold updates them inline for
    the four per-intent events; other accumulators write a row only through
    :meth:`hit` and :meth:`add_fault`, and find an attempt's intent through
    :meth:`intent_of`.

    All the audit's per-intent and per-attempt state is here, so an audit whose
    memory is bounded by the intents in flight changes this class: a row is
    final once its intent has ended and no attempt of it is in flight, except
    for two writers that come later. A crash is blamed on attempts that ended up
    to ``CRASH_WINDOW_S`` before its ``pod_exited``, and ``balancer_retry`` is
    recorded after the run (read from the balancer's log).
    """

    def __init__(self) -> None:
        self.size = 0
        self.planned: object = None
        """``intents`` of ``run_started``: indices at or past it are a damaged history."""
        self.markers: list[str | None] = []
        self.keys: list[str | None] = []
        self.status: list[int] = []
        self.attempts: list[int] = []
        self.outcomes: dict[str, list[int]] = {name: [] for name in OUTCOMES}
        self.hits: list[int] = []
        self.first_t: list[float] = []
        self.last_t: list[float] = []
        self.faults: dict[int, set[str]] = {}
        """Sparse: intent -> kinds of the faults that hit its attempts (most intents have none)."""
        self.pods: dict[int, list[str]] = {}
        """With replicas: intent -> the pods its attempts went to, in order, each once."""
        self.replies: list[str] = []
        """Each intent's last ok reply, excerpted (``reply`` of attempt_ended), when the history has it."""
        self.codes: dict[int, str] = {}
        """Sparse: intent -> the code of its last failed attempt that carried one."""
        self.traces: dict[int, str] = {}
        """Intent -> its trace id (``trace_id`` of its first attempt), in runs with ``client.trace``."""
        self.failure_replies: set[int] = set()
        """Intents with an ok reply whose text reads as a failure (``reads_as_failure``)."""
        self.pending: dict[int, tuple[int, int, float, str | None]] = {}
        """Request id -> (intent, disruptions seen at its start, start t, pod) of each attempt in
        flight. The disruptions are those of the attempt's pod when the history names it
        (replicas), else of all pods (see PodDisruptions)."""

    @reads(EventType.RUN_STARTED)
    def plan(self, ev: Event) -> None:
        self.planned = ev.get("intents")
        self.grow(int(ev.get("intents", 0)))

    def grow(self, n: int) -> None:
        if n <= self.size:
            return
        extra = n - self.size
        for column in (self.markers, self.keys):
            column.extend([None] * extra)
        self.replies.extend([""] * extra)
        for counts in (self.status, self.attempts, self.hits, *self.outcomes.values()):
            counts.extend([0] * extra)
        self.first_t.extend([math.nan] * extra)
        self.last_t.extend([math.nan] * extra)
        self.size = n

    def make_room(self, ev: Event) -> None:
        """Grow the columns for an intent index beyond them, or a HistoryError if no run had that intent."""
        i = ev["intent"]
        planned = self.planned
        limit = planned if type(planned) is int and planned > 0 else MAX_UNPLANNED_INTENTS
        if type(i) is not int or not 0 <= i < limit:
            raise HistoryError(
                f"intent {i!r:.40} is not one of the run's "
                f"{limit:,} intents (0 to {limit - 1:,}); the history is damaged"
            )
        self.grow(max(i + 1, min(self.size * 2, limit)))

    def intent_of(self, request_id: int) -> int | None:
        """The intent of the attempt in flight with this request id, if one is."""
        started = self.pending.get(request_id)
        return None if started is None else started[0]

    def hit(self, i: int, kinds: Iterable[str]) -> None:
        """One more attempt of intent ``i`` was broken by these pod faults."""
        self.hits[i] += 1
        self.faults.setdefault(i, set()).update(kinds)

    def add_fault(self, i: int, kind: str) -> None:
        """A fault that names its request hit an attempt of intent ``i`` (not counted as a pod hit)."""
        self.faults.setdefault(i, set()).add(kind)

    def _fault_column(self) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, kinds in self.faults.items():
            column[i] = ";".join(sorted(kinds))
        return column

    def _sparse_column(self, values: Mapping[int, str]) -> npt.NDArray[np.object_]:
        column = np.full(self.size, "", dtype=object)
        for i, value in values.items():
            column[i] = value
        return column

    def _flags(self, intents: Iterable[int]) -> npt.NDArray[np.bool_]:
        column = np.zeros(self.size, dtype=bool)
        column[list(intents)] = True
        return column

    def _pod_columns(self) -> dict[str, Any]:
        """``first_pod`` and ``pods`` (every replica an intent's attempts went to), with replicas only."""
        if not self.pods:
            return {}
        first = np.full(self.size, "", dtype=object)
        every = np.full(self.size, "", dtype=object)
        for i, pods in self.pods.items():
            first[i] = pods[0]
            every[i] = ";".join(pods)
        return {"first_pod": first, "pods": every}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "intent": np.arange(self.size, dtype=np.int64),
                "marker": self.markers,
                "key": self.keys,
                "client_status": np.array(self.status, dtype=np.int8),
                "attempts": np.array(self.attempts, dtype=np.int32),
                **{f"n_{name}": np.array(c, dtype=np.int32) for name, c in self.outcomes.items()},
                "attempts_hit_by_pod_fault": np.array(self.hits, dtype=np.int32),
                "faults": self._fault_column(),
                # Whole milliseconds since the run started (formatting floats is a third of a
                # million-row intents.csv); nullable, as an attempt may never have ended.
                "first_attempt_ms": _millis(self.first_t),
                "last_end_ms": _millis(self.last_t),
                # Kept as Python strings: an Arrow copy of a million replies would add their size
                # again to the audit's peak memory (the CSV writer converts them chunk by chunk).
                "code": pd.Series(self._sparse_column(self.codes), dtype=object),
                "reply": pd.Series(self.replies, dtype=object),
                "reply_reads_as_failure": self._flags(self.failure_replies),
                **self._pod_columns(),
                **({"trace_id": self._sparse_column(self.traces)} if self.traces else {}),
            }
        )
