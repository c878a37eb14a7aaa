"""The tally of judged chunks: classes counted across chunks, the first intents of each kept, and
their rows whole even when the chunks' column types differ."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from harness.audit.stories import PER_CLASS
from harness.audit.tally import Tally
from harness.history import Outcome


def chunk(rows: list[tuple[int, str, str]], code: pa.Array | None = None) -> pa.Table:
    """Judged rows (intent, verdict, cause), with one attempt each; ``code`` typed as given."""
    n = len(rows)
    columns: dict[str, Any] = {
        "intent": pa.array([r[0] for r in rows], pa.int64()),
        "verdict": [r[1] for r in rows],
        "cause": [r[2] for r in rows],
        "client_status": ["ok"] * n,
        "vanished_after": [""] * n,
        "faults": ["kill" if r[1] != "exactly_once" else "" for r in rows],
        "attempts": pa.array([1] * n, pa.int32()),
        "attempts_hit_by_pod_fault": pa.array([0] * n, pa.int32()),
        "code": code if code is not None else pa.array([""] * n),
    }
    columns.update({f"n_{o.value}": pa.array([0] * n, pa.int32()) for o in Outcome})
    return pa.table(columns)


def test_classes_are_counted_across_chunks_and_their_first_intents_kept() -> None:
    tally = Tally()
    first = [(i, "duplicate", "kill") for i in range(0, 8, 2)] + [(1, "exactly_once", "")]
    second = [(i, "duplicate", "kill") for i in range(8, 32, 2)] + [(9, "lost", "no_fault")]
    tally.add(chunk(first, code=pa.nulls(len(first))))  # no code in this chunk: a null column
    tally.add(chunk(second))
    assert tally.causes == {("duplicate", "kill"): 16, ("lost", "no_fault"): 1}
    assert tally.firsts[("duplicate", "kill")] == [0, 2, 4, 6, 8][:PER_CLASS]
    assert tally.firsts[("lost", "no_fault")] == [9]
    assert tally.fault_cells == {("kill", "duplicate"): 16, ("kill", "lost"): 1}
    rows = tally.told_rows()
    assert sorted(rows.column("intent").to_pylist()) == [0, 2, 4, 6, 8, 9]
    assert rows.schema.field("code").type == pa.string()
