"""One run of a scenario, start to finish: run directory, pod, driver, injector, then the audit.

The run directory (``results/<run-id>/``) holds everything: the scenario as
run, ``history.jsonl``, the target's data and pod logs, the effect sink's
record or the final read of effects, and after the audit ``intents.csv``,
``summary.json`` and ``report.md``. Whatever happens (success,
a target that will not start, Ctrl-C, SIGTERM) every pod is stopped and the
history is closed with a ``run_ended`` event saying how the run ended, so a
partial run can still be audited with ``mcp-chaos audit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TextIO, TypeVar

from harness import __version__
from harness.audit.collect import collect
from harness.client import McpHttpClient
from harness.driver import Driver
from harness.errors import HarnessError, UsageError
from harness.faults.docker_pods import DockerPod
from harness.faults.injector import Injector
from harness.faults.pods import Pod, ProcessPod
from harness.faults.proxy import FaultProxy
from harness.faults.schedule import build_schedule
from harness.faults.supervisor import Supervisor
from harness.history import (
    EFFECTS_COLLECTED,
    RUN_ENDED,
    RUN_STARTED,
    SERVICE_STARTED,
    SERVICE_STOPPED,
    HistoryWriter,
)
from harness.scenario import Scenario
from harness.services import Postgres
from harness.sink import EffectSink
from harness.workload import Workload

T = TypeVar("T")


async def cancel_on_sigterm(coro: Awaitable[T]) -> T:
    """Await ``coro`` with SIGTERM cancelling it, as Ctrl-C does under ``asyncio.run``."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    installed = False
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            installed = True
    try:
        return await coro
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)


def new_run_id(scenario: Scenario) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{secrets.token_hex(2)}"


def prepare_run_dir(results_dir: Path, scenario: Scenario, run_id: str | None = None) -> Path:
    """Create ``results_dir/<run-id>/`` with the scenario as run; refuses to reuse a directory."""
    run_dir = results_dir / (run_id or new_run_id(scenario))
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise UsageError(f"run directory {run_dir} already exists; pick another --run-id") from None
    except OSError as exc:
        raise UsageError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    (run_dir / "data").mkdir()
    (run_dir / "pods").mkdir()
    (run_dir / "scenario.yaml").write_text(scenario.dump_yaml(), encoding="utf-8")
    return run_dir


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the pod keeps it across restarts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def placeholder_values(
    scenario: Scenario, *, run_dir: Path, port: int, pod: str, urls: dict[str, str]
) -> dict[str, str]:
    """What the target's ``{placeholders}`` stand for in this run (for an image: inside the container)."""
    docker = scenario.target.runtime == "docker"
    return {
        "python": sys.executable,
        "port": str(port),
        "data_dir": scenario.target.data_mount if docker else str(run_dir / "data"),
        "run_dir": str(run_dir),
        "pod": pod,
        "postgres_url": urls.get("postgres_url", "{postgres_url}"),
        "sink_url": urls.get("sink_url", "{sink_url}"),
    }


def make_pod(scenario: Scenario, run_dir: Path, *, port: int, name: str, urls: dict[str, str]) -> Pod:
    """The pod for the scenario's runtime, with its placeholders filled in."""
    target = scenario.target
    values = placeholder_values(scenario, run_dir=run_dir, port=port, pod=name, urls=urls)
    env = {k: v.format(**values) for k, v in target.env.items()}
    env[target.port_env] = str(port)
    command = [part.format(**values) for part in target.command] if target.command else None
    log_path = run_dir / "pods" / f"{name}.log"
    if target.image is not None:
        return DockerPod(
            name,
            image=target.image,
            command=command,
            env=env,
            data_dir=run_dir / "data",
            data_mount=target.data_mount,
            log_path=log_path,
            run_id=run_dir.name,
        )
    assert command is not None
    return ProcessPod(name, command, {**os.environ, **env}, log_path)


