"""Verdict rules, one case per row of the table in harness.audit.verdicts, and the vector form; the cause
of every finding (harness.audit.causes) and its fix (harness.audit.fixes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.audit.causes import causes
from harness.audit.fixes import fix_for
from harness.audit.verdicts import VERDICT_ORDER, ClientStatus, judge, verdict_codes
from harness.history import FaultKind, Verdict

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


@pytest.mark.parametrize(
    ("status", "effects", "verdict"),
    [
        # An ok whose text says it failed ("Database error: UNIQUE constraint failed"): done, and the
        # caller believes it failed.
        (S.OK, 1, Verdict.APPLIED_DESPITE_ERROR),
        (S.OK, 0, Verdict.LOST),  # nothing done: lost (its cause is error_as_success)
        (S.OK, 2, Verdict.DUPLICATE),
    ],
)
def test_an_ok_reply_that_reads_as_a_failure(status: ClientStatus, effects: int, verdict: Verdict) -> None:
    assert judge(status, effects, reads_as_failure=True) == verdict


@given(
    st.lists(
        st.tuples(st.sampled_from(list(ClientStatus)), st.integers(0, 4), st.booleans()),
        min_size=1,
        max_size=200,
    )
)
def test_vector_form_agrees_with_scalar_rules(rows: list[tuple[ClientStatus, int, bool]]) -> None:
    status = np.array([int(s) for s, _, _ in rows], dtype=np.int8)
    effects = np.array([e for _, e, _ in rows], dtype=np.int64)
    failing = np.array([f for _, _, f in rows], dtype=bool)
    expected = [judge(s, e, f) for s, e, f in rows]
    assert [VERDICT_ORDER[c] for c in verdict_codes(status, effects, failing)] == expected


def table(*rows: tuple[str, str, int, int, int, bool]) -> pa.Table:
    """Judged rows: (verdict, faults, timeouts, transport errors, tool errors, a failure-like ok reply)."""
    names = ["verdict", "faults", "n_timeout", "n_transport_error", "n_tool_error", "reply_reads_as_failure"]
    return pa.table({name: [row[k] for row in rows] for k, name in enumerate(names)})


@pytest.mark.parametrize(
    ("row", "vanished", "cause"),
    [
        (("duplicate", "stall;kill", 1, 1, 0, False), False, "kill"),  # blame order: kill before stall
        (("duplicate", "", 1, 1, 0, False), False, "timeout"),
        (("duplicate", "", 0, 2, 1, False), False, "transport_error"),
        (("duplicate", "", 0, 0, 1, False), False, "retryable_tool_error"),
        (("duplicate", "", 0, 0, 0, False), False, "no_fault"),
        (("lost", "kill", 0, 1, 0, True), True, "vanished"),
        (("lost", "kill", 0, 1, 0, True), False, "error_as_success"),
        (("lost", "crash;pause", 0, 1, 0, False), False, "crash"),
        (("lost", "", 1, 0, 0, False), False, "no_fault"),  # a timeout is no fault: no retry loses a write
        (("applied_despite_error", "", 0, 0, 2, False), False, "no_fault"),
        (("applied_despite_error", "sever_response", 0, 1, 1, False), False, "sever_response"),
        (("applied_despite_error", "", 0, 0, 0, True), False, "error_as_success"),
        (("applied_despite_error", "kill", 0, 1, 0, True), False, "kill"),  # the retry after it hit the key
        (("unfinished", "", 3, 0, 0, False), False, "timeout"),
        (("unfinished", "", 0, 0, 0, False), False, "gave_up"),
        (("applied_after_giving_up", "kill", 0, 9, 0, False), False, "kill"),
        (("rejected", "", 0, 0, 1, False), False, "refused"),
        (("rejected", "pause", 0, 0, 1, False), False, "pause"),
        (("incomplete", "kill", 0, 1, 0, False), False, "run_ended"),
        (("exactly_once", "kill", 0, 1, 0, True), True, ""),
    ],
)
def test_every_finding_has_a_cause(
    row: tuple[str, str, int, int, int, bool], vanished: bool, cause: str
) -> None:
    assert list(causes(table(row), np.array([vanished]))) == [cause]


def test_causes_over_a_column_match_row_by_row() -> None:
    rows = [
        ("exactly_once", "", 0, 0, 0, False),
        ("lost", "", 0, 0, 0, False),
        ("duplicate", "kill", 0, 1, 0, False),
        ("exactly_once", "kill", 0, 1, 0, False),
        ("rejected", "", 0, 0, 1, False),
        ("lost", "", 0, 0, 0, True),
    ]
    vanished = np.array([False, True, False, False, False, False])
    alone = [causes(table(r), vanished[k : k + 1])[0] for k, r in enumerate(rows)]
    assert (
        list(causes(table(*rows), vanished))
        == alone
        == [
            "",
            "vanished",
            "kill",
            "",
            "refused",
            "error_as_success",
        ]
    )


def test_every_cause_of_a_finding_has_a_meaning_and_a_fix() -> None:
    by_verdict = {
        Verdict.DUPLICATE: [*FaultKind, "timeout", "transport_error", "retryable_tool_error", "no_fault"],
        Verdict.LOST: [*FaultKind, "vanished", "error_as_success", "no_fault"],
        Verdict.APPLIED_DESPITE_ERROR: [*FaultKind, "no_fault"],
        Verdict.UNFINISHED: [*FaultKind, "timeout", "gave_up"],
        Verdict.APPLIED_AFTER_GIVING_UP: [*FaultKind, "gave_up"],
        Verdict.REJECTED: [*FaultKind, "refused"],
        Verdict.INCOMPLETE: ["run_ended"],
    }
    for verdict, reasons in by_verdict.items():
        for cause in reasons:
            fix = fix_for(verdict, str(cause))
            assert fix is not None, (verdict, cause)
            assert fix.meaning
            assert fix.fix
    assert fix_for(Verdict.EXACTLY_ONCE, "") is None


def test_a_duplicate_s_fix_depends_on_the_key_and_the_fault() -> None:
    def fix(cause: str, keyed: bool = True) -> str:
        found = fix_for(Verdict.DUPLICATE, cause, keyed=keyed)
        assert found is not None
        return found.fix

    assert "take an idempotency key" in fix("kill", keyed=False)
    assert "one transaction" in fix("kill")
    assert "one transaction" in fix("crash")
    assert "409" in fix("sever_mid_stream")
    assert "409" in fix("stall")
    lost = fix_for(Verdict.LOST, "vanished")
    assert lost is not None
    assert "fsync it, rename it, fsync the directory" in lost.fix
