"""The fold as accumulators yields what the single loop it replaced yielded, field for field.

``tests/unit/fold_before.py`` is a frozen copy of that loop (harness/audit/fold.py as it was
before the split), kept only for this comparison: on the benchmark's synthetic pod-kill
history and on seeded random histories that take every branch (replicas, graceful stops,
rollouts, pauses, crashes, stream faults, sessions, errors, partial runs), both folds must
give the same per-intent frame and the same counters. The fold has grown since (pod faults for
vanished effects, checkpoint reads, reply flags): what the old loop yielded must not change, and
what was added is tested in test_fold.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench import audit as bench_audit
from harness.audit.fold import Fold, fold_history
from harness.history import read_batches
from tests.unit import fold_before
from tests.unit.histories import random_history

OLD_FIELDS = [f.name for f in dataclasses.fields(fold_before.Fold)]


def plain(fold: Fold | fold_before.Fold) -> dict[str, Any]:
    """The old fold's fields but the frame, with the tallies and missed faults as tuples (their classes
    differ)."""
    fields = {name: getattr(fold, name) for name in OLD_FIELDS if name != "intents"}
    fields["errors"] = {key: dataclasses.astuple(tally) for key, tally in fold.errors.items()}
    fields["missed"] = [dataclasses.astuple(m) for m in fold.missed]
    return fields


def assert_same_fold(events: list[list[Any]]) -> Fold:
    before, after = fold_before.fold_history(events), fold_history(events)
    assert {f.name for f in dataclasses.fields(after)} >= set(OLD_FIELDS)
    old_columns = list(before.intents.columns)
    assert set(old_columns) <= set(after.intents.columns)
    pd.testing.assert_frame_equal(after.intents[old_columns], before.intents, check_exact=True)
    assert plain(after) == plain(before)
    return after


def test_the_same_fold_of_the_benchmark_history(tmp_path: Path) -> None:
    bench_audit.synthesize(tmp_path, 4_000)
    after = assert_same_fold(list(read_batches(tmp_path / "history.jsonl")))
    assert after.intents["n_transport_error"].sum() > 0  # its shape: some intents retried


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("seed", range(25))
def test_the_same_fold_of_random_histories(seed: int, replicas: int) -> None:
    after = assert_same_fold([random_history(seed, replicas=replicas).events])
    assert len(after.intents) >= 120


def test_the_random_histories_take_the_fold_s_branches() -> None:
    """What the comparison above is worth: together the histories reach every concern."""
    folds = [fold_history([random_history(seed, replicas=r).events]) for seed in range(25) for r in (1, 3)]
    faults = {kind for f in folds for cell in f.intents["faults"] for kind in cell.split(";") if kind}
    assert faults >= {"kill", "rollout", "pause", "crash", "sever_response", "sever_mid_stream", "stall"}
    assert all(sum(f.sessions_lost.values()) for f in folds[:5])
    assert any(f.resumed[True] and f.resumed[False] for f in folds)
    assert any(f.missed for f in folds)
    assert any(f.collect_error for f in folds)
    assert any(f.ended is None for f in folds)
    assert any(len(f.intents) > 120 for f in folds)  # grown past an unplanned start
    assert any(f.open_attempts for f in folds) or any((f.intents["client_status"] == 1).any() for f in folds)
    assert any("pods" in f.intents.columns for f in folds)
    assert any(f.faults["balancer_retry"] for f in folds)
    assert any(len(f.errors) > 3 for f in folds)
