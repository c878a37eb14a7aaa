"""One run of a scenario, start to finish, and the library calls that run, audit and report it.

The run directory (``results/<run-id>/``, see :mod:`harness.rundir`) holds
everything: the scenario as run, ``history.jsonl``, the target's data and pod
logs, the effect sink's record or the final read of effects, and after the audit
``intents.csv``, ``summary.json`` and ``report.md``.

A run's parts are async context managers declared in one order (``_Run._parts``):
services (PostgreSQL, the effect sink), the fault proxies, nginx, the pods and
their supervisors, the final read of effects, checkpoint reads, the driver and its
clients, the injector, the live status line, the liveness watch. Each is entered
into one ``AsyncExitStack`` as it starts, so they stop in the reverse order
whatever happens (success, a target that will not start, Ctrl-C, SIGTERM, SIGHUP).
The target's parts are the wiring's (:mod:`harness.run.wiring`); the run adds the
faults (the injector, the fault proxies) and the driver. So on the way
out the driver stops first, the final read happens while pod and services are
still up, and ``run_ended`` is the history's last event, saying how the run
ended; a partial run can still be audited with ``mcp-chaos audit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TextIO, TypeVar

from harness import rundir
from harness._version import __version__
from harness.audit.auditor import AuditResult
from harness.audit.runfacts import facts_of_scenario
from harness.auditing import audit_and_report
from harness.client import McpClient
from harness.client.balance import Balancer
from harness.client.http import McpHttpClient
from harness.crashpoints.router import Router
from harness.errors import HarnessError, ScenarioError, TargetError
from harness.events import EffectsCollected, RunEnded, RunStarted
from harness.faults.injector import Injector
from harness.faults.proxy import FaultProxy
from harness.faults.schedule import build_schedule, counted_plan
from harness.history import HistoryWriter, Outcome, RunStatus
from harness.pods.factory import require_env_refs
from harness.report.live import LiveStatus, Snapshot
from harness.run.bus import AttemptEnded, Bus, PodBack, PodGone
from harness.run.checkpoints import Checkpoints, effects_reader
from harness.run.driver import Driver, DriverStats
from harness.run.liveness import Liveness
from harness.run.wiring import TargetWiring
from harness.scenario import Scenario
from harness.template import TemplateError
from harness.workload import Workload

T = TypeVar("T")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run as Ctrl-C does: a service manager's stop, and a terminal that closed."""


async def cancel_on_stop_signals(coro: Awaitable[T]) -> T:
    """Await ``coro`` with SIGTERM or SIGHUP cancelling it, as Ctrl-C does under ``asyncio.run``.

    Cancelled, a run still cleans up, writes ``run_ended`` and keeps its partial
    history; without this SIGHUP would end the harness at once and leave its pods.
    A signal ignored by whoever started the harness stays ignored (``nohup`` ignores
    SIGHUP so that a closed terminal does not stop the run), and each signal's
    handler is put back afterwards (asyncio's removal would leave the default).
    """
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    installed: list[tuple[signal.Signals, Any]] = []
    if task is not None:
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:
                continue
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, task.cancel)
                installed.append((sig, previous))
    try:
        return await coro
    finally:
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            if previous is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(sig, previous)


def check_environment(scenario: Scenario) -> None:
    """ScenarioError (exit 2) now, before anything starts, for a ``${VAR}`` the environment lacks."""
    try:
        require_env_refs(scenario.target)
    except TemplateError as exc:
        raise ScenarioError(str(exc)) from None


async def execute(
    scenario: Scenario,
    run_dir: Path,
    *,
    out: TextIO | None = None,
    progress_interval_s: float | None = 1.0,
    namespace: str | None = None,
) -> RunStatus:
    """Run the scenario into ``run_dir`` (made by ``rundir.prepare_run_dir``); how the run ended.

    Raises HarnessError subclasses for infrastructure failures and lets
    cancellation (Ctrl-C, SIGTERM, SIGHUP) through, always after cleaning up.
    ``progress_interval_s=None`` shows no live status line. ``out`` is where it goes: standard
    error as it is at the call (not at import: a caller may have replaced it since).
    """
    out = sys.stderr if out is None else out
    live = LiveStatus(out, progress_interval_s) if progress_interval_s is not None else None
    return await _Run(scenario, run_dir, namespace or secrets.token_hex(4)).execute(live)


