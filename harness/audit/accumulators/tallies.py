"""Error messages by shape, and ok replies that read as failures."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from harness.audit.accumulators.base import MAX_MESSAGES, OTHER_MESSAGES, Accumulator, Event
from harness.audit.accumulators.intents import Intents
from harness.history import Outcome

_VARIABLE = re.compile(r"[0-9a-fA-F]{8,}|\d+")


def message_shape(message: str) -> str:
    """An error message with its variable parts (numbers, ids, keys) blanked, to count alike ones together."""
    return _VARIABLE.sub("#", message)


@dataclass
class ErrorTally:
    """How often one kind of error message was seen, with the first one verbatim."""

    outcome: str
    code: str | None
    example: str
    count: int = 0


class ErrorTallies(Accumulator):
    """Error messages of attempts, counted by shape; fills ``Fold.errors``.

    At most ``MAX_MESSAGES`` shapes per outcome; the rest are counted together
    under ``OTHER_MESSAGES``, so a server that puts a fresh id in every message
    cannot grow the audit.
    """

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str | None, str], ErrorTally] = {}
        """(outcome, code, message shape) -> tally."""
        self._shapes: Counter[str] = Counter()
        """Outcome -> the shapes kept for it."""

    def tally(self, ev: Event, outcome: str) -> None:
        """An ``attempt_ended`` whose outcome is not ok (the fold calls this from its hot path)."""
        message = ev.get("message")
        if message is None:
            return
        code = ev.get("code")
        code = None if code is None else str(code)
        key = (outcome, code, message_shape(str(message)))
        tally = self.tallies.get(key)
        if tally is None:
            if self._shapes[outcome] >= MAX_MESSAGES:
                key = (outcome, None, OTHER_MESSAGES)
                tally = self.tallies.setdefault(key, ErrorTally(outcome, None, OTHER_MESSAGES))
            else:
                self._shapes[outcome] += 1
                tally = self.tallies[key] = ErrorTally(outcome, code, str(message))
        tally.count += 1


class FailureReplies(Accumulator):
    """Ok replies whose text reads as a failure, counted by shape; fills ``Fold.failure_replies``.

    The client flags them (``reads_as_failure`` on an ok ``attempt_ended``, judged by
    :func:`harness.replies.reads_as_failure`); a lost intent with one is blamed on
    ``error_as_success``. Bounded like the error tallies: ``MAX_MESSAGES`` shapes.
    """

    def __init__(self, intents: Intents) -> None:
        self.intents = intents
        self.tallies: dict[str, ErrorTally] = {}
        """Reply shape -> tally (outcome ``ok``, the first reply of the shape verbatim)."""

    def reply(self, ev: Event, i: int) -> None:
        """An ok ``attempt_ended`` of intent ``i`` flagged ``reads_as_failure`` (from the fold's hot path)."""
        self.intents.failure_replies.add(i)
        text = str(ev.get("reply", ""))
        shape = message_shape(text)
        tally = self.tallies.get(shape)
        if tally is None:
            if len(self.tallies) >= MAX_MESSAGES:
                shape = OTHER_MESSAGES
                tally = self.tallies.setdefault(shape, ErrorTally(Outcome.OK.value, None, OTHER_MESSAGES))
            else:
                tally = self.tallies[shape] = ErrorTally(Outcome.OK.value, None, text)
        tally.count += 1