class Progress:
    """A status line while the run goes on: live on a terminal, every few seconds in CI logs."""

    def __init__(self, out: TextIO, interval_s: float) -> None:
        self.out = out
        self.tty = out.isatty()
        self.interval_s = interval_s if self.tty else max(interval_s, 5.0)

    async def run(
        self, driver: Driver, injector: Injector, supervisor: Supervisor, history: HistoryWriter
    ) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.print(driver, injector, supervisor, history)

    def print(
        self, driver: Driver, injector: Injector, supervisor: Supervisor, history: HistoryWriter
    ) -> None:
        s = driver.stats
        line = (
            f"[{history.now():7.1f}s] intents {s.finished}/{s.planned} ({s.finished / max(1, s.planned):.0%})"
            f" · attempts {s.attempts} · in flight {s.in_flight}"
            f" · pod faults {injector.done}/{len(injector.schedule)}"
            f" · pod {'ready' if supervisor.ready.is_set() else 'DOWN'}"
        )
        if self.tty:
            self.out.write("\r" + line.ljust(100))
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


async def execute(
    scenario: Scenario,
    run_dir: Path,
    *,
    out: TextIO = sys.stderr,
    progress_interval_s: float | None = 1.0,
    namespace: str | None = None,
) -> str:
    """Run the scenario into ``run_dir``; returns how the run ended (completed or deadline).

    Raises HarnessError subclasses for infrastructure failures and lets
    cancellation (Ctrl-C, SIGTERM) through, always after cleaning up.
    ``progress_interval_s=None`` prints no progress at all.
    """
    run = _Run(scenario, run_dir, namespace or secrets.token_hex(4))
    progress = Progress(out, progress_interval_s) if progress_interval_s is not None else None
    return await run.execute(progress)


