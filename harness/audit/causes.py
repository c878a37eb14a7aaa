"""A cause for every finding: why an intent took effect other than exactly once.

Every intent whose verdict is not ``exactly_once`` gets one cause, the first that
applies of its verdict's list below. A fault kind is the first in blame order
(:data:`harness.faultkinds.registry.BLAME`, each kind's rank) among the faults that hit
the intent's attempts; a retry reason says why the client sent it again.

========================  =========================================================
verdict                   cause, first that applies
========================  =========================================================
duplicate                 fault kind (a pod fault only if the read after its restart
                          did not contradict it); retry reason; ``no_fault``
lost                      the fault that tore the store (its effect was in a file that
                          does not parse: :mod:`harness.audit.torn`; ``no_fault``
                          when none came); ``vanished`` (seen by a checkpoint read,
                          lost across a restart); ``error_as_success`` (an ok reply that reads as
                          a failure); fault kind; ``lost_across_restart``
                          (acknowledged, then a pod fault, never seen stored, and no
                          read in between showed it absent); ``no_fault``
applied_despite_error     fault kind; ``error_as_success`` (its ok reply reads as a
                          failure); ``no_fault``
unfinished,               fault kind; retry reason; ``gave_up``
applied_after_giving_up
rejected                  fault kind; ``refused`` (the code is in its own column)
incomplete                ``run_ended`` (the run stopped mid-intent)
========================  =========================================================

``no_fault`` is a finding of its own: nothing the harness did touched the intent,
so the server loses (or repeats) writes by itself. For a lost intent it is said
only when shown (:func:`harness.audit.vanished.lost_across`): no pod fault came
after its acknowledgement, or a read after it and before the next fault did not
find it. Computed over whole columns,
and only over the rows that are not exactly once (a handful in a good run).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from harness.faultkinds.registry import BLAME, POD_KINDS
from harness.history import Verdict


class Cause(enum.StrEnum):
    """The causes that are not fault kinds."""

    TIMEOUT = "timeout"
    """No fault hit it; the client retried after an attempt timed out."""
    TRANSPORT_ERROR = "transport_error"
    """No fault hit it; the client retried after a connection broke."""
    RETRYABLE_TOOL_ERROR = "retryable_tool_error"
    """No fault hit it; the client retried a tool error that said it was retryable."""
    NO_FAULT = "no_fault"
    """Nothing the harness did touched the intent (shown, for a lost one): the server loses or repeats
    writes by itself. Compare with a control run (``run --control``)."""
    VANISHED = "vanished"
    """A checkpoint read saw its effect during the run, and it was gone after a later pod restart."""
    LOST_ACROSS_RESTART = "lost_across_restart"
    """Acknowledged before a pod fault, never seen stored, and no read before that fault showed the
    server had dropped it."""
    ERROR_AS_SUCCESS = "error_as_success"
    """Its ok reply reads as a failure ("Database error: no such table"): an error dressed as a success."""
    GAVE_UP = "gave_up"
    """No fault and no retry reason: the client ran out of attempts or time."""
    REFUSED = "refused"
    """The server refused it with an error it did not say was retryable (the code is in its own column)."""
    RUN_ENDED = "run_ended"
    """The run stopped while the intent was in flight."""


def first_fault(faults: str, *, pods: bool = True) -> str:
    """The first fault kind, in blame order, of a ``faults`` cell (``kill;stall``); empty for none.
    ``pods`` False: of the faults that are no pod fault (the evidence cleared those)."""
    if not faults:
        return ""
    present = set(faults.split(";"))
    if not pods:
        present -= POD_KINDS
    return next((kind.value for kind in BLAME if kind.value in present), "")


READS = ("verdict", "faults", "n_timeout", "n_transport_error", "n_tool_error", "reply_reads_as_failure")
"""The columns of a judged table :func:`causes` reads."""


def causes(
    table: pa.Table,
    vanished: npt.NDArray[np.bool_],
    across: npt.NDArray[np.bool_] | None = None,
    cleared: npt.NDArray[np.bool_] | None = None,
    torn: npt.NDArray[np.object_] | None = None,
) -> npt.NDArray[np.object_]:
    """The cause column of a judged table (``verdict``, ``faults``, the outcome counts, the flags);
    ``vanished``, ``across`` (lost across a restart), ``cleared`` (the pod faults during its attempts
    left no effect behind, by the read after their restart) and ``torn`` (the kind of the fault that tore
    the file its effect was in, ``no_fault`` for none, empty where it was in none) per row of the table."""
    result = np.full(table.num_rows, "", dtype=object)
    # Compared in Arrow; only the few rows with a finding become Python strings.
    found = pc.not_equal(table.column("verdict"), Verdict.EXACTLY_ONCE.value).fill_null(True)
    rows = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    if not len(rows):
        return result
    found_rows = table.take(rows)

    def column(name: str) -> npt.NDArray[Any]:
        return np.asarray(found_rows.column(name).to_numpy(zero_copy_only=False))

    verdict = column("verdict")
    cells = column("faults")
    firsts = {cell: first_fault(cell) for cell in set(cells)}
    fault = np.array([firsts[cell] for cell in cells], dtype=object)
    retry = np.select(
        [
            column("n_timeout") > 0,
            column("n_transport_error") > 0,
            column("n_tool_error") > 0,
        ],
        [Cause.TIMEOUT.value, Cause.TRANSPORT_ERROR.value, Cause.RETRYABLE_TOOL_ERROR.value],
        default="",
    ).astype(object)
    fault_or_retry = np.where(fault != "", fault, retry)
    duplicate_blame = fault_or_retry
    if cleared is not None and cleared[rows].any():
        # A duplicate the pod faults are cleared of is blamed on the next fault the evidence allows.
        without = {cell: first_fault(cell, pods=False) for cell in set(cells)}
        other = np.array([without[cell] for cell in cells], dtype=object)
        duplicate_blame = np.where(cleared[rows], np.where(other != "", other, retry), fault_or_retry)
    failure_reply = column("reply_reads_as_failure")

    def either(first: npt.NDArray[np.object_], otherwise: str | npt.NDArray[Any]) -> npt.NDArray[np.object_]:
        return np.where(first != "", first, otherwise)

    lost = np.where(
        vanished[rows],
        Cause.VANISHED.value,
        np.where(
            failure_reply,
            Cause.ERROR_AS_SUCCESS.value,
            either(
                fault,
                Cause.NO_FAULT
                if across is None
                else np.where(across[rows], Cause.LOST_ACROSS_RESTART.value, Cause.NO_FAULT.value),
            ),
        ),
    )
    if torn is not None:  # in a file that does not parse: the fault that tore it took it, whatever else
        lost = either(torn[rows], lost)
    by_verdict = {
        Verdict.DUPLICATE: either(duplicate_blame, Cause.NO_FAULT),
        Verdict.LOST: lost,
        Verdict.APPLIED_DESPITE_ERROR: either(
            fault, np.where(failure_reply, Cause.ERROR_AS_SUCCESS.value, Cause.NO_FAULT.value)
        ),
        Verdict.UNFINISHED: either(fault_or_retry, Cause.GAVE_UP),
        Verdict.APPLIED_AFTER_GIVING_UP: either(fault_or_retry, Cause.GAVE_UP),
        Verdict.REJECTED: either(fault, Cause.REFUSED),
        Verdict.INCOMPLETE: np.full(len(rows), Cause.RUN_ENDED.value, dtype=object),
    }
    chosen = np.full(len(rows), "", dtype=object)
    for name, values in by_verdict.items():
        mask = verdict == name.value
        chosen[mask] = values[mask]
    result[rows] = chosen
    return result
