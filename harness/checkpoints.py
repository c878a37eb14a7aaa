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

A read counts effects exactly as the audit does (SQLite read-only, JSON lines,
the sink's record: :mod:`harness.audit.effects`; PostgreSQL, a read tool, a
command: :mod:`harness.final_read`). It is bounded: at most one per injected pod
fault and one per restart, and ``audit.checkpoints.timeout_s`` long, after which
it is abandoned. It never raises into the run: a read that fails or is
abandoned is recorded with its error. Each read is one ``effects_checkpoint``
event, its findings compact (:class:`harness.history.SeenEffects`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from harness.audit.effects import count_effects
from harness.errors import HarnessError
from harness.final_read import read_live
from harness.history import CheckpointWhen, EventType, HistoryWriter, SeenEffects, excerpt
from harness.wiring import TargetWiring

Reader = Callable[[], Awaitable[Counter[str]]]
"""Reads the effect source now: effects per marker."""


def effects_reader(wiring: TargetWiring, namespace: str) -> Reader:
    """The scenario's effect source, read now: files in a thread (a large store must not hold the
    event loop), live sources as the final read reads them."""
    effects, run_dir = wiring.scenario.audit.effects, wiring.run_dir

    async def read() -> Counter[str]:
        if not effects.collected_at_end:
            return await asyncio.to_thread(count_effects, effects, run_dir)
        counts, _ = await read_live(
            effects,
            run_dir,
            pod_url=wiring.pod_url,
            protocol=wiring.protocol,
            headers=wiring.headers,
            postgres_url=wiring.postgres.url if wiring.postgres else None,
            namespace=namespace,
        )
        return counts

    return read


@dataclass(frozen=True, slots=True)
class _Read:
    seen: SeenEffects | None
    error: str | None
    took_s: float


class Checkpoints:
    """Takes a run's checkpoint reads and records them; the injector and the supervisors call it."""

    def __init__(
        self, read: Reader, history: HistoryWriter, *, namespace: str, intents: int, timeout_s: float
    ) -> None:
        self._read_source = read
        self.history = history
        self.namespace = namespace
        self.intents = intents
        self.timeout_s = timeout_s
        self._pending: set[asyncio.Task[None]] = set()

    async def before_fault(self, pod: str) -> Callable[[], None]:
        """Read now, while ``pod`` is still up; what is returned records the read, and is called once
        the fault happened, right before its event (so ``fault_seq`` is the next seq). A read whose
        fault did not happen is not recorded."""
        taken = await self._read()
        return lambda: self._record(CheckpointWhen.BEFORE_FAULT, pod, self.history.next_seq + 1, taken)

    def after_restart(self, pod: str, ready_seq: int) -> None:
        """``pod`` is ready again after it died: read in a task of its own, so the supervisor goes
        on watching the pod (a crash during the read is seen when it happens)."""
        task = asyncio.create_task(self._after_restart(pod, ready_seq))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def close(self) -> None:
        """Abandon the reads still running (recorded as such); before the pods and services stop."""
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def _after_restart(self, pod: str, ready_seq: int) -> None:
        started = time.monotonic()
        try:
            taken = await self._read()
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
        started = time.monotonic()
        error: str | None = None
        seen: SeenEffects | None = None
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                counts = await self._read_source()
                # A million markers take a second to pack: not on the event loop the driver runs on.
                seen = await asyncio.to_thread(SeenEffects.of, counts, self.namespace, self.intents)
        except HarnessError as exc:
            error = exc.message
        except Exception as exc:  # a checkpoint is evidence, never a reason for the run to fail
            error = (
                f"abandoned after {self.timeout_s:g}s (audit.checkpoints.timeout_s)"
                if deadline.expired()
                else excerpt(f"{type(exc).__name__}: {exc}")
            )
        return _Read(seen, error, time.monotonic() - started)

    def _record(self, when: CheckpointWhen, pod: str, fault_seq: int, taken: _Read) -> None:
        found = taken.seen.fields() if taken.seen is not None else {"error": taken.error}
        self.history.emit(
            EventType.EFFECTS_CHECKPOINT,
            when=when,
            pod=pod,
            fault_seq=fault_seq,
            took_s=round(taken.took_s, 4),
            **found,
        )
