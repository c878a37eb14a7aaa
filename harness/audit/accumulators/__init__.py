"""The fold's accumulators: one concern of the history each, composed into one pass by the fold.

As Jepsen composes checkers, each accumulator owns a few fields of
:class:`~harness.audit.fold.Fold` and reads only the events it needs, each named
by ``@reads`` on the method that handles it. They do not call each other, except where one concern is
defined by another's state: a pod fault hits an intent (``PodDisruptions``
writes into ``Intents``), a proxy fault is pinned on the attempt in flight
(``StreamFaults`` reads ``Intents``), and a lost session is blamed on the last
disruption (``Sessions`` reads ``PodDisruptions``).

The four per-intent events (``intent_started``, ``attempt_started``,
``attempt_ended``, ``intent_ended``) are nearly every line of a history; the
fold handles them inline on the state of ``Intents`` and ``PodDisruptions``
instead of dispatching them, and calls an accumulator here only on their rare
branches (an error message, a resumed stream, a hit, a closed connection).
Every other event type reaches the handlers of the accumulators that name it,
in the order the fold lists them (checkpoint reads of the effect source, for
one, are ``CheckpointReads``). A new concern is a new ``Accumulator`` here with
its handlers and its fields in ``Fold``; the fold's hot path does not change.
"""

from harness.audit.accumulators.base import (
    CRASH_WINDOW_S,
    MAX_MESSAGES,
    MAX_UNPLANNED_INTENTS,
    OTHER_MESSAGES,
    POD_FAULT_KINDS,
    Accumulator,
    Event,
    Handler,
    dispatch,
    fault_label,
    reads,
)
from harness.audit.accumulators.bounds import RunBounds
from harness.audit.accumulators.checkpoint_reads import CheckpointRead, CheckpointReads
from harness.audit.accumulators.intents import NULLABLE_INTS, Intents, frame_of
from harness.audit.accumulators.plan import FaultPlan, MissedFault
from harness.audit.accumulators.pods import PodDisruptions, PodFault, PodTimeline, StreamFaults
from harness.audit.accumulators.sessions import Sessions
from harness.audit.accumulators.tallies import ErrorTallies, ErrorTally, FailureReplies, message_shape
from harness.audit.accumulators.unavailability import Unavailability, Unavailable

__all__ = [
    "CRASH_WINDOW_S",
    "MAX_MESSAGES",
    "MAX_UNPLANNED_INTENTS",
    "NULLABLE_INTS",
    "OTHER_MESSAGES",
    "POD_FAULT_KINDS",
    "Accumulator",
    "CheckpointRead",
    "CheckpointReads",
    "ErrorTallies",
    "ErrorTally",
    "Event",
    "FailureReplies",
    "FaultPlan",
    "Handler",
    "Intents",
    "MissedFault",
    "PodDisruptions",
    "PodFault",
    "PodTimeline",
    "RunBounds",
    "Sessions",
    "StreamFaults",
    "Unavailability",
    "Unavailable",
    "dispatch",
    "fault_label",
    "frame_of",
    "message_shape",
    "reads",
]
