"""Verdicts: the auditor's judgement of each intent (its cause is ``harness.audit.causes``).

The rules are a pure function of three facts per intent: the client's final
status (from the history), whether its final ok reply reads as a failure
(:func:`harness.replies.reads_as_failure`), and the number of effects (from the
store).

=========================  =================  ==========  ===============================
verdict                    client saw         effects     meaning
=========================  =================  ==========  ===============================
exactly_once               ok                 1           correct
duplicate                  anything           >= 2        the side effect happened twice
lost                       ok                 0           success reported, nothing done
unfinished                 gave up            0           retries ran out; nothing done
applied_after_giving_up    gave up            1           done, but the client never knew
rejected                   final error        0           a clean, definitive failure
applied_despite_error      final error, or    1           the server said no, and did it
                           an ok reading as
                           a failure
incomplete                 (no end recorded)  0 or 1      the run stopped mid-intent
=========================  =================  ==========  ===============================
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

from harness.history import IntentStatus, Verdict


class ClientStatus(enum.IntEnum):
    """The client's final status per intent, as stored in the audit's arrays."""

    NOT_STARTED = 0
    IN_PROGRESS = 1
    OK = 2
    GAVE_UP = 3
    REJECTED = 4


STATUS_BY_NAME: dict[str, ClientStatus] = {s.value: ClientStatus[s.name] for s in IntentStatus}
"""An ``intent_ended`` status (an IntentStatus) as the audit stores it."""
STATUS_NAMES = np.array([s.name.lower() for s in ClientStatus], dtype=object)


def judge(status: ClientStatus, effects: int, reads_as_failure: bool = False) -> Verdict | None:
    """The verdict for one intent; None for an intent that was never started. An ok whose reply says the
    call failed ("Database error: UNIQUE constraint failed", isError false) is what a model reads as a
    failure: with its effect made, the caller believes it failed, as after an error."""
    if status is ClientStatus.NOT_STARTED:
        return None
    if effects >= 2:
        return Verdict.DUPLICATE
    if status is ClientStatus.IN_PROGRESS:
        return Verdict.INCOMPLETE
    applied = effects == 1
    if status is ClientStatus.OK:
        if applied:
            return Verdict.APPLIED_DESPITE_ERROR if reads_as_failure else Verdict.EXACTLY_ONCE
        return Verdict.LOST
    if status is ClientStatus.GAVE_UP:
        return Verdict.APPLIED_AFTER_GIVING_UP if applied else Verdict.UNFINISHED
    return Verdict.APPLIED_DESPITE_ERROR if applied else Verdict.REJECTED


VERDICT_ORDER: tuple[Verdict | None, ...] = (
    None,
    Verdict.DUPLICATE,
    Verdict.INCOMPLETE,
    Verdict.EXACTLY_ONCE,
    Verdict.LOST,
    Verdict.APPLIED_AFTER_GIVING_UP,
    Verdict.UNFINISHED,
    Verdict.APPLIED_DESPITE_ERROR,
    Verdict.REJECTED,
)
"""The verdicts by the code :func:`verdict_codes` gives them (None: never started)."""
EXACTLY_ONCE_CODE = VERDICT_ORDER.index(Verdict.EXACTLY_ONCE)


APPLIED_DESPITE_ERROR_CODE = VERDICT_ORDER.index(Verdict.APPLIED_DESPITE_ERROR)


def verdict_codes(
    status: npt.NDArray[np.int8],
    effects: npt.NDArray[np.int64],
    reads_as_failure: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.int8]:
    """:func:`judge` over whole columns at once, as indices into ``VERDICT_ORDER`` (no Python object
    per intent: a million in milliseconds)."""
    applied = effects == 1
    conditions = [
        status == ClientStatus.NOT_STARTED,
        effects >= 2,
        status == ClientStatus.IN_PROGRESS,
        (status == ClientStatus.OK) & applied,
        status == ClientStatus.OK,
        (status == ClientStatus.GAVE_UP) & applied,
        status == ClientStatus.GAVE_UP,
        applied,
    ]
    codes: npt.NDArray[np.int8] = np.select(
        conditions, np.arange(len(conditions), dtype=np.int8), default=np.int8(len(conditions))
    ).astype(np.int8)
    if reads_as_failure is not None and reads_as_failure.any():
        codes[(codes == EXACTLY_ONCE_CODE) & reads_as_failure] = APPLIED_DESPITE_ERROR_CODE
    return codes
