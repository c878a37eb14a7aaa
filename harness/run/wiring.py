"""A scenario's target, wired: its pod, services, balancer, readiness check, supervisor and clients.

A chaos run (:mod:`harness.run.runner`) and a contract check (:mod:`harness.contract`)
need the same parts, started in the same order and stopped in reverse: the
services the scenario asks for (:mod:`harness.run.services.registry`, in its order: the
harness's PostgreSQL, effect sink and downstream proxy), then (a run only) those in front of the
replicas (nginx), then the pods under their supervisors (one per replica; most targets
have one). The wiring names no service: each one fills in its placeholders and hands the target
what it needs (environment, mounts). Every port is chosen when the wiring is made, so every
placeholder is known before anything starts, including the ports where a run's fault proxies
will sit in front of the replicas: nginx and the clients are pointed there.
``${VAR}`` values and passwords in URLs go into the redactor, which is also
applied to the logs the target and services wrote once they have stopped.

Every run has a decision router (``harness.crashpoints.router``) with the plan of
its ``faults.crash_points`` (observe, where there are none): ``{postgres_url}``
names a PostgreSQL proxy that reports each commit to it, and the sink and the
downstream proxy report each call, so every attempt's ``attempt_ended`` says which
points it reached. With crash points the file tracer also reports each file
operation on the pod's data directory (``harness.crashpoints.fsholds``, a service
that seizes each instance of the pod as it starts and rolls the data back after a
power loss), a run puts a fault proxy in front of the pod that reports each tool
call, and the router kills replica 0 through its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import urlsplit

from harness import history_schema, rundir
from harness.client import McpClient
from harness.client.host import Host
from harness.client.http import MODERN, McpHttpClient
from harness.client.messages import CallResult
from harness.client.oauth import OAuthTokens
from harness.client.stdio import StdioClient
from harness.crashpoints.fsholds import FileTracer, PowerLosses
from harness.crashpoints.plans import plan_for
from harness.crashpoints.router import Router
from harness.effects.base import Sample
from harness.effects.registry import source_of
from harness.errors import ScenarioError, TargetStartError
from harness.history import Detail, HistoryWriter, Outcome
from harness.loopback import free_port
from harness.pods.factory import make_pod, target_headers, target_oauth
from harness.pods.pod import Pod
from harness.pods.process import ProcessPod
from harness.pods.ready import HttpReady, StdioReady
from harness.pods.supervisor import Supervisor
from harness.pods.watchdog import guard, redact_logs
from harness.redaction import Redactor
from harness.run.bus import Bus
from harness.run.final_read import Reach, final_read, read_now
from harness.run.services import registry
from harness.run.services.base import Given, Service
from harness.scenario import Scenario, TargetSpec
from harness.template import TemplateError

S = TypeVar("S", bound=Service)

LIST_TIMEOUT_S = 10.0
"""How long one ``tools/list`` page may take when a run learns its tool's ``x-mcp-header`` marks."""


def host_roots(target: TargetSpec, run_dir: Path) -> tuple[PurePosixPath, ...]:
    """The roots a client offers a target: its data directory, as the server sees it; none for a
    server the harness does not start (its directories are not this machine's)."""
    if target.url is not None or target.kubernetes is not None:
        return ()
    if target.runtime == "docker":
        return (PurePosixPath(target.data_mount),)
    return (PurePosixPath((run_dir / rundir.DATA).resolve()),)


