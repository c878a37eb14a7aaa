"""Checkpoint reads: what the effect source holds at chosen points of a run, into the history.

The final read (and the auditor) see only the end of a run. A store that a crash
erased (a file rewritten in place, torn by a kill, and started empty on the
restart) then looks exactly like a store that never got the writes, and an
intent acknowledged long before the kill looks lost for no reason. So the run
reads the scenario's effect source twice around each pod fault: just before
each injected kill or rollout step, while the pod is still up (what was stored
by then), and once each pod that died, killed or crashed, is ready again (what
survived). The auditor calls an intent *vanished* when a checkpoint saw its
effect and the final count is lower.

A read counts effects exactly as the audit does, through the scenario's effect
source (:mod:`harness.effects`, read by :func:`harness.run.final_read.read_now`). It
is bounded: at most one per injected pod fault and one per restart, and
``audit.checkpoints.timeout_s`` long, after which it is abandoned. It never raises
into the run: a read that fails or is abandoned is recorded with its error. Each
read is one ``effects_checkpoint`` event, its findings compact
(:class:`harness.history.SeenEffects`).

Each read is two samples of the source ``SAMPLE_GAP_S`` apart, joined: an intent
counts as seen if either sample saw it. A store caught mid-rewrite in one sample
(a file truncated and not yet written back) is whole in the other, so that a read
says "not there" only of what neither sample found.

A read that contradicts what the run knows is read again: fewer of the run's
effects than the read before it with no pod fault between, or none at all while
intents have been acknowledged (a file caught between its truncation and its
rewrite reads as empty). It is read again, after growing pauses (``PAUSES_S``), until
a read that no longer contradicts is confirmed by the next one; that read is
recorded (``rereads``). A store that really lost the effects reads the same every
time: when every re-read agrees with the first, it is recorded as it is. Anything
else is recorded ``unstable``, which the auditor takes as evidence of nothing,
never as "seen nothing". A read of a JSON-lines store with lines that did not parse
is recorded ``torn``: what it saw was there, what it did not see may have been in
the part being written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from functools import partial
from typing import Any

from harness.effects.base import Sample
from harness.errors import HarnessError
from harness.events import EffectsCheckpoint
from harness.history import CheckpointWhen, HistoryWriter, SeenEffects, excerpt
from harness.run.wiring import TargetWiring

Reader = Callable[[], Awaitable[Sample]]
"""Reads the effect source now."""


def effects_reader(wiring: TargetWiring, namespace: str) -> Reader:
    """The scenario's effect source, read now (:func:`harness.run.final_read.read_now`)."""
    return partial(wiring.read_effects_now, namespace)


SAMPLE_GAP_S = 0.02
"""Between the two samples of one read."""
PAUSES_S = (0.01, 0.03, 0.09)
"""The pauses before each re-read of a read that contradicts the run (a store caught mid-rewrite is
whole again within milliseconds; one that lost the effects stays as it is)."""
REREADS = len(PAUSES_S)


CLOSE_GRACE_S = 5.0
"""How long the end of a run waits for a checkpoint read still running before abandoning it."""


@dataclass(frozen=True, slots=True)
class _Read:
    seen: SeenEffects | None
    error: str | None
    took_s: float
    rereads: int = 0
    unstable: bool = False
    torn: bool = False
    began: float = 0.0
    """When the read began, on the history's clock (its first sample)."""


def total(seen: SeenEffects) -> int:
    """The run's effects a read saw (its intents' effects, not foreign ones)."""
    return int.from_bytes(seen.bitmap, "little").bit_count() + sum(n - 1 for n in seen.counts.values())


