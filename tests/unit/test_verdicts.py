"""Verdict rules, one case per row of the table in harness.audit.verdicts, and the vector form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audit.verdicts import ClientStatus, judge, judge_all
from harness.history import Verdict

S = ClientStatus


@pytest.mark.parametrize(
    ("status", "effects", "verdict"),
    [
        (S.OK, 1, Verdict.EXACTLY_ONCE),
        (S.OK, 2, Verdict.DUPLICATE),
        (S.OK, 5, Verdict.DUPLICATE),
        (S.OK, 0, Verdict.LOST),
        (S.GAVE_UP, 0, Verdict.UNFINISHED),
        (S.GAVE_UP, 1, Verdict.APPLIED_AFTER_GIVING_UP),
        (S.GAVE_UP, 2, Verdict.DUPLICATE),
        (S.REJECTED, 0, Verdict.REJECTED),
        (S.REJECTED, 1, Verdict.APPLIED_DESPITE_ERROR),
        (S.REJECTED, 3, Verdict.DUPLICATE),
        (S.IN_PROGRESS, 0, Verdict.INCOMPLETE),
        (S.IN_PROGRESS, 1, Verdict.INCOMPLETE),
        (S.IN_PROGRESS, 2, Verdict.DUPLICATE),
        (S.NOT_STARTED, 0, None),
    ],
)
def test_judge(status: ClientStatus, effects: int, verdict: Verdict | None) -> None:
    assert judge(status, effects) == verdict


@given(st.lists(st.tuples(st.sampled_from(list(ClientStatus)), st.integers(0, 4)), min_size=1, max_size=200))
def test_vector_form_agrees_with_scalar_rules(rows: list[tuple[ClientStatus, int]]) -> None:
    status = np.array([int(s) for s, _ in rows], dtype=np.int8)
    effects = np.array([e for _, e in rows], dtype=np.int64)
    expected = [None if (v := judge(s, e)) is None else v.value for s, e in rows]
    assert list(judge_all(status, effects)) == expected
