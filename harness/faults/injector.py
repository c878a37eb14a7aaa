"""The fault injector: runs the schedule against the pod while the driver runs.

It is the harness's nemesis. It never talks to the auditor; everything it does
goes into the history through the supervisor. Each trigger clock has its own
loop (faults on workload progress, faults on time), so a timed kill never waits
behind a pause that waits for progress; the two loops take turns at the pod, one
fault at a time. A fault that comes due while the pod is down waits until the
pod is back, ready, and has been up for its ``min_uptime_s``, so every fault hits
a serving pod (a kill of a dead pod would measure nothing).

With several replicas each fault names its victim (one replica, or all of them);
it waits for its victims. A rollout replaces the replicas one at a time, as a
Deployment's rolling update does: signal, grace period, restart, readiness,
then the next.

A due fault may hold dispatching (``hold_dispatch``): the driver then starts no
new intent until the fault has happened, so the workload cannot run out before
the fault. ``true`` holds from the trigger on; ``auto`` only once the fault
would otherwise be late (:func:`~harness.faults.pacing.hold_points`). A held
fault whose pod is ready lands on work: if too little is still in flight it
re-opens dispatch and waits, briefly, for a full load
(:class:`~harness.faults.pacing.Landing`). Its event says how it was paced
(``held_s``: how long no intent could start; ``in_flight``: attempts in flight
as it struck). Without holding the workload goes on, and may end first: every
planned fault that did not happen is recorded as ``fault_missed`` with what it
was waiting for, and the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence

from harness.events import FaultMissed
from harness.faultkinds.base import Kind, PlannedFault
from harness.faultkinds.registry import kind_of
from harness.faults.pacing import LANDING_BOUND_S, LANDING_POLL_S, Landing, Load, Paced, hold_points
from harness.history import HistoryWriter
from harness.pods.supervisor import Supervisor

BeforeFault = Callable[[str], Awaitable[Callable[[], None]]]
"""A checkpoint read just before a kill or rollout step of the named pod, the pod still up; what
it returns records the read, and is called once the fault happened, right before its event."""


class Injector:
    def __init__(
        self,
        schedule: Sequence[PlannedFault],
        supervisors: Sequence[Supervisor],
        history: HistoryWriter,
        *,
        workload_size: int | None = None,
        concurrency: int = 1,
        clock: Callable[[], float] = time.monotonic,
        before_fault: BeforeFault | None = None,
        load: Load | None = None,
    ) -> None:
        self.schedule = list(schedule)
        self.before_fault = before_fault
        self.workload_size = workload_size
        self._dispatch_ended: float | None = None
        """When the last intent was dispatched: timed faults due later were never planned for the run."""
        self.supervisors = list(supervisors)
        """One per replica, in replica order."""
        self.history = history
        self.done = 0
        self.dispatch_gate = asyncio.Event()
        """Set while intents may be dispatched; cleared while a due fault holds dispatching."""
        self.dispatch_gate.set()
        self._progress_faults = [f for f in self.schedule if f.after_intents is not None]
        self._timed_faults = [f for f in self.schedule if f.at_s is not None]
        self._next_progress = 0
        """Index of the progress-triggered fault the progress loop is on."""
        self.concurrency = concurrency
        self.clock = clock
        self.load = load
        """The driver's live counters: what a held fault lands on (none: it lands on nothing)."""
        self._hold_at = hold_points(
            [(f.after_intents or 0, f.hold_dispatch) for f in self._progress_faults],
            workload_size,
            concurrency,
        )
        """Per progress fault: intents dispatched when, if it still waits, dispatching stops (None: never)."""
        self._held_since: float | None = None
        """When the current progress fault closed the gate (None: it is open)."""
        self._held_s = 0.0
        """How long the current progress fault has held dispatching, before ``_held_since``."""
        self._landing = False
        """The current progress fault re-opened the gate to land on work: its hold point no longer
        closes it."""
        self._landing_cap = 0
        """While landing: dispatched intents at which the gate closes again. A landing lets in at most the
        load it waits for, and never the last intent: a fast server could otherwise finish the whole
        workload before the fault wakes up, and the run would end without it."""
        self._waiting: dict[int, str] = {}
        """id(fault) -> what a due fault is waiting for (for fault_missed)."""
        self._injected: set[int] = set()
        self._turn = asyncio.Lock()
        self._dispatched = 0
        self._progress = asyncio.Event()
        self._hold_if_due()

    # -- the driver's side (hot path: O(1))
    def on_dispatch(self, dispatched: int) -> None:
        """Called by the driver each time an intent is dispatched, before it runs."""
        self._dispatched = dispatched
        self._progress.set()
        if self._landing and dispatched >= self._landing_cap and self.dispatch_gate.is_set():
            self.dispatch_gate.clear()
            self._held_since = self.clock()
        self._hold_if_due()
        if dispatched == self.workload_size:
            self._dispatch_ended = self.history.now()

    def _hold_if_due(self) -> None:
        if self._landing or self._next_progress >= len(self._progress_faults):
            return
        hold_at = self._hold_at[self._next_progress]
        if hold_at is not None and self._dispatched >= hold_at and self.dispatch_gate.is_set():
            self.dispatch_gate.clear()
            self._held_since = self.clock()

    def _release(self) -> None:
        """Open the gate; what the current progress fault held so far adds up in ``_held_s``."""
        if self._held_since is not None:
            self._held_s += self.clock() - self._held_since
            self._held_since = None
        self.dispatch_gate.set()

    # -- the loops
    async def run(self) -> None:
        """Execute every planned fault on its clock; cancelled when the driver finishes."""
        await asyncio.gather(self._run_progress(), self._run_timed())

    async def _run_progress(self) -> None:
        for index, fault in enumerate(self._progress_faults):
            self._next_progress = index
            self._hold_if_due()
            assert fault.after_intents is not None
            self._waiting[id(fault)] = "trigger"
            while self._dispatched < fault.after_intents:
                self._progress.clear()
                await self._progress.wait()
            await self._inject(fault)
            self._release()
            self._next_progress = index + 1
            self._held_s, self._landing = 0.0, False
            self._hold_if_due()

    async def _run_timed(self) -> None:
        for fault in self._timed_faults:
            assert fault.at_s is not None
            await asyncio.sleep(max(0.0, fault.at_s - self.history.now()))
            await self._inject(fault)

    async def _inject(self, fault: PlannedFault) -> None:
        """Wait for serving victims, then act; one fault at a time across both loops."""
        self._waiting[id(fault)] = "its turn (another fault was being injected)"
        async with self._turn:
            victims = [self.supervisors[v] for v in fault.victims(len(self.supervisors))]
            facts = kind_of(fault.kind)
            if facts.stepwise:
                await self._roll_out(fault, facts, victims)
            else:
                while not await self._strike(fault, facts, victims):
                    pass  # a victim went down during the delay: wait for it to be back, then try again
                self._injected.add(id(fault))
            self._waiting.pop(id(fault), None)
            self.done += 1

    async def _serving(self, fault: PlannedFault, victims: Sequence[Supervisor], min_uptime: float) -> None:
        """Until every victim is ready and has been up for ``min_uptime``."""
        for supervisor in victims:
            while True:
                self._waiting[id(fault)] = f"{supervisor.pod.name} to be ready"
                await supervisor.ready.wait()
                uptime = time.monotonic() - supervisor.ready_since
                if uptime >= min_uptime:
                    break
                self._waiting[id(fault)] = f"{supervisor.pod.name} to be up for min_uptime_s={min_uptime:g}"
                await asyncio.sleep(min_uptime - uptime)

    async def _strike(self, fault: PlannedFault, facts: Kind, victims: Sequence[Supervisor]) -> bool:
        """The kind's strike on every victim at once, and its heal once ``duration_s`` is over; False if
        a victim was down by then (nothing done)."""
        await self._serving(fault, victims, fault.min_uptime_s)
        if fault.delay_s:
            self._waiting[id(fault)] = f"its jitter delay of {fault.delay_s:.3f}s"
            await asyncio.sleep(fault.delay_s)
        # Read before landing: a held fault reads the store the drained work left, and the work a
        # landing lets start is what the kill is for.
        record = await self._checkpoint(victims[0]) if facts.reads_before else None
        paced = await self._land(fault)
        if not all(s.ready.is_set() for s in victims):
            # Down again (by itself, or another fault's): wait for it as before, holding as before.
            self._landing = False
            self._hold_if_due()
            return False
        assert facts.strike is not None  # a scheduled kind has one (tests/unit/test_fault_kinds.py)
        struck = facts.strike(fault, victims, record, **paced)
        if facts.heal is None:
            return True
        try:
            await asyncio.sleep(fault.duration_s)
        finally:
            for victim in struck:
                facts.heal(victim)  # the heal step always runs, even when cancelled
        return True

    async def _land(self, fault: PlannedFault) -> Paced:
        """How the fault is paced, for its event; a fault that holds dispatching first lands on work.

        Held while its pod came back, the work in flight drained: unless enough is still in
        flight, dispatching re-opens and the fault waits (bounded) for a full load.
        """
        load = self.load
        if load is None:
            return Paced()
        holding = self._held_since is not None and self._is_current(fault)
        if holding:
            landing = Landing(self.concurrency, self.clock)
            if not landing.ready(load.in_flight, load.planned - load.finished):
                self._waiting[id(fault)] = "work in flight after dispatching re-opened"
                self._landing = True
                undispatched = load.planned - self._dispatched
                window = min(landing.wanted(load.planned - load.finished), undispatched - 1)
                self._landing_cap = self._dispatched + max(0, window)
                if window > 0:
                    self._release()
                while not landing.ready(load.in_flight, load.planned - load.finished):
                    bound = landing.waited_s >= LANDING_BOUND_S
                    if self._dispatched >= self._landing_cap or bound:
                        if load.in_flight or bound:
                            # The window is all out, and this wakes before any answer is read: strike on
                            # what it put in flight (a fast server ends its first before its last leaves).
                            break
                        # It all ended before this woke: another window, while intents are left to send.
                        outstanding = load.planned - load.finished
                        more = min(landing.wanted(outstanding), load.planned - self._dispatched - 1)
                        if more <= 0:
                            break
                        self._landing_cap = self._dispatched + more
                        self._release()
                    self._progress.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(LANDING_POLL_S):
                            await self._progress.wait()
        paced = Paced(in_flight=load.in_flight, dispatched=self._dispatched)
        if holding:
            held = self._held_s + (0.0 if self._held_since is None else self.clock() - self._held_since)
            paced["held_s"] = round(held, 4)
        return paced

    def _is_current(self, fault: PlannedFault) -> bool:
        """Whether ``fault`` is the progress fault the progress loop is on (the one that may hold)."""
        index = self._next_progress
        return index < len(self._progress_faults) and self._progress_faults[index] is fault

    async def _roll_out(self, fault: PlannedFault, facts: Kind, victims: Sequence[Supervisor]) -> None:
        """The kind's strike on each victim in turn; the next one goes only when the last one is ready
        again (a rollout)."""
        assert facts.strike is not None
        for step, supervisor in enumerate(victims):
            while True:
                await self._serving(fault, [supervisor], fault.min_uptime_s)
                record = await self._checkpoint(supervisor) if facts.reads_before else None
                if facts.strike(fault, [supervisor], record, step=step):
                    break
                # It died by itself just now and the supervisor has not seen it yet: give it the turn.
                await asyncio.sleep(0.05)
            self._injected.add(id(fault))  # begun: a rollout the run cut short shows as fewer steps
            self._waiting[id(fault)] = f"{supervisor.pod.name} to be replaced (rollout step {step})"
            await supervisor.ready.wait()

    async def _checkpoint(self, victim: Supervisor) -> Callable[[], None] | None:
        """The checkpoint read before a kill or rollout step (never a pause), where the run takes them."""
        return None if self.before_fault is None else await self.before_fault(victim.pod.name)

    def record_missed(self) -> None:
        """After the loops stopped: a ``fault_missed`` for each planned fault that did not happen.

        Counted faults are planned whatever the run's length; a timed fault only
        if it came due while intents were being dispatched.
        """
        self.dispatch_gate.set()
        now = self.history.now() if self._dispatch_ended is None else self._dispatch_ended
        for fault in self.schedule:
            if id(fault) in self._injected:
                continue
            if fault.after_intents is not None:
                waiting = self._waiting.get(id(fault), "trigger")
                if waiting == "trigger" and self._dispatched >= fault.after_intents:
                    reason = "the run ended while it waited for an earlier fault to happen"
                elif waiting == "trigger":
                    reason = (
                        f"the run ended after {self._dispatched} intents were dispatched, "
                        f"before its trigger (intent {fault.after_intents})"
                    )
                else:
                    reason = f"the run ended while it waited for {waiting}"
            elif fault.at_s is not None and fault.at_s <= now:
                reason = f"the run ended while it waited for {self._waiting.get(id(fault), 'the pod')}"
            else:
                continue
            self.history.emit(
                FaultMissed(fault=fault.kind, trigger=fault.describe(), counted=fault.counted, reason=reason)
            )