@dataclass(eq=False)
class Checkpoints:
    """Takes a run's checkpoint reads and records them; the injector and the supervisors call it."""

    source: Reader
    """Reads the effect source now."""
    history: HistoryWriter
    _: KW_ONLY
    namespace: str
    intents: int
    timeout_s: float
    acknowledged: Callable[[], int] = lambda: 0
    """How many intents the client has seen succeed so far (the driver's count)."""
    _pending: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _last: SeenEffects | None = field(default=None, init=False)
    """What the last recorded read that succeeded saw."""
    _fault_since: bool = field(default=False, init=False)
    """A pod fault came after that read."""

    async def before_fault(self, pod: str) -> Callable[[], None]:
        """Read now, while ``pod`` is still up; what is returned records the read, and is called once
        the fault happened, right before its event (so ``fault_seq`` is the next seq). A read whose
        fault did not happen is not recorded."""
        taken = await self._steady_read()
        return lambda: self._record(CheckpointWhen.BEFORE_FAULT, pod, self.history.next_seq + 1, taken)

    async def before_call(self, pod: str) -> None:
        """Read now, before the next call of an exploration starts (one call at a time: the store is at
        rest), and record it: what a crash in that call may lose of the calls before."""
        taken = await self._steady_read()
        self._record(CheckpointWhen.BEFORE_CALL, pod, None, taken)

    def at_answer(self, pod: str, intent: int, attempt: int, then: Callable[[int], None]) -> None:
        """An attempt of a race was answered ok: read now, in a task of its own, once (no second sample,
        no re-read: a store that holds nothing yet for an answered intent is what this read is for);
        ``then(intent)`` once the read is done, whatever became of it."""
        task = asyncio.create_task(self._at_answer(pod, intent, attempt, then))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _at_answer(self, pod: str, intent: int, attempt: int, then: Callable[[int], None]) -> None:
        try:
            began = self.history.now()
            taken = replace(await self._sample(), began=began)
            self._record(CheckpointWhen.AT_ANSWER, pod, None, taken, intent=intent, attempt=attempt)
        finally:
            then(intent)

    def after_restart(self, pod: str, ready_seq: int) -> None:
        """``pod`` is ready again after it died: read in a task of its own, so the supervisor goes
        on watching the pod (a crash during the read is seen when it happens)."""
        task = asyncio.create_task(self._after_restart(pod, ready_seq))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def close(self) -> None:
        """Before the pods and services stop: let the reads still running finish (a read after the last
        restart is the evidence of what it kept), for ``CLOSE_GRACE_S`` at most, then abandon the rest
        (recorded as such)."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=min(self.timeout_s, CLOSE_GRACE_S))
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def _after_restart(self, pod: str, ready_seq: int) -> None:
        started = time.monotonic()
        try:
            taken = await self._steady_read(after_fault=True)
        except asyncio.CancelledError:
            took = time.monotonic() - started
            self._record(
                CheckpointWhen.AFTER_RESTART,
                pod,
                ready_seq,
                _Read(None, "abandoned: the run ended during the read", took),
            )
            raise
        self._record(CheckpointWhen.AFTER_RESTART, pod, ready_seq, taken)

    async def _read(self) -> _Read:
        """Two samples ``SAMPLE_GAP_S`` apart, joined (:meth:`SeenEffects.join`); the first error if one
        failed."""
        first = await self._sample()
        if first.seen is None:
            return first
        await asyncio.sleep(SAMPLE_GAP_S)
        second = await self._sample()
        took = first.took_s + second.took_s
        if second.seen is None:
            return _Read(None, second.error, took)
        return _Read(first.seen.join(second.seen), None, took, torn=first.torn or second.torn)

    async def _sample(self) -> _Read:
        started = time.monotonic()
        error: str | None = None
        seen: SeenEffects | None = None
        torn = False
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                sample = await self.source()
                torn = sample.torn
                # A million markers take a second to pack: not on the event loop the driver runs on.
                seen = await asyncio.to_thread(SeenEffects.of, sample.counts, self.namespace, self.intents)
        except HarnessError as exc:
            error = exc.message
        except Exception as exc:  # a checkpoint is evidence, never a reason for the run to fail
            error = (
                f"abandoned after {self.timeout_s:g}s (audit.checkpoints.timeout_s)"
                if deadline.expired()
                else excerpt(f"{type(exc).__name__}: {exc}")
            )
        return _Read(seen, error, time.monotonic() - started, torn=torn)

    def _contradicts(self, seen: SeenEffects, acknowledged: int) -> bool:
        """Whether a read says what the run knows cannot be so: effects gone with no pod fault since the
        last read, or none at all though intents were acknowledged before it began."""
        now = total(seen)
        if now == 0 and acknowledged > 0:
            return True
        return self._last is not None and not self._fault_since and now < total(self._last)

    async def _steady_read(self, *, after_fault: bool = False) -> _Read:
        """A read, read again while it contradicts the run, until two in a row agree (``REREADS`` at
        most); the last marked unstable when none did. ``after_fault``: a pod died since the last read
        (a restart: what it lost is what the read is for)."""
        if after_fault:
            self._fault_since = True
        acknowledged = self.acknowledged()
        began = self.history.now()
        first = replace(await self._read(), began=began)
        if first.seen is None or not self._contradicts(first.seen, acknowledged):
            return first
        seen = [first.seen]
        took = first.took_s
        for again, pause in enumerate(PAUSES_S, 1):
            await asyncio.sleep(pause)
            taken = await self._read()
            took += taken.took_s
            if taken.seen is None:
                return _Read(None, taken.error, took, again, began=began)
            previous = seen[-1]
            seen.append(taken.seen)
            if taken.seen == previous and not self._contradicts(taken.seen, acknowledged):
                return _Read(taken.seen, None, took, again, torn=taken.torn, began=began)
        if all(s == first.seen for s in seen):  # the same every time: what the store holds
            return _Read(first.seen, None, took, REREADS, torn=first.torn, began=began)
        return _Read(seen[-1], None, took, REREADS, unstable=True, began=began)

    def _record(
        self,
        when: CheckpointWhen,
        pod: str,
        fault_seq: int | None,
        taken: _Read,
        intent: int | None = None,
        attempt: int | None = None,
    ) -> None:
        found = taken.seen.fields() if taken.seen is not None else {"error": taken.error}
        steady: dict[str, Any] = {"rereads": taken.rereads} if taken.rereads else {}
        if taken.unstable:
            steady["unstable"] = True
        if taken.torn:
            steady["torn"] = True
        self.history.emit(
            EffectsCheckpoint(
                when=when,
                pod=pod,
                fault_seq=fault_seq,
                read_at=round(taken.began, 6),
                took_s=round(taken.took_s, 4),
                intent=intent,
                attempt=attempt,
                **found,
                **steady,
            )
        )
        if taken.seen is not None and not taken.unstable:
            self._last = taken.seen
            self._fault_since = False
        if when is CheckpointWhen.BEFORE_FAULT:
            self._fault_since = True  # recorded right before its fault
