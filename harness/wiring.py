"""A scenario's target, wired: its pod, services, readiness check, supervisor and clients.

A chaos run (:mod:`harness.runner`) and a contract check (:mod:`harness.contract`)
need the same parts, started in the same order and stopped in reverse: the
harness's PostgreSQL and effect sink, then the pods under their supervisors (one
per replica; most targets have one). Every
port is chosen when the wiring is made, so every placeholder is known before
anything starts; ``${VAR}`` values and passwords in URLs go into the redactor.

With ``faults.crash_points`` the wiring also holds the run's hold points
(``harness.crashpoints.holds``): ``{postgres_url}`` then names a PostgreSQL proxy
that can hold commits, the sink reports each call to them, and they kill
replica 0 through its supervisor. The runner puts a fault proxy in front of the
pod that reports each tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from harness.client import McpClient
from harness.client.http import MODERN, McpHttpClient
from harness.client.stdio import StdioClient
from harness.crashpoints.holds import HoldPoints
from harness.crashpoints.pgproxy import PostgresProxy
from harness.errors import ScenarioError
from harness.final_read import final_read
from harness.history import EventType, HistoryWriter, Redactor
from harness.loopback import free_port
from harness.pods.factory import make_pod, secret_values, target_headers
from harness.pods.pod import Pod
from harness.pods.ready import HttpReady, StdioReady
from harness.pods.supervisor import Supervisor
from harness.scenario import Scenario
from harness.services import Postgres
from harness.sink import EffectSink
from harness.template import TemplateError


class TargetWiring:
    """The parts that run a scenario's target; :meth:`start` enters them into an exit stack."""

    def __init__(self, scenario: Scenario, run_dir: Path) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        target = scenario.target
        try:
            self.headers = target_headers(target)
            self.redactor = Redactor([*secret_values(target), *scenario.url_passwords()])
            self.ports = [free_port() for _ in range(target.replicas)]
            self.port = self.ports[0]
            self.pod_urls = [f"http://127.0.0.1:{port}{target.path}" for port in self.ports]
            if target.kubernetes is not None:  # the pods already run: the driver calls their Service
                self.pod_urls = [target.kubernetes.url]
            self.pod_url = self.pod_urls[0]
            urls: dict[str, str] = {}
            crash = scenario.faults.crash_points
            self.holds = None if crash is None else HoldPoints(crash)
            """The hold points of ``faults.crash_points``, or None."""
            pg = scenario.services.postgres
            self.postgres = Postgres(run_dir, pg.database, free_port()) if pg is not None else None
            self.pg_proxy: PostgresProxy | None = None
            if self.postgres is not None:
                urls["postgres_url"] = self.postgres.url
                if self.holds is not None:
                    self.pg_proxy = PostgresProxy(self.postgres.port, self.holds, free_port())
                    urls["postgres_url"] = self.pg_proxy.url(self.postgres.database)
            sink = scenario.audit.effects.sink
            self.sink = (
                EffectSink(run_dir, sink.marker_field, free_port(), dedupe_by_key=sink.dedupe_by_key)
                if sink is not None
                else None
            )
            if self.sink is not None:
                urls["sink_url"] = self.sink.url
                self.sink.hold = self.holds
            self.pods: list[Pod] = [
                make_pod(target, run_dir, port=port, name=f"pod-{i}", urls=urls, seed=scenario.seed)
                for i, port in enumerate(self.ports)
            ]
            self.pod = self.pods[0]
        except TemplateError as exc:
            raise ScenarioError(str(exc)) from None
        self.history: HistoryWriter | None = None
        self.ready_check: HttpReady | StdioReady | None = None
        """Replica 0's readiness check (the only one of a stdio target)."""
        self.supervisor: Supervisor | None = None
        """Replica 0's supervisor: the pod a contract check restarts, and the final read's."""
        self.supervisors: list[Supervisor] = []
        self._supervise: asyncio.Task[None] | None = None

    def supervise(self, history: HistoryWriter) -> Supervisor:
        """The readiness checks and supervisors, writing to ``history``; replica 0's supervisor."""
        target, client = self.scenario.target, self.scenario.client
        self.history = history
        for pod, url in zip(self.pods, self.pod_urls, strict=True):
            ready_check: HttpReady | StdioReady = (
                StdioReady(history=history, key_meta=client.key_meta)
                if target.transport == "stdio"
                else HttpReady(url, protocol=client.protocol, headers=self.headers)
            )
            if self.ready_check is None:
                self.ready_check = ready_check
            self.supervisors.append(
                Supervisor(
                    pod,
                    ready_check,
                    history,
                    ready_timeout_s=target.ready_timeout_s,
                    restart_delay_s=target.restart_delay_s,
                    max_restarts=target.max_restarts,
                    stop_timeout_s=target.stop_timeout_s,
                )
            )
        self.supervisor = self.supervisors[0]
        if self.holds is not None:
            supervisor = self.supervisor
            self.holds.attach(
                history,
                lambda *, trigger, point: supervisor.kill(trigger=trigger, counted=False, point=point),
                supervisor.ready.is_set,
            )
        return self.supervisor

    async def start_services(self, stack: contextlib.AsyncExitStack) -> None:
        """PostgreSQL and the effect sink, where the scenario has them; stopped by ``stack``."""
        if self.postgres is not None:
            stack.push_async_callback(self._stop_postgres)
            await self.postgres.start()
            pg = self.postgres
            self._emit(EventType.SERVICE_STARTED, service="postgres", pid=pg.pid, url=pg.url)
        if self.pg_proxy is not None:
            stack.push_async_callback(self.pg_proxy.close)
            await self.pg_proxy.start()
        if self.sink is not None:
            stack.push_async_callback(self.sink.close)
            await self.sink.start()
        if self.holds is not None:
            stack.callback(self.holds.record_missed)  # once no call can reach a point any more

    async def start_pod(self, stack: contextlib.AsyncExitStack) -> asyncio.Task[None]:
        """Every replica under its supervisor, ready; the supervising task (it ends, raising, if a pod
        gives up)."""
        assert self.supervisors, "supervise() first"
        stack.push_async_callback(self._stop_pod)  # before start: a pod that never got ready is stopped too
        await asyncio.gather(*(s.start() for s in self.supervisors))
        self._supervise = asyncio.create_task(self._supervise_all())
        return self._supervise

    async def _supervise_all(self) -> None:
        """Every replica's supervisor; the first that gives up ends the others and raises."""
        tasks = [asyncio.create_task(s.supervise()) for s in self.supervisors]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def protocol(self) -> str:
        """What the pod answered in (HTTP), or what the stdio handshake agreed."""
        assert self.supervisor is not None
        return self.supervisor.protocol or MODERN

    def clients(self, *, port: int | None = None, count: int = 1, replica: int = 0) -> list[McpClient]:
        """Clients in the protocol the pod answered in, to ``port`` (a fault proxy) or the replica."""
        policy = self.scenario.client
        if isinstance(self.ready_check, StdioReady):
            ready = self.ready_check
            return [StdioClient(lambda: ready.channel)]
        assert isinstance(self.ready_check, HttpReady)
        prefix = "" if len(self.pods) == 1 else f"pod-{replica}/"
        return [
            McpHttpClient(
                self.pod_urls[replica]
                if port is None
                else f"http://127.0.0.1:{port}{self.scenario.target.path}",
                protocol=self.ready_check.protocol,
                headers=self.headers,
                key_meta=policy.key_meta,
                key_header=policy.key_header,
                resume=policy.resume,
                history=self.history,
                name=prefix + ("shared" if count == 1 else f"worker-{i}"),
            )
            for i in range(count)
        ]

    async def read_live_effects(self, namespace: str) -> int:
        """Read a live effect source (PostgreSQL, a read tool, a command) into effects.json now;
        the number of markers found (see :mod:`harness.final_read`)."""
        return await final_read(
            self.scenario.audit.effects,
            self.run_dir,
            pod_url=self.pod_url,
            protocol=self.protocol,
            headers=self.headers,
            postgres_url=self.postgres.url if self.postgres else None,
            namespace=namespace,
        )

    def _emit(self, event: EventType, **fields: object) -> None:
        if self.history is not None:
            self.history.emit(event, **fields)

    async def _stop_pod(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.supervisors))
        if self._supervise is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._supervise

    async def _stop_postgres(self) -> None:
        assert self.postgres is not None
        await self.postgres.stop()
        if self.postgres.pid is not None:
            self._emit(EventType.SERVICE_STOPPED, service="postgres", pid=self.postgres.pid)
