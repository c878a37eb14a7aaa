"""The driver: replays intents against the target with bounded concurrency and a retry policy.

Each worker takes the next intent and makes attempts until one succeeds, the
server rejects the intent for good, or the policy gives up. Every attempt is a
new JSON-RPC request with a **new id**, as 2026-07-28 requires after a broken
stream; every attempt of an intent carries the intent's idempotency key
(unless the policy under test is a buggy ``fresh``-key client). Every step is
written to the history before the driver does anything more: an intent's start
goes out with its first attempt's, an attempt's end with what follows it, in one
write, and the driver flushes the history before it awaits anything but the
call itself (decision 0072).

A tool that asks a question (MRTR, ``resultType: input_required``) is answered from the
scenario's ``workload.answers``: the next attempt (new id, the same arguments) carries
``inputResponses`` and the exact ``requestState``, and a broken attempt of that round is retried
as it was. A question is not a failure and uses up no attempt; ``client.max_input_rounds``
bounds them.

What follows each attempt (retry after a backoff, answer a question, or end
the intent) is the retry policy's, :mod:`harness.run.retry`; the driver sends the
attempts (each a :class:`~harness.client.ToolCall`) and writes them down.

With ``client.trace`` each attempt carries a ``traceparent``: the intent's trace,
the attempt's own span, and (recorded, for ``export --format otlp``) a link from a retry
to the intent's first attempt. Off, the hot path pays one test per attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from harness.client import CallResult, McpClient, ToolCall
from harness.client.balance import Balancer
from harness.history import NEVER_SENT, EventType, HistoryWriter, IntentStatus, Outcome
from harness.run.retry import Answer, Attempts, End, Step
from harness.scenario import ClientPolicy
from harness.tracecontext import span_id, trace_id, traceparent
from harness.workload import Intent, Workload

_INTENT_STARTED, _INTENT_ENDED = EventType.INTENT_STARTED, EventType.INTENT_ENDED
_ATTEMPT_STARTED, _ATTEMPT_ENDED = EventType.ATTEMPT_STARTED, EventType.ATTEMPT_ENDED
_GAVE_UP = IntentStatus.GAVE_UP
_AMBIGUOUS = (Outcome.TRANSPORT_ERROR, Outcome.TIMEOUT)
"""Looked up once: an enum member costs a descriptor call per lookup on Python 3.11, and the driver's
hot path names a dozen of them a call."""


def result_digest(result: dict[str, object]) -> str:
    """A short, order-independent fingerprint of a result, to compare a replay with its original."""
    return hashlib.sha256(orjson.dumps(result, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


class Scheduler(Protocol):
    """What the driver asks before each intent and tells of each attempt. A run's is made of its parts
    (the injector's dispatch gate, the router, the exploration's reads, the bus the liveness watch
    hears attempts on); the driver knows none of them."""

    async def admit(self) -> bool:
        """Before the next intent: wait while dispatch is held; False when the run has all it needs."""
        ...

    async def dispatch(self, dispatched: int) -> None:
        """The ``dispatched``-th intent starts: what must happen before its first attempt."""
        ...

    def started(self, intent: int, attempt: int) -> None:
        """An attempt is about to be sent."""
        ...

    def ended(self, intent: int, attempt: int, outcome: Outcome, seconds: float) -> Mapping[str, Any]:
        """An attempt ended as the client saw it: what its ``attempt_ended`` says beyond that (the points
        it reached)."""
        ...


class Unscheduled:
    """No run around the driver (a test, the bench): every intent is admitted, nothing is told."""

    async def admit(self) -> bool:
        return True

    async def dispatch(self, dispatched: int) -> None:
        return None

    def started(self, intent: int, attempt: int) -> None:
        return None

    def ended(self, intent: int, attempt: int, outcome: Outcome, seconds: float) -> Mapping[str, Any]:
        return {}


@dataclass
class DriverStats:
    """Live counters, read by the live status line."""

    planned: int
    dispatched: int = 0
    finished: int = 0
    attempts: int = 0
    in_flight: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    ambiguous: int = 0
    """Attempts that broke or timed out after the request was sent: they may or may not have taken effect."""
    gave_up: int = 0


class Driver:
    def __init__(
        self,
        workload: Workload,
        clients: Sequence[McpClient],
        history: HistoryWriter,
        policy: ClientPolicy,
        *,
        concurrency: int,
        seed: int,
        request_progress: bool = False,
        deadline_s: float | None = None,
        balancer: Balancer | None = None,
        stats: DriverStats | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.workload = workload
        self.clients = list(clients)
        """One shared client, or one per worker (2025 sessions per worker); worker i uses i mod n."""
        self.balancer = balancer
        """With several replicas: picks each attempt's replica (and its client); ``clients`` unused."""
        self.history = history
        self.policy = policy
        self.concurrency = concurrency
        self.request_progress = request_progress
        self.deadline_s = deadline_s
        self.scheduler: Scheduler = Unscheduled() if scheduler is None else scheduler
        """Asked before each intent, told of each attempt (a run's is ``runner.RunScheduler``)."""
        self.stopped: str | None = None
        """Why the run stopped starting intents and retrying (:meth:`stop`)."""
        self.stats = DriverStats(planned=len(workload)) if stats is None else stats
        """Its live counters (the run's, when it shares them with the injector and the status line)."""
        self.deadline_hit = False
        self._seed = seed
        self._ids = itertools.count(1)
        self._in_flight: dict[int, tuple[int, int]] = {}
        self._intents: Iterator[Intent] = iter(workload)

    def attempt_of(self, request_id: object) -> tuple[int, int] | None:
        """(intent, attempt) of a request the driver has in flight: how the fault proxy knows its target."""
        return self._in_flight.get(request_id) if isinstance(request_id, int) else None

    def stop(self, reason: str) -> None:
        """Start no more intents and retry no more: each intent in flight ends after its attempt."""
        self.stopped = reason

    def _past_deadline(self) -> bool:
        if self.deadline_s is not None and self.history.now() >= self.deadline_s:
            self.deadline_hit = True
        return self.deadline_hit

    async def run(self) -> DriverStats:
        workers = [
            asyncio.create_task(self._worker(i, self.clients[i % len(self.clients)]))
            for i in range(min(self.concurrency, len(self.workload)))
        ]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        return self.stats

    async def _worker(self, worker: int, client: McpClient) -> None:
        try:
            await self._work(worker, client)
        finally:
            self.history.flush()

    async def _work(self, worker: int, client: McpClient) -> None:
        scheduler = self.scheduler
        while True:
            if not await scheduler.admit() or self.stopped is not None:
                return
            intent = next(self._intents, None)
            if intent is None or self._past_deadline():
                return
            self.stats.dispatched += 1
            await scheduler.dispatch(self.stats.dispatched)
            await self._perform(intent, worker, client)

    async def _perform(self, intent: Intent, worker: int, client: McpClient) -> None:
        history, stats = self.history, self.stats
        history.hold(_INTENT_STARTED, intent=intent.index, marker=intent.marker, key=intent.key)
        attempts = Attempts(
            self.policy,
            f"{self._seed}:backoff:{intent.index}",
            clock=history.now,
            respond=self.workload.respond,
        )
        step: Step | None = None
        # MRTR: what answers the server's last question; its attempts keep the question's arguments
        # (the server binds its requestState to them).
        answer: dict[str, object] | None = None
        key, arguments = intent.key, self.workload.arguments(intent)
        trace = trace_id(self.workload.namespace, intent.index) if self.policy.trace else None
        first_span = ""
        while attempts.more():
            attempt = attempts.start()
            fresh = attempts.key(intent.key, answering=answer is not None)
            if fresh is not None:
                key, arguments = fresh, self.workload.arguments(intent, fresh)
            request_id = next(self._ids)
            extra: dict[str, object] = {"round": attempts.questions + 1} if answer is not None else {}
            if self.balancer is not None:
                replica = self.balancer.pick(intent.index)
                client = self.balancer.client(replica, worker)
                extra["pod"] = f"pod-{replica}"
            context: str | None = None
            if trace is not None:
                span = span_id(trace, attempt)
                context = traceparent(trace, span)
                extra["trace_id"], extra["span_id"] = trace, span
                if attempt == 1:
                    first_span = span
                else:  # a retry (or an answer) follows from the intent's first attempt
                    extra["link"] = first_span
            call = ToolCall(
                self.workload.tool,
                arguments,
                request_id,
                request_progress=self.request_progress,
                key=key,
                answer=answer,
                traceparent=context,
            )
            res = await self._attempt(intent, attempt, call, client, extra)
            step = attempts.after(res, past_deadline=self._past_deadline, stopped=self.stopped)
            if isinstance(step, End):
                break
            if isinstance(step, Answer):
                answer = step.params
                continue
            history.flush()
            await asyncio.sleep(step.wait_s)
        else:
            step = End(_GAVE_UP)  # the policy's attempts are used up
        assert isinstance(step, End)
        stats.finished += 1
        if step.status is _GAVE_UP:
            stats.gave_up += 1
        if step.reason is None:
            history.hold(_INTENT_ENDED, intent=intent.index, status=step.status, attempts=attempts.attempt)
        else:
            history.hold(
                _INTENT_ENDED,
                intent=intent.index,
                status=step.status,
                attempts=attempts.attempt,
                reason=step.reason,
            )

    async def _attempt(
        self, intent: Intent, attempt: int, call: ToolCall, client: McpClient, extra: dict[str, object]
    ) -> CallResult:
        """One attempt, written to the history as it starts and as it ends."""
        stats = self.stats
        self.history.emit_fields(
            _ATTEMPT_STARTED,
            intent=intent.index,
            attempt=attempt,
            id=call.request_id,
            key=call.key,
            **extra,
        )
        stats.attempts += 1
        stats.in_flight += 1
        self._in_flight[call.request_id] = (intent.index, attempt)
        scheduler = self.scheduler
        scheduler.started(intent.index, attempt)
        sent = time.monotonic()
        try:
            res = await client.call_tool(call, timeout=self.policy.attempt_timeout_s)
        finally:
            stats.in_flight -= 1
            del self._in_flight[call.request_id]
        points = scheduler.ended(intent.index, attempt, res.outcome, time.monotonic() - sent)
        self._record(intent, attempt, call.request_id, res, points)
        return res

    def _record(
        self, intent: Intent, attempt: int, request_id: int, res: CallResult, points: Mapping[str, Any] | None
    ) -> None:
        self.stats.outcomes[res.outcome] += 1
        if res.outcome in _AMBIGUOUS and res.detail not in NEVER_SENT:
            self.stats.ambiguous += 1
        fields: dict[str, object] = {"outcome": res.outcome}
        if res.detail is not None:
            fields["detail"] = res.detail
        if res.status is not None:
            fields["status"] = res.status
        if res.form is not None:
            fields["form"] = res.form
        if res.result is not None:
            fields["result"] = result_digest(res.result)
        if res.error_code is not None:
            fields["code"] = res.error_code
        if res.retryable is not None:
            fields["retryable"] = res.retryable
        if res.notifications:
            fields["notifications"] = res.notifications
        if res.message is not None:
            fields["message"] = res.message
        if res.reply is not None:
            fields["reply"] = res.reply
            if res.reads_as_failure:
                fields["reads_as_failure"] = True
        if res.resumed is not None:
            fields["resumed"] = res.resumed
            fields["reconnections"] = res.reconnections
        if points:
            fields.update(points)
        self.history.hold(_ATTEMPT_ENDED, intent=intent.index, attempt=attempt, id=request_id, **fields)