async def run_and_audit(
    scenario: Scenario,
    run_dir: Path,
    *,
    out: TextIO | None = None,
    progress_interval_s: float | None = 1.0,
    namespace: str | None = None,
    html: bool = True,
) -> AuditResult:
    """The whole job: run the scenario into ``run_dir``, audit it, write the reports."""
    await execute(scenario, run_dir, out=out, progress_interval_s=progress_interval_s, namespace=namespace)
    return audit_and_report(run_dir, html=html)


async def _close_clients(clients: list[McpClient]) -> None:
    """End 2025 sessions as a client should (DELETE, best effort), then drop every connection."""
    for client in clients:
        if isinstance(client, McpHttpClient):
            with contextlib.suppress(Exception):
                await client.end_session()
        await client.aclose()


async def _finish(task: asyncio.Task[object] | None) -> None:
    """Cancel a task and wait for it, whatever it raised."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class RunScheduler:
    """The driver's scheduler in a run (:class:`harness.run.driver.Scheduler`): the injector holds new
    intents back while a due fault waits for its moment, the router says when a plan has every try it
    wanted and hears of every attempt, an exploration reads the store before each call, and the bus
    tells the liveness watch how each attempt ended. The history is flushed before any of it waits."""

    def __init__(
        self,
        history: HistoryWriter,
        injector: Injector,
        router: Router,
        bus: Bus,
        *,
        explores: bool,
        before_call: Callable[[], Awaitable[None]] | None,
        at_answer: Callable[[int, int], None] | None = None,
    ) -> None:
        self.history = history
        self.injector = injector
        self.router = router
        self.bus = bus
        self.explores = explores
        self.before_call = before_call
        self.at_answer = at_answer
        """A race's read of the store as each attempt is answered ok (what it held at that moment); the
        router is told once it is done (or at once, for an answer that was no success)."""

    async def admit(self) -> bool:
        gate = self.injector.dispatch_gate
        if not gate.is_set():
            self.history.flush()
            await gate.wait()
        return not (self.explores and self.router.exhausted())

    async def dispatch(self, dispatched: int) -> None:
        self.injector.on_dispatch(dispatched)
        if self.before_call is not None:
            self.history.flush()
            await self.before_call()

    def started(self, intent: int, attempt: int) -> None:
        self.router.started(intent, attempt)

    def ended(self, intent: int, attempt: int, outcome: Outcome, seconds: float) -> Mapping[str, Any]:
        self.bus.tell(AttemptEnded(outcome, seconds))
        if self.at_answer is not None:
            if outcome is Outcome.OK:
                self.at_answer(intent, attempt)  # tells the router once it has read
            else:
                self.router.looked(intent)  # no answer to read the store at
        return self.router.ended(intent, attempt)


class _Run:
    """The parts of one run, wired; :meth:`execute` starts and stops them in order."""

    def __init__(self, scenario: Scenario, run_dir: Path, namespace: str) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.namespace = namespace
        self.status = RunStatus.FAILED
        self.reason: str | None = None
        # ${VAR} of the target's env and headers (expanded now) and passwords in URLs: hidden
        # from everything written.
        self.wiring = TargetWiring(scenario, run_dir)
        self.redactor = self.wiring.redactor
        self.history = self.wiring.history
        self.supervisor = self.wiring.supervise()
        self.schedule = build_schedule(scenario)
        self.supervisors = self.wiring.supervisors
        self.workload = Workload(scenario, namespace)
        self.stats = DriverStats(planned=len(self.workload))
        """The driver's live counters: what a held fault lands on, what a checkpoint read knows was
        acknowledged, what the live status shows."""
        reads = scenario.audit.checkpoints
        stats = self.stats
        self.checkpoints = (
            Checkpoints(
                effects_reader(self.wiring, namespace),
                self.history,
                namespace=namespace,
                intents=scenario.workload.intents,
                timeout_s=reads.timeout_s,
                acknowledged=lambda: stats.outcomes[Outcome.OK],
            )
            if reads.enabled
            else None
        )
        """Reads of the effect source before each pod fault and after each restart (``audit.checkpoints``)."""
        self.liveness = Liveness(
            self.supervisors,
            self.history,
            after_s=scenario.target.unavailable_after_s,
            data_dir=run_dir / rundir.DATA,
            in_flight=lambda: stats.in_flight,
        )
        bus = self.wiring.bus
        liveness, checkpoints = self.liveness, self.checkpoints
        bus.subscribe(PodBack, lambda back: liveness.restarted(back.pod, back.ready_seq))
        if checkpoints is not None:  # a read after each restart, in a task of its own
            bus.subscribe(PodBack, lambda back: checkpoints.after_restart(back.pod, back.ready_seq))
        bus.subscribe(PodGone, self._gone)
        bus.subscribe(AttemptEnded, lambda ended: liveness.attempt(ended.outcome, ended.seconds))
        self.injector = Injector(
            self.schedule,
            self.supervisors,
            self.history,
            workload_size=scenario.workload.intents,
            concurrency=scenario.workload.concurrency,
            before_fault=self.checkpoints.before_fault if self.checkpoints else None,
            load=self.stats,
        )
        # With stream faults, one fault proxy in front of each replica, on the port the wiring kept for
        # it (its draws are per attempt, so which replica an attempt went to does not change whether
        # it is hit). With crash points, one in front of the pod that reports each call to the router.
        router = self.wiring.router if self.wiring.crashes else None
        self.proxies = [
            FaultProxy(
                port,
                scenario.faults.stream,
                seed=scenario.seed,
                history=self.history,
                lookup=self._attempt_of,
                default_hold_s=scenario.client.attempt_timeout_s + 0.5,
                key_meta=scenario.client.key_meta,
                key_header=scenario.client.key_header,
                router=router,
                upstream_host=host,
                host=host_header,
            )
            for host, port, host_header in (self.wiring.upstreams if self.wiring.proxy_ports else [])
        ]
        self.driver: Driver | None = None
        """Made once the pod is ready: its clients speak the protocol the pod answered in."""
        self._supervise: asyncio.Task[None] | None = None
        self._live: LiveStatus | None = None
        self._clients: list[list[McpClient]] = []

    def _gone(self, gone: PodGone) -> None:
        """A pod did not come back from its death: the run stops on it, as on one that came back and
        answered nothing (the liveness watch), and the audit leads with it."""
        if self.driver is not None:
            self.driver.stop(gone.why)

    def _attempt_of(self, request_id: object) -> tuple[int, int] | None:
        return None if self.driver is None else self.driver.attempt_of(request_id)

    async def execute(self, live: LiveStatus | None) -> RunStatus:
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(self.history)
            stack.callback(self._record_end)
            stack.callback(self.wiring.redact_logs)  # once every pod and service has stopped writing
            self._record_start()
            self._live = live
            try:
                for part in self._parts():
                    await stack.enter_async_context(part())
                await self._drive()
            except asyncio.CancelledError:
                self.status, self.reason = RunStatus.INTERRUPTED, "cancelled (Ctrl-C, SIGTERM or SIGHUP)"
                raise
            except HarnessError as exc:
                self.redactor.error(exc)  # for the terminal: what a server said may hold a secret
                self.status, self.reason = RunStatus.FAILED, exc.message
                raise
        return self.status

    def _balancer(self, clients: list[list[McpClient]]) -> Balancer | None:
        """With several replicas, what spreads the attempts over the ready ones."""
        if len(clients) == 1:
            return None
        supervisors = self.supervisors
        return Balancer(
            self.scenario.client.balance,
            clients,
            lambda replica: supervisors[replica].ready.is_set(),
            seed=self.scenario.seed,
        )

    def _parts(self) -> tuple[Callable[[], contextlib.AbstractAsyncContextManager[object]], ...]:
        """The run's parts in the order they start; they stop in the reverse order (so on the way out the
        driver stops first, the final read happens while pods and services are still up)."""
        wiring = self.wiring
        return (
            wiring.running_services,  # PostgreSQL (and the crash points' proxy), the effect sink
            self._fault_proxies,  # in front of the replicas, on the ports nginx and the clients use
            wiring.running_front,  # nginx in front of the proxies (or the replicas)
            self._pods,  # every replica ready under its supervisor
            self._final_read_on_exit,  # a live source, read once the parts after it have stopped
            self._checkpoint_reads,  # reads still running when the run ends are abandoned
            self._driver,  # the clients, in the protocol the pods answered in
            self._injecting,
            self._live_status,
            self._liveness_watch,
        )

    @contextlib.asynccontextmanager
    async def _fault_proxies(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for proxy, port in zip(self.proxies, self.wiring.proxy_ports, strict=True):
                stack.push_async_callback(proxy.close)
                await proxy.start(port)
            yield

    @contextlib.asynccontextmanager
    async def _pods(self) -> AsyncIterator[None]:
        async with self.wiring.running_pods() as supervising:
            self._supervise = supervising
            # Now, in the protocol the pods answered in; a ScenarioError (sessions behind nginx) before the
            # final read is entered.
            self._clients = self.wiring.run_clients(lookup=self._attempt_of)
            yield

    @contextlib.asynccontextmanager
    async def _final_read_on_exit(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.wiring.effects.live:
                await self._final_read()

    @contextlib.asynccontextmanager
    async def _checkpoint_reads(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.checkpoints is not None:
                await self.checkpoints.close()

    @contextlib.asynccontextmanager
    async def _driver(self) -> AsyncIterator[None]:
        clients = self._clients
        await self.wiring.mirror_marks([c for mine in clients for c in mine])
        self.driver = Driver(
            self.workload,
            clients[0],
            self.history,
            self.scenario.client,
            concurrency=self.scenario.workload.concurrency,
            seed=self.scenario.seed,
            request_progress=self.scenario.workload.request_progress,
            deadline_s=self.scenario.workload.max_duration_s,
            balancer=self._balancer(clients),
            stats=self.stats,
            scheduler=RunScheduler(
                self.history,
                self.injector,
                self.wiring.router,
                self.wiring.bus,
                explores=self.wiring.crashes,
                before_call=self._before_call(),
                at_answer=self._at_answer(),
            ),
        )
        try:
            yield
        finally:
            await _close_clients([c for mine in clients for c in mine])

    def _before_call(self) -> Callable[[], Awaitable[None]] | None:
        """An exploration reads the store before each call (what a crash in it may lose of the calls
        before it, and what they never stored); an ordinary run does not."""
        crash = self.scenario.faults.crash_points
        checkpoints = self.checkpoints
        if checkpoints is None or crash is None or crash.explore is None:
            return None
        pod = self.supervisor.pod.name
        return lambda: checkpoints.before_call(pod)

    def _at_answer(self) -> Callable[[int, int], None] | None:
        """Races read the store as each attempt is answered ok: an answer given before its effect was
        stored (a key record committed first) shows against the final read; other runs do not."""
        crash = self.scenario.faults.crash_points
        checkpoints = self.checkpoints
        if checkpoints is None or crash is None or crash.race is None:
            return None
        pod, router = self.supervisor.pod.name, self.wiring.router
        return lambda intent, attempt: checkpoints.at_answer(pod, intent, attempt, then=router.looked)

    @contextlib.asynccontextmanager
    async def _injecting(self) -> AsyncIterator[None]:
        injecting = asyncio.create_task(self.injector.run())
        try:
            yield
        finally:
            await _finish(injecting)
            self.injector.record_missed()

    @contextlib.asynccontextmanager
    async def _live_status(self) -> AsyncIterator[None]:
        live = self._live
        if live is None:
            yield
            return
        showing = asyncio.create_task(live.run(self._snapshot))
        try:
            yield
        finally:
            await _finish(showing)
            live.show(self._snapshot())  # where the driver got to
            live.finish()

    @contextlib.asynccontextmanager
    async def _liveness_watch(self) -> AsyncIterator[None]:
        assert self.driver is not None
        watching = asyncio.create_task(self.liveness.watch(self.driver.stop))
        try:
            yield
        finally:
            await _finish(watching)

    async def _drive(self) -> None:
        """Run the driver until the workload is done, or a pod's supervisor gives up on it."""
        driver, supervise = self.driver, self._supervise
        assert driver is not None
        assert supervise is not None
        driving = asyncio.create_task(driver.run())
        try:
            await asyncio.wait({driving, supervise}, return_when=asyncio.FIRST_COMPLETED)
            if not driving.done():
                # The supervisor gave up on the target: nothing more can be measured.
                await _finish(driving)
                supervise.result()
            driving.result()
        finally:
            # The driver first: after Ctrl-C it must not go on making attempts during teardown.
            await _finish(driving)
        if driver.stopped is not None:
            self.status, self.reason = RunStatus.STOPPED, driver.stopped
        elif driver.deadline_hit:
            self.status = RunStatus.DEADLINE
            self.reason = f"workload.max_duration_s={self.scenario.workload.max_duration_s:g} reached"
        else:
            self.status = RunStatus.COMPLETED

    def _record_start(self) -> None:
        s = self.scenario
        facts = facts_of_scenario(s)  # what the audit needs of the scenario, in the history
        self.history.emit(
            RunStarted(
                run_id=self.run_dir.name,
                scenario=s.name,
                seed=s.seed,
                intents=s.workload.intents,
                concurrency=s.workload.concurrency,
                runtime=s.target.runtime,
                namespace=self.namespace,
                faults_planned=counted_plan(self.schedule),
                started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                epoch_s=round(time.time() - self.history.now(), 6),
                version=__version__,
                keyed=facts.keyed,
                kill_signal=facts.kill_signal,
                stream_rules=[rule.fields() for rule in facts.stream_rules],
                points_placed_after=(self.wiring.router.deferred and s.services.postgres is not None) or None,
            )
        )

    def _record_end(self) -> None:
        self.history.emit(
            RunEnded(
                status=self.status,
                reason=self.reason,
                kills=sum(s.kills for s in self.supervisors),
                restarts=sum(s.restarts for s in self.supervisors),
            )
        )

    def _snapshot(self) -> Snapshot:
        s = self.stats
        return Snapshot(
            t=self.history.now(),
            finished=s.finished,
            planned=s.planned,
            attempts=s.attempts,
            in_flight=s.in_flight,
            pod_faults_done=self.injector.done,
            pod_faults_planned=len(self.schedule),
            pods_ready=sum(s.ready.is_set() for s in self.supervisors),
            pods=len(self.supervisors),
            holding=not self.injector.dispatch_gate.is_set(),
            stream_faults=sum(p.injected for p in self.proxies) if self.proxies else None,
            ambiguous=s.ambiguous,
            gave_up=s.gave_up,
            tool_errors=s.outcomes[Outcome.TOOL_ERROR],
        )

    async def _pod_back(self) -> None:
        """Wait until the pod a read tool or command may need is ready; TargetError at once when its
        supervisor gave up on it (the read waited ready_timeout_s + 60 s for a pod that never came)."""
        ready, gone = self.supervisor.ready, self.supervisor.gone
        name = self.supervisor.pod.name
        if ready.is_set():
            return
        waiting = asyncio.create_task(ready.wait())
        given_up = asyncio.create_task(gone.wait())
        ends = {waiting, given_up} if self._supervise is None else {waiting, given_up, self._supervise}
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            given_up.cancel()
        if gone.is_set():
            raise TargetError(f"pod {name} is down for good (it did not come back after it died)")
        if not ready.is_set():
            raise TargetError(f"pod {name} is down for good (its supervisor gave up on it)")

    async def _final_read(self) -> None:
        """Read the effects of a live source once, into effects.json; a failure is recorded, not raised."""
        # Interrupted, the user is waiting: a short final read, or none.
        patience_s = (
            10.0 if self.status is RunStatus.INTERRUPTED else self.scenario.target.ready_timeout_s + 60
        )
        try:
            async with asyncio.timeout(patience_s):
                if self.wiring.effects.kind == "postgres":
                    # PostgreSQL is read once the pods are stopped: a pod that leaks connections or
                    # holds a lock cannot cost the run its results.
                    await self.wiring.stop_pods()
                else:
                    await self._pod_back()
                markers = await self.wiring.read_live_effects(self.namespace)
            self.history.emit(EffectsCollected(markers=markers))
        except (HarnessError, TimeoutError, OSError) as exc:
            reason = exc.message if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
            self.history.emit(EffectsCollected(markers=None, error=reason))
