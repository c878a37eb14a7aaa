"""One run of a scenario, start to finish: run directory, pod, driver, injector, then the audit.

The run directory (``results/<run-id>/``) holds everything: the scenario as
run, ``history.jsonl``, the target's data and pod logs, and after the audit
``intents.csv``, ``summary.json`` and ``report.md``. Whatever happens (success,
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
from harness.client import McpHttpClient
from harness.driver import Driver
from harness.errors import HarnessError, UsageError
from harness.faults.injector import Injector
from harness.faults.pods import ProcessPod
from harness.faults.proxy import FaultProxy
from harness.faults.schedule import build_schedule
from harness.faults.supervisor import Supervisor
from harness.history import RUN_ENDED, RUN_STARTED, HistoryWriter
from harness.scenario import Scenario, Target
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


def pod_command(target: Target, *, port: int, run_dir: Path, pod: str) -> tuple[list[str], dict[str, str]]:
    """The target's argv and environment with runtime placeholders filled in."""
    values = {
        "python": sys.executable,
        "port": str(port),
        "data_dir": str(run_dir / "data"),
        "run_dir": str(run_dir),
        "pod": pod,
    }
    argv = [part.format(**values) for part in target.command]
    env = {**os.environ, **{k: v.format(**values) for k, v in target.env.items()}, target.port_env: str(port)}
    return argv, env


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
            f" · kills {injector.done}/{len(injector.schedule)}"
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
    ``progress_interval_s=None`` prints no progress at all (runs side by side).
    """
    namespace = namespace or secrets.token_hex(4)
    history = HistoryWriter(run_dir / "history.jsonl")
    history.emit(
        RUN_STARTED,
        run_id=run_dir.name,
        scenario=scenario.name,
        seed=scenario.seed,
        intents=scenario.workload.intents,
        concurrency=scenario.workload.concurrency,
        namespace=namespace,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        version=__version__,
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}{scenario.target.path}"
    # With stream faults the driver talks to the fault proxy, which talks to the pod.
    proxy_port = free_port() if scenario.faults.stream else None
    driver_url = url if proxy_port is None else f"http://127.0.0.1:{proxy_port}{scenario.target.path}"
    argv, env = pod_command(scenario.target, port=port, run_dir=run_dir, pod="pod-0")
    pod = ProcessPod("pod-0", argv, env, run_dir / "pods" / "pod-0.log")
    kill = scenario.faults.kill
    supervisor = Supervisor(
        pod,
        url,
        history,
        ready_timeout_s=scenario.target.ready_timeout_s,
        restart_delay_s=scenario.target.restart_delay_s,
        max_restarts=scenario.target.max_restarts,
        stop_timeout_s=scenario.target.stop_timeout_s,
    )
    client = McpHttpClient(driver_url)
    injector = Injector(
        build_schedule(scenario), supervisor, history, min_uptime_s=kill.min_uptime_s if kill else 0.0
    )
    driver = Driver(
        Workload(scenario, namespace),
        client,
        history,
        scenario.client,
        concurrency=scenario.workload.concurrency,
        seed=scenario.seed,
        progress=scenario.workload.progress,
        deadline_s=scenario.workload.max_duration_s,
        on_dispatch=injector.on_dispatch,
    )
    proxy = (
        None
        if proxy_port is None
        else FaultProxy(
            port,
            scenario.faults.stream,
            seed=scenario.seed,
            history=history,
            lookup=driver.attempt_of,
            default_hold_s=scenario.client.attempt_timeout_s + 0.5,
        )
    )
    progress = Progress(out, progress_interval_s) if progress_interval_s is not None else None
    status, reason = "failed", None
    background: list[asyncio.Task[None]] = []
    supervise: asyncio.Task[None] | None = None
    try:
        if proxy is not None:
            await proxy.start(proxy_port or 0)
        await supervisor.start()
        supervise = asyncio.create_task(supervisor.supervise())
        background = [asyncio.create_task(injector.run())]
        if progress is not None:
            background.append(asyncio.create_task(progress.run(driver, injector, supervisor, history)))
        driving = asyncio.create_task(driver.run())
        await asyncio.wait({driving, supervise}, return_when=asyncio.FIRST_COMPLETED)
        if not driving.done():
            # The supervisor gave up on the target: nothing more can be measured.
            driving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driving
            supervise.result()
        driving.result()
        status = "deadline" if driver.deadline_hit else "completed"
        if driver.deadline_hit:
            reason = f"workload.max_duration_s={scenario.workload.max_duration_s:g} reached"
    except asyncio.CancelledError:
        status, reason = "interrupted", "cancelled (Ctrl-C or SIGTERM)"
        raise
    except HarnessError as exc:
        reason = exc.message
        raise
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if progress is not None and supervise is not None:  # the driver ran: show where it got to
            progress.print(driver, injector, supervisor, history)
            progress.finish()
        await client.aclose()
        if proxy is not None:
            await proxy.close()
        await supervisor.stop()
        if supervise is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await supervise
        history.emit(
            RUN_ENDED, status=status, reason=reason, kills=supervisor.kills, restarts=supervisor.restarts
        )
        history.close()
    return status