class _Run:
    """The parts of one run and the order they start and stop in.

    Start: services (PostgreSQL, the effect sink), the fault proxy, the pod, then
    the injector and the driver. Stop, whatever happened: the driver's client,
    the final read of effects (while pod and services are still up), the proxy,
    the pod, the services; then ``run_ended`` closes the history.
    """

    def __init__(self, scenario: Scenario, run_dir: Path, namespace: str) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.namespace = namespace
        self.history = HistoryWriter(run_dir / "history.jsonl")
        self.history.emit(
            RUN_STARTED,
            run_id=run_dir.name,
            scenario=scenario.name,
            seed=scenario.seed,
            intents=scenario.workload.intents,
            concurrency=scenario.workload.concurrency,
            runtime=scenario.target.runtime,
            namespace=namespace,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            version=__version__,
        )
        # Every port is chosen now, so every placeholder is known before anything starts.
        self.port = free_port()
        self.pod_url = f"http://127.0.0.1:{self.port}{scenario.target.path}"
        urls: dict[str, str] = {}
        pg = scenario.services.postgres
        self.postgres = Postgres(run_dir, pg.database, free_port()) if pg is not None else None
        if self.postgres is not None:
            urls["postgres_url"] = self.postgres.url
        sink = scenario.audit.effects.sink
        self.sink = EffectSink(run_dir, sink.marker_field, free_port()) if sink is not None else None
        if self.sink is not None:
            urls["sink_url"] = self.sink.url
        self.proxy_port = free_port() if scenario.faults.stream else None
        driver_url = (
            self.pod_url
            if self.proxy_port is None
            else f"http://127.0.0.1:{self.proxy_port}{scenario.target.path}"
        )
        self.supervisor = Supervisor(
            make_pod(scenario, run_dir, port=self.port, name="pod-0", urls=urls),
            self.pod_url,
            self.history,
            ready_timeout_s=scenario.target.ready_timeout_s,
            restart_delay_s=scenario.target.restart_delay_s,
            max_restarts=scenario.target.max_restarts,
            stop_timeout_s=scenario.target.stop_timeout_s,
        )
        kill, pause = scenario.faults.kill, scenario.faults.pause
        self.injector = Injector(
            build_schedule(scenario),
            self.supervisor,
            self.history,
            min_uptime_s=kill.min_uptime_s if kill else 0.0,
            pause_min_uptime_s=pause.min_uptime_s if pause else 0.0,
        )
        self.client = McpHttpClient(driver_url)
        self.driver = Driver(
            Workload(scenario, namespace),
            self.client,
            self.history,
            scenario.client,
            concurrency=scenario.workload.concurrency,
            seed=scenario.seed,
            progress=scenario.workload.progress,
            deadline_s=scenario.workload.max_duration_s,
            on_dispatch=self.injector.on_dispatch,
        )
        self.proxy = (
            None
            if self.proxy_port is None
            else FaultProxy(
                self.port,
                scenario.faults.stream,
                seed=scenario.seed,
                history=self.history,
                lookup=self.driver.attempt_of,
                default_hold_s=scenario.client.attempt_timeout_s + 0.5,
            )
        )

    async def execute(self, progress: Progress | None) -> str:
        status, reason = "failed", None
        background: list[asyncio.Task[None]] = []
        supervise: asyncio.Task[None] | None = None
        driving: asyncio.Task[object] | None = None
        try:
            if self.postgres is not None:
                await self.postgres.start()
                self.history.emit(
                    SERVICE_STARTED, service="postgres", pid=self.postgres.pid, url=self.postgres.url
                )
            if self.sink is not None:
                await self.sink.start()
            if self.proxy is not None:
                await self.proxy.start(self.proxy_port or 0)
            await self.supervisor.start()
            supervise = asyncio.create_task(self.supervisor.supervise())
            background = [asyncio.create_task(self.injector.run())]
            if progress is not None:
                background.append(
                    asyncio.create_task(
                        progress.run(self.driver, self.injector, self.supervisor, self.history)
                    )
                )
            driving = asyncio.create_task(self.driver.run())
            await asyncio.wait({driving, supervise}, return_when=asyncio.FIRST_COMPLETED)
            if not driving.done():
                # The supervisor gave up on the target: nothing more can be measured.
                driving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await driving
                supervise.result()
            driving.result()
            status = "deadline" if self.driver.deadline_hit else "completed"
            if self.driver.deadline_hit:
                reason = f"workload.max_duration_s={self.scenario.workload.max_duration_s:g} reached"
        except asyncio.CancelledError:
            status, reason = "interrupted", "cancelled (Ctrl-C or SIGTERM)"
            raise
        except HarnessError as exc:
            reason = exc.message
            raise
        finally:
            # The driver first: after Ctrl-C it must not go on making attempts during teardown.
            for task in [driving, *background]:
                if task is not None:
                    task.cancel()
            await asyncio.gather(
                *(t for t in [driving, *background] if t is not None), return_exceptions=True
            )
            if progress is not None and supervise is not None:  # the driver ran: show where it got to
                progress.print(self.driver, self.injector, self.supervisor, self.history)
                progress.finish()
            await self.client.aclose()
            if supervise is not None and self.scenario.audit.effects.collected_at_end:
                # Interrupted, the user is waiting: a short final read, or none.
                patience = 10.0 if status == "interrupted" else self.scenario.target.ready_timeout_s + 60
                await self._final_read(patience)
            await self._teardown(supervise)
            self.history.emit(
                RUN_ENDED,
                status=status,
                reason=reason,
                kills=self.supervisor.kills,
                restarts=self.supervisor.restarts,
            )
            self.history.close()
        return status

    async def _final_read(self, patience_s: float) -> None:
        """Read the effects of a live source once, into effects.json; a failure is recorded, not raised."""
        try:
            async with asyncio.timeout(patience_s):
                await self.supervisor.ready.wait()
                markers = await collect(
                    self.scenario.audit.effects,
                    self.run_dir,
                    pod_url=self.pod_url,
                    postgres_url=self.postgres.url if self.postgres else None,
                    namespace=self.namespace,
                )
            self.history.emit(EFFECTS_COLLECTED, markers=markers)
        except (HarnessError, TimeoutError, OSError) as exc:
            reason = exc.message if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
            self.history.emit(EFFECTS_COLLECTED, markers=None, error=reason)

    async def _teardown(self, supervise: asyncio.Task[None] | None) -> None:
        if self.proxy is not None:
            await self.proxy.close()
        await self.supervisor.stop()
        if supervise is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await supervise
        if self.sink is not None:
            await self.sink.close()
        if self.postgres is not None:
            await self.postgres.stop()
            if self.postgres.pid is not None:
                self.history.emit(SERVICE_STOPPED, service="postgres", pid=self.postgres.pid)