class TargetWiring:
    """The parts that run a scenario's target; :meth:`start` enters them into an exit stack."""

    def __init__(self, scenario: Scenario, run_dir: Path) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        target = scenario.target
        try:
            self.headers = target_headers(target)
            self.redactor = Redactor(scenario.secrets())
        except TemplateError as exc:
            raise ScenarioError(str(exc)) from None
        self.history = HistoryWriter(
            run_dir / rundir.HISTORY, redact=self.redactor.text, check=history_schema.checker()
        )
        """The run's history (its owner enters it into its exit stack, which closes it), redacted."""
        self.bus = Bus()
        """What the run's parts tell each other (:mod:`harness.run.bus`)."""
        try:
            self._wire(scenario, run_dir)
        except BaseException:
            self.history.close()
            raise
        self.ready_check: HttpReady | StdioReady | None = None
        """Replica 0's readiness check (the only one of a stdio target)."""
        self.supervisor: Supervisor | None = None
        """Replica 0's supervisor: the pod a contract check restarts, and the final read's."""
        self.supervisors: list[Supervisor] = []
        self.files: FileTracer | None = None
        """The file tracer of a run whose crash points trace files (made with the supervisors)."""
        self._supervise: asyncio.Task[None] | None = None
        self._pods_stopped = False

    def _wire(self, scenario: Scenario, run_dir: Path) -> None:
        """Every part whose ports and placeholders must be known before anything starts."""
        target = scenario.target
        try:
            oauth = target_oauth(target)
            self.ports = [free_port() for _ in range(target.replicas)]
            self.port = self.ports[0]
            self.pod_urls = [f"http://127.0.0.1:{port}{target.path}" for port in self.ports]
            self.upstreams: list[tuple[str, int, str | None]] = [
                ("127.0.0.1", port, None) for port in self.ports
            ]
            """Where each replica listens, and the ``Host`` it expects if not the one a client names: what a
            fault proxy in front of it connects to."""
            if target.kubernetes is not None:  # the pods already run: the driver calls their Service
                self.pod_urls = [target.kubernetes.url]
            if target.url is not None:  # it already runs, anywhere: the driver calls its URL
                self.pod_urls = [target.url]
                parts = urlsplit(target.url)
                assert parts.hostname is not None
                assert parts.port is not None  # the scenario's url has both
                self.upstreams = [(parts.hostname, parts.port, parts.netloc.rpartition("@")[2])]
            self.pod_url = self.pod_urls[0]
            self.auth = (
                None
                if oauth is None
                else OAuthTokens(self.pod_url, oauth, on_secret=self.redactor.add, history=self.history)
            )
            """``target.auth``: the run's tokens, shared by its clients, probes and reads (the pod's own
            URL is the resource they are for, whatever proxy a client goes through)."""
            self.effects = source_of(scenario.audit.effects)
            """Where the run's effects are counted (``audit.effects``)."""
            crash = scenario.faults.crash_points
            self.router = Router(plan_for(crash, looks=scenario.audit.checkpoints.enabled))
            """Where every hold site reports its points: the plan of ``faults.crash_points``, else observe."""
            self.crashes = crash is not None
            """Whether a plan holds points (the fault proxy and the stdio host then report calls too)."""
            self.host = Host(roots=host_roots(target, run_dir), elicitation=scenario.client.elicitation)
            """What every client of the run answers a server that asks (roots, forms)."""
            given = Given(scenario, run_dir, self.router, self.history, self.redactor.text)
            self.services: list[Service] = [kind(given) for kind in registry.wanted(scenario, fronts=False)]
            """The services beside the target, in start order, each with its ports chosen."""
            urls: dict[str, str] = {}
            handed: dict[str, str] = {}
            mounts: dict[Path, str] = {}
            for service in self.services:
                gives = service.handed()
                urls |= gives.placeholders
                handed |= gives.env
                mounts |= gives.mounts
            self.pods: list[Pod] = [
                make_pod(
                    target,
                    run_dir,
                    port=port,
                    name=f"pod-{i}",
                    urls=urls,
                    seed=scenario.seed,
                    handed=handed,
                    mounts=mounts,
                )
                for i, port in enumerate(self.ports)
            ]
            self.pod = self.pods[0]
            # With stream faults or crash points, a run puts a fault proxy in front of each replica, on
            # these ports.
            self.proxy_ports = (
                [free_port() for _ in self.ports]
                if target.transport == "http" and (scenario.faults.stream or self.crashes)
                else []
            )
            fronting = dataclasses.replace(given, fronted=self.proxy_ports or self.ports)
            self.fronts: list[Service] = [kind(fronting) for kind in registry.wanted(scenario, fronts=True)]
            """The services in front of the replicas (or their fault proxies): nginx, a run's only."""
        except TemplateError as exc:
            raise ScenarioError(str(exc)) from None

    def supervise(self) -> Supervisor:
        """The readiness checks and supervisors, writing to the history; replica 0's supervisor."""
        target, client, history = self.scenario.target, self.scenario.client, self.history
        for pod, url in zip(self.pods, self.pod_urls, strict=True):
            ready_check: HttpReady | StdioReady = (
                StdioReady(history=history, key_meta=client.key_meta, host=self.host)
                if target.transport == "stdio"
                else HttpReady(
                    url,
                    protocol=client.protocol,
                    headers=self.headers,
                    auth=self.auth,
                    port_env=target.port_env,
                )
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
                    bus=self.bus,
                )
            )
        self.supervisor = self.supervisors[0]
        crash = self.scenario.faults.crash_points
        kill = self.scenario.faults.kill
        losses: PowerLosses | None = None
        if crash is not None and crash.traces_files() and self._local():
            losses = self.router
        elif kill is not None and kill.power_loss:  # an ordinary run: the tracer only keeps what is durable
            losses = self.supervisor
        if losses is not None:
            target = self.scenario.target
            self.files = FileTracer(
                self.run_dir / rundir.DATA,
                self.router,
                losses,
                history,
                self.run_dir.name,
                bus=self.bus,
                pod=self.supervisor.pod.name,
                seen_as=target.data_mount if target.runtime == "docker" else None,
            )
        if self._observers_are_feeds():
            self.router.defer()
        supervisor = self.supervisor
        self.router.attach(
            history,
            (lambda *, trigger, point: supervisor.kill(trigger=trigger, counted=False, point=point))
            if crash is not None and crash.kills()
            else None,
            supervisor.ready.is_set,
            lambda: supervisor.pod.pid,
        )
        return self.supervisor

    def _observers_are_feeds(self) -> bool:
        """Whether the run only observes and no site in the harness's process observes: the effect sink,
        the downstream proxy and the file tracer report in process, as the fault proxy and the stdio host
        do where there are crash points. Then the run's points are placed after it (decision 0092)."""
        scenario = self.scenario
        return (
            not self.crashes
            and self.files is None
            and scenario.audit.effects.sink is None
            and scenario.services.downstream is None
        )

    def _local(self) -> bool:
        """Whether the harness runs the pods on this machine (and so can trace their file operations)."""
        return self.scenario.target.runtime in ("process", "docker")

    @contextlib.asynccontextmanager
    async def running_services(self) -> AsyncIterator[None]:
        """The services beside the target, where the scenario has them (PostgreSQL and its proxy, the
        effect sink, the downstream proxy), in the registry's order; stopped in reverse on the way out
        (and the OAuth client's connections to the authorization server closed)."""
        async with contextlib.AsyncExitStack() as stack:
            if self.auth is not None:
                stack.push_async_callback(self.auth.aclose)
            for service in self.services:
                await stack.enter_async_context(service.running())
            stack.callback(self.router.record_missed)  # once no call can reach a point any more
            if self.files is not None:
                (self.run_dir / rundir.DATA).mkdir(parents=True, exist_ok=True)
                await stack.enter_async_context(self.files.running())
                if self.files.refused is None and isinstance(self.pod, ProcessPod):
                    # stopped at its watched system calls only: a seccomp filter it installs once seized
                    self.pod.launch_through([sys.executable, "-m", "harness.crashpoints.filtered"])
                kill = self.scenario.faults.kill
                if self.files.refused is not None and kill is not None and kill.power_loss:
                    raise TargetStartError(
                        "faults.kill.power_loss needs the pod's file operations traced, and "
                        f"{self.files.refused} (ptrace: root, or the same user with kernel.yama.ptrace_scope "
                        "0 or 1; a container needs CAP_SYS_PTRACE)"
                    )
            yield

    @contextlib.asynccontextmanager
    async def running_front(self) -> AsyncIterator[None]:
        """The services in front of the replicas, where the scenario has one (nginx; a run's: a contract
        check calls replica 0 directly); stopped in reverse on the way out."""
        async with contextlib.AsyncExitStack() as stack:
            for service in self.fronts:
                await stack.enter_async_context(service.running())
            yield

    def service(self, kind: type[S]) -> S | None:
        """The run's service of ``kind``, if the scenario has it (what ``init`` and tests reach it by)."""
        return next((s for s in (*self.services, *self.fronts) if isinstance(s, kind)), None)

    @contextlib.asynccontextmanager
    async def running_pods(self) -> AsyncIterator[asyncio.Task[None]]:
        """Every replica under its supervisor, ready (:meth:`supervise` first); yields the supervising task
        (it ends, raising, if a pod's supervisor gives up). The pods stop on the way out, also those that
        never got ready."""
        assert self.supervisors, "supervise() first"
        self.guard_logs()
        try:
            await asyncio.gather(*(s.start() for s in self.supervisors))
            self._supervise = asyncio.create_task(self._supervise_all())
            yield self._supervise
        finally:
            await self.stop_pods()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Supervisor]:
        """The target as a contract check or ``init`` uses it: services, then the pods (no balancer:
        they call replica 0); yields replica 0's supervisor."""
        supervisor = self.supervise()
        async with self.running_services(), self.running_pods():
            yield supervisor

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

    def run_clients(
        self, lookup: Callable[[object], tuple[int, int] | None] | None = None
    ) -> list[list[McpClient]]:
        """A run's clients, per replica: to its fault proxy, if any, or to the replica; behind nginx,
        one list, as nginx picks the replica. One client per worker where each needs its own session."""
        count = 1
        if self.scenario.client.sessions == "per_worker" and self.protocol != MODERN:
            count = self.scenario.workload.concurrency
        front = next((s for s in self.fronts if s.entry_port is not None), None)
        if front is not None:
            assert front.entry_port is not None
            if self.protocol != MODERN:
                raise ScenarioError(
                    f"{front.facts.section} needs replicas that speak {MODERN} (no sessions); the target "
                    f"answered in {self.protocol}, whose sessions live on one replica and would be lost "
                    f"when {front.facts.name} sends the next call to another"
                )
            return [self.clients(port=front.entry_port, count=count)]
        return [
            self.clients(
                port=self.proxy_ports[replica] if self.proxy_ports else None,
                count=count,
                replica=replica,
                lookup=lookup,
            )
            for replica in range(len(self.pods))
        ]

    def clients(
        self,
        *,
        port: int | None = None,
        count: int = 1,
        replica: int = 0,
        lookup: Callable[[object], tuple[int, int] | None] | None = None,
    ) -> list[McpClient]:
        """Clients in the protocol the pod answered in, to ``port`` (a fault proxy) or the replica; a stdio
        client holds its calls itself (``lookup``: the driver's request ids) where there are crash points."""
        policy = self.scenario.client
        if isinstance(self.ready_check, StdioReady):
            ready = self.ready_check
            router = self.router if lookup is not None and self.crashes else None
            return [StdioClient(lambda: ready.channel, router=router, lookup=lookup)]
        assert isinstance(self.ready_check, HttpReady)
        prefix = "" if len(self.pods) == 1 else f"pod-{replica}/"
        return [
            McpHttpClient(
                self.pod_urls[replica]
                if port is None
                else f"http://127.0.0.1:{port}{self.scenario.target.endpoint_path}",
                protocol=self.ready_check.protocol,
                headers=self.headers,
                key_meta=policy.key_meta,
                key_header=policy.key_header,
                resume=policy.resume,
                history=self.history,
                auth=self.auth,
                name=prefix + ("shared" if count == 1 else f"worker-{i}"),
                host=self.host,
            )
            for i in range(count)
        ]

    async def mirror_marks(self, clients: Sequence[McpClient]) -> None:
        """2026-07-28 (SEP-2243): the workload's tool may mark arguments ``x-mcp-header``, which each call
        mirrors in ``Mcp-Param-*`` headers (the SDK's server refuses a call that does not, whatever its
        arguments). The tools are listed once, from replica 0 itself (past any fault proxy: the listing
        is no attempt to fault), and every client of the run is given what the listing said. A
        listing that fails leaves the calls without marks, as before: a server that wanted them
        refuses them, and the run's attempts say so."""
        modern = [c for c in clients if isinstance(c, McpHttpClient) and c.modern]
        if not modern:
            return
        lister = self.clients()[0]
        assert isinstance(lister, McpHttpClient)
        try:
            await lister.learn_marks(self.scenario.workload.tool, timeout=LIST_TIMEOUT_S)
        finally:
            await lister.aclose()
        for client in modern:
            client.adopt_marks(lister)

    async def request(
        self, client: McpClient, method: str, params: dict[str, Any], request_id: int, *, timeout: float
    ) -> CallResult:
        """A request other than a tool call (``tools/list``) to replica 0: over ``client`` (one of
        :meth:`clients`) for HTTP, over the channel the stdio handshake opened for a stdio target."""
        if isinstance(client, McpHttpClient):
            return await client.request(method, params, request_id, timeout=timeout)
        assert isinstance(self.ready_check, StdioReady), "a client of this wiring, once its pods run"
        channel = self.ready_check.channel
        if channel is None or channel.closed:  # the process is down: the request reached nothing
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED)
        return await channel.request(method, params, request_id, timeout=timeout)

    def reach(self, namespace: str) -> Reach:
        """Where the scenario's live effect source is read (see :mod:`harness.run.final_read`)."""
        audit: dict[str, str] = {}
        for service in self.services:
            audit |= service.audit_values()
        postgres_url = audit.get("postgres_url")  # the harness's own PostgreSQL, if any
        return Reach(self.pod_url, self.protocol, self.headers, postgres_url, namespace, self.auth)

    async def read_live_effects(self, namespace: str) -> int:
        """The final read of a live effect source (PostgreSQL, a read tool, a command) into effects.json
        now; the number of markers found."""
        return await final_read(self.effects, self.run_dir, self.reach(namespace))

    async def read_effects_now(self, namespace: str) -> Sample:
        """What the effect source holds now, whatever its kind (a checkpoint read's, a contract check's)."""
        return await read_now(self.effects, self.run_dir, self.reach(namespace))

    async def stop_pods(self) -> None:
        """Stop every replica and its supervisor, once (a run's final read of PostgreSQL stops them
        first; the exit stack's own call is then nothing)."""
        if self._pods_stopped:
            return
        self._pods_stopped = True
        await asyncio.gather(*(s.stop() for s in self.supervisors))
        if self._supervise is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._supervise

    def _logs(self) -> list[Path]:
        """Where the target and the services write their logs (they write them directly)."""
        return [self.run_dir / rundir.PODS, *(self.run_dir / name for name in registry.logs())]

    def guard_logs(self) -> None:
        """Tell the watchdog the secrets and the logs: a SIGKILLed harness cannot redact them itself."""
        if self.redactor:
            guard.logs(self.scenario.secrets(), self._logs())

    def redact_logs(self) -> None:
        """Hide secrets in the logs the target and services wrote; call it once every pod and service
        has stopped writing (the watchdog is then released from doing it)."""
        if not self.redactor:
            return
        redact_logs(self._logs(), self.redactor)
        guard.unlogs(self._logs())
