"""The client's retry policy: after each attempt's outcome, what the intent does next.

The driver sends attempts and writes the history; this decides, from the
scenario's ``client`` section, whether an outcome ends the intent, is retried
(after how long), or is a question to answer. Kept apart, as httpx keeps its
transport apart from its client, so that every outcome's rule is unit-tested
with a fake client (``tests/unit/test_driver.py``) and not only through real
processes.

Retried: transport errors and timeouts (the outcome is unknown: the request
may or may not have taken effect), a lost 2025 session (the call was not
executed; the client opens a new session), and tool errors whose contract says
``retryable: true``. Not retried: other tool errors, protocol errors and
refused credentials (the server answered; asking again will not change its
mind). A question (MRTR, ``input_required``) is answered and uses up no
attempt; ``client.max_input_rounds`` bounds them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.client import CallResult
from harness.history import IntentStatus, Outcome
from harness.scenario import Backoff, ClientPolicy

Respond = Callable[[dict[str, Any]], "dict[str, Any] | str"]
"""The workload's answer to a question's result: the params to add, or why it cannot answer."""


def backoff_delay(backoff: Backoff, attempt: int, rng: random.Random) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
    base = min(backoff.max_s, backoff.initial_s * backoff.multiplier ** (attempt - 1))
    if backoff.jitter == "full":
        return rng.uniform(0, base)
    if backoff.jitter == "equal":
        return base / 2 + rng.uniform(0, base / 2)
    return base


@dataclass(frozen=True, slots=True)
class Retry:
    """Attempt again after ``wait_s``."""

    wait_s: float


@dataclass(frozen=True, slots=True)
class Answer:
    """Attempt again at once, answering the server's question with these params."""

    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class End:
    """The intent is over: ``status``, and why when the policy stopped it."""

    status: IntentStatus
    reason: str | None = None


Step = Retry | Answer | End

_DONE = End(IntentStatus.OK)
"""How most intents end: one value (an End is frozen), not one made per intent."""


def retry_after(res: CallResult, policy: ClientPolicy) -> float | None:
    """Seconds the server asked us to wait before retrying, 0 for 'retry normally', None for 'do not'."""
    if res.outcome in (Outcome.TRANSPORT_ERROR, Outcome.TIMEOUT, Outcome.SESSION_LOST):
        return 0.0
    if res.outcome is Outcome.TOOL_ERROR and policy.retry_tool_errors == "retryable" and res.retryable:
        return (res.retry_after_ms or 0) / 1000.0
    return None


class Attempts:
    """One intent's attempts under the policy: how many, with which key, and what follows each.

    ``clock`` is the run's clock (seconds since it began), ``began`` the intent's
    start on it. The backoff's jitter is the intent's own, drawn from ``seed`` (the run's seed and
    the intent's index): the waits an intent gets do not depend on which other attempts failed
    first, so a run made again draws them again (one stream shared by every worker did not). The
    generator is made at the first retry: most intents never wait. A plain class with slots, not
    a dataclass: one is made per intent on the driver's hot path.
    """

    __slots__ = ("attempt", "began", "charged", "clock", "policy", "questions", "respond", "rng", "seed")

    def __init__(
        self, policy: ClientPolicy, seed: str, *, clock: Callable[[], float], respond: Respond
    ) -> None:
        self.policy = policy
        self.seed = seed
        self.rng: random.Random | None = None
        self.clock = clock
        self.respond = respond
        self.began = clock()
        self.attempt = 0
        """Attempts made, questions' answers and session losses included."""
        self.charged = 0
        """Attempts that count against ``max_attempts``."""
        self.questions = 0

    def more(self) -> bool:
        """May another attempt start? An attempt whose session the server no longer knew was not
        executed and does not use up the policy's attempts, nor does a question (those are bounded by
        ``max_input_rounds``), but a server that forgets every session cannot keep us for ever."""
        limit = self.policy.max_attempts
        return self.charged < limit and self.attempt < 2 * limit + self.questions

    def start(self) -> int:
        """The next attempt's number (1-based)."""
        self.attempt += 1
        return self.attempt

    def key(self, intent_key: str, *, answering: bool) -> str | None:
        """The key this attempt carries when it is not the last one's: a ``fresh``-key client (the bug
        under test) gives each retry its own; an answer keeps its question's."""
        if not answering and self.attempt > 1 and self.policy.key_reuse == "fresh":
            return f"{intent_key}-r{self.attempt}"
        return None

    def after(self, res: CallResult, *, past_deadline: Callable[[], bool], stopped: str | None) -> Step:
        """What follows an attempt that ended with ``res``.

        ``past_deadline`` is asked only when a retry would otherwise follow (the
        run's ``max_duration_s``); ``stopped`` is why the run stopped retrying, if it did.
        """
        policy = self.policy
        outcome = res.outcome
        if outcome is Outcome.OK:  # the common case first (an enum member costs a lookup)
            self.charged += 1
            return _DONE
        if outcome is Outcome.INPUT_REQUIRED:
            self.questions += 1
            assert res.result is not None
            reply = self.respond(res.result)
            if self.questions > policy.max_input_rounds:
                reply = f"still asked after {policy.max_input_rounds} answers (client.max_input_rounds)"
            if isinstance(reply, str):
                return End(IntentStatus.REJECTED, reply)
            return Answer(reply)
        if outcome is not Outcome.SESSION_LOST:
            self.charged += 1
        asked = retry_after(res, policy)
        if asked is None:
            return End(IntentStatus.REJECTED)
        if self.charged >= policy.max_attempts or past_deadline():
            return End(IntentStatus.GAVE_UP)
        if self.rng is None:
            self.rng = random.Random(self.seed)
        wait = max(asked, backoff_delay(policy.backoff, self.charged or 1, self.rng))
        limit = policy.give_up_after_s
        if limit is not None and self.clock() + wait - self.began >= limit:
            # the next attempt would start past it
            return End(IntentStatus.GAVE_UP, f"gave up after {limit:g}s of attempts (client.give_up_after_s)")
        if stopped is not None:
            return End(IntentStatus.GAVE_UP, f"the run stopped: {stopped}")
        return Retry(wait)
