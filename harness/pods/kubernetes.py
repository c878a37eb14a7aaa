"""The Kubernetes runtime: pods that already run in a cluster, as one pod to the supervisor.

For users whose MCP server already runs as a Deployment behind a Service. The
harness starts nothing: :meth:`KubernetesPod.start` waits until as many pods
match the label selector and are Ready as there were at the first look (the
replicas a Deployment restores), the supervisor's readiness check then calls
the Service. A kill picks a victim among the Ready pods with the run's seeded
RNG and deletes it through the API (grace period 0, the scenario's, or the
pod's own), or creates a Chaos Mesh ``PodChaos`` (``pod-kill``) naming it; the
victim is "exited" once its object is gone, and the next :meth:`start` is the
wait for its replacement. A container the kubelet restarted in place (its
restart count grew) is a crash, as a process that died on its own is.

The supervisor names pods in its events by :attr:`KubernetesPod.name`, so the
name follows what happened: the Ready pods at start, the victim at a kill and
its exit, the replacement when it is Ready. A Kubernetes pod has no pid on this
machine: ``pid`` is 0 while the pods are watched.

At the end (:meth:`stop`) every ``PodChaos`` the run created is deleted (its
name is recorded before it is created, so an object whose creation timed out
is deleted too), then the logs of the pods that match the selector are copied
into the run directory. A deleted victim's log went with it: only a log
collector in the cluster keeps those.

The official client is synchronous. A kill is one list and one delete (or
create) on the event loop, like the Docker runtime's kill, so its event precedes
the attempts it breaks; polls and log reads run in threads. Every call has a
timeout and none is retried (the client's default, urllib3's three retries of a
read that timed out, made an API server that accepts and never answers hold a
start for 121 s with ``ready_timeout_s: 10``); while :meth:`KubernetesPod.start`
waits, each call's timeout is what is left of ``target.ready_timeout_s``, and so is
the kubeconfig's exec credential plugin's (:mod:`harness.pods.credentials`: its own
process group, killed on Ctrl-C, at the end and by the watchdog). This runtime has been
tested against a local fake of the API endpoints it uses (``tests/kubefake.py``),
never against a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi, V1Pod
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException, load_kube_config

from harness.errors import ScenarioError, TargetError, TargetNotReady, TargetStartError
from harness.pods import credentials
from harness.scenario import KubernetesTarget

POLL_S = 0.2
"""How often the pods are listed while waiting for an exit or a replacement (5 lists a second)."""
REQUEST_TIMEOUT_S = (5.0, 15.0)
"""Connect and read timeouts of every API call: a hung API server cannot hold a run."""
MIN_REQUEST_S = 0.2
"""The shortest timeout a call is given when the deadline is (nearly) reached: it may still answer."""
CHAOS_GROUP, CHAOS_VERSION, CHAOS_PLURAL = "chaos-mesh.org", "v1alpha1", "podchaos"
MANAGED_BY = "app.kubernetes.io/managed-by"
RUN_LABEL = "mcp-chaos.run"
"""Labels on every object the harness creates: ``kubectl delete podchaos -l mcp-chaos.run=RUN``."""


def _api_error(exc: BaseException) -> str:
    """An API failure in one line: the status and the API server's own message."""
    if isinstance(exc, credentials.PluginFailed):
        return exc.message
    if isinstance(exc, urllib3.exceptions.MaxRetryError):  # what failed, without urllib3's nesting
        return f"{type(exc.reason).__name__ if exc.reason else 'no answer'} ({exc.url})"
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = str(json.loads(exc.body or "{}").get("message", ""))
        except (ValueError, AttributeError):
            message = str(exc.body or "")[:200]
        return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {exc}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what and where (PyYAML's own message spans several)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)


def _timed_out(exc: BaseException) -> bool:
    """Whether a call failed for want of an answer (not an answer that said no)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        exc = exc.reason or exc
    return isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError)


_API_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError, credentials.PluginFailed)


credentials.install()


def _label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63].strip("._-") or "run"


def is_ready(pod: V1Pod) -> bool:
    """Ready, and not being deleted (a terminating pod leaves the Service's endpoints)."""
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return False
    conditions = (pod.status.conditions if pod.status is not None else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def restarts(pod: V1Pod) -> int:
    statuses = (pod.status.container_statuses if pod.status is not None else None) or []
    return sum(s.restart_count for s in statuses)


def last_exit_code(pod: V1Pod) -> int:
    """The exit code of the container that last terminated, -1 if the API has none."""
    for status in (pod.status.container_statuses if pod.status is not None else None) or []:
        terminated = status.last_state.terminated if status.last_state is not None else None
        if terminated is not None:
            return terminated.exit_code
    return -1


def _name(pod: V1Pod) -> str:
    assert pod.metadata is not None
    assert pod.metadata.name is not None
    return pod.metadata.name


class KubernetesPod:
    """The pods a label selector matches, killed and watched through the Kubernetes API."""

    def __init__(
        self, spec: KubernetesTarget, *, logs_dir: Path, run_id: str, seed: int, ready_timeout_s: float
    ) -> None:
        self.spec = spec
        self.name = spec.selector
        self.logs_dir = logs_dir
        self.run_id = run_id
        self.ready_timeout_s = ready_timeout_s
        self._rng = random.Random(seed)
        self._api: ApiClient | None = None
        self._core: CoreV1Api | None = None
        self._custom: CustomObjectsApi | None = None
        self._replicas = 0
        """Ready pods at the first start: how many a replacement must restore."""
        self._watched: dict[str, int] = {}
        """Ready pods at the last start, with their restart counts then."""
        self._failure: TargetError | None = None
        """A kill that failed: the supervisor's wait raises it, which fails the run with its message."""
        self.chaos_objects: list[str] = []
        """Names of the PodChaos objects of this run, each recorded before it is created."""
        self._deadline: float | None = None
        """While :meth:`start` waits or :meth:`stop` cleans up: when that ends (``time.monotonic()``)."""
        self._deadline_for = ""
        """What the deadline is, for the error that says it passed."""
        self._silent = False
        """The last call went unanswered: the logs at the end are not asked for (each would time out)."""

    @property
    def pid(self) -> int | None:
        return 0 if self._core is not None else None

    # -- the API, synchronous
    def _timeout(self) -> tuple[float, float]:
        """The next call's (connect, read) timeouts: what is left of the deadline, if one runs."""
        if self._deadline is None:
            return REQUEST_TIMEOUT_S
        left = max(MIN_REQUEST_S, self._deadline - time.monotonic())
        return (min(REQUEST_TIMEOUT_S[0], left), min(REQUEST_TIMEOUT_S[1], left))

    def _plugin_deadline(self) -> contextlib.AbstractContextManager[None]:
        """A credential plugin started by the next call (a token refresh) ends by the deadline too."""
        if self._deadline is None:
            return contextlib.nullcontext()
        return credentials.deadline(self._deadline)

    def _connect(self) -> None:
        where = f" {self.spec.kubeconfig}" if self.spec.kubeconfig else ""
        configuration = Configuration()
        try:
            with self._plugin_deadline():
                load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=self.spec.kubeconfig,
                    context=self.spec.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except credentials.PluginFailed as exc:
            raise TargetStartError(f"target.kubernetes: {exc.message}") from None
        except yaml.YAMLError as exc:
            raise ScenarioError(
                f"target.kubernetes: the kubeconfig{where} is not YAML ({_yaml_problem(exc)})"
            ) from None
        except (ConfigException, OSError) as exc:
            raise TargetStartError(f"target.kubernetes: cannot load the kubeconfig{where}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ScenarioError(
                f"target.kubernetes: the kubeconfig{where} is not a kubeconfig ({type(exc).__name__}: {exc})"
            ) from None
        configuration.retries = 0  # a call that fails is reported, not tried again past its deadline
        api = ApiClient(configuration)
        self._api, self._core, self._custom = api, CoreV1Api(api), CustomObjectsApi(api)

    def _list(self) -> list[V1Pod]:
        assert self._core is not None
        try:
            with self._plugin_deadline():
                pods = self._core.list_namespaced_pod(
                    self.spec.namespace, label_selector=self.spec.selector, _request_timeout=self._timeout()
                )
        except _API_FAILURES as exc:
            self._silent = _timed_out(exc)
            if self._deadline is not None and time.monotonic() >= self._deadline and self._silent:
                raise TargetNotReady(
                    f"target.kubernetes: the API server did not answer within {self._deadline_for}: "
                    f"{_api_error(exc)}"
                ) from None
            raise TargetError(
                f"target.kubernetes: cannot list pods in namespace {self.spec.namespace} "
                f"({self.spec.selector}): {_api_error(exc)}"
            ) from None
        self._silent = False
        return list(pods.items)

    def _ready_names(self) -> dict[str, int]:
        return {_name(p): restarts(p) for p in self._list() if is_ready(p)}

    # -- the Pod protocol
    async def start(self) -> int:
        """Wait until as many matching pods are Ready as at the first start (at least one).

        Everything it does (loading the kubeconfig, its credential plugin, every list) ends by
        ``ready_timeout_s``; Ctrl-C kills a credential plugin still running.
        """
        self._deadline = time.monotonic() + self.ready_timeout_s
        self._deadline_for = f"target.ready_timeout_s ({self.ready_timeout_s:g}s)"
        try:
            return await self._wait_ready()
        except BaseException:
            credentials.kill_all()  # a cancelled thread's plugin would run on, and hold the exit
            raise
        finally:
            self._deadline = None

    async def _wait_ready(self) -> int:
        assert self._deadline is not None
        if self._core is None:
            await asyncio.to_thread(self._connect)
        if self._replicas == 0 and not await asyncio.to_thread(self._list):
            raise TargetStartError(
                f"target.kubernetes: no pod in namespace {self.spec.namespace} matches {self.spec.selector} "
                "(check selector, namespace and context)"
            )
        while True:
            ready = await asyncio.to_thread(self._ready_names)
            if ready and len(ready) >= self._replicas:
                break
            if time.monotonic() > self._deadline:
                raise TargetNotReady(
                    f"target.kubernetes: {len(ready)} of {max(self._replicas, 1)} pods matching "
                    f"{self.spec.selector} in namespace {self.spec.namespace} Ready after "
                    f"{self.ready_timeout_s:g}s (raise target.ready_timeout_s, or check the Deployment)"
                )
            await asyncio.sleep(POLL_S)
        self._replicas = self._replicas or len(ready)
        new = sorted(set(ready) - set(self._watched))
        if new or not self._watched:
            self.name = ",".join(new or sorted(ready))
        self._watched = ready
        return 0

    def kill(self, sig: str = "SIGKILL") -> bool:
        """Delete a seeded choice of the Ready pods, or create a PodChaos that kills it.

        A failed API call is not a pod that was not running: it raises TargetError,
        and the supervisor's wait raises it too, so the run fails with its message.
        """
        if self._core is None:
            return False
        try:
            ready = sorted(self._ready_names())
            if not ready:
                raise TargetError(
                    f"target.kubernetes: no pod matching {self.spec.selector} was Ready when a kill was due"
                )
            victim = self._rng.choice(ready)
            try:
                if self.spec.kill == "api":
                    self._core.delete_namespaced_pod(
                        victim,
                        self.spec.namespace,
                        grace_period_seconds=self.spec.grace_period_s,
                        _request_timeout=REQUEST_TIMEOUT_S,
                    )
                else:
                    self._create_pod_chaos(victim)
            except _API_FAILURES as exc:
                how = "delete pod" if self.spec.kill == "api" else "create a PodChaos for pod"
                raise TargetError(f"target.kubernetes: cannot {how} {victim}: {_api_error(exc)}") from None
        except TargetError as exc:
            self._failure = exc
            raise
        self.name = victim
        return True

    def _create_pod_chaos(self, victim: str) -> None:
        assert self._custom is not None
        name = f"mcp-chaos-{_label_value(self.run_id).lower()[:40]}-{len(self.chaos_objects) + 1}"
        name = re.sub(r"[^a-z0-9-]", "-", name)
        self.chaos_objects.append(name)
        body: dict[str, Any] = {
            "apiVersion": f"{CHAOS_GROUP}/{CHAOS_VERSION}",
            "kind": "PodChaos",
            "metadata": {
                "name": name,
                "namespace": self.spec.namespace,
                "labels": {MANAGED_BY: "mcp-chaos", RUN_LABEL: _label_value(self.run_id)},
            },
            "spec": {
                "action": "pod-kill",
                "mode": "one",
                "selector": {"pods": {self.spec.namespace: [victim]}},
                "gracePeriod": self.spec.grace_period_s,
            },
        }
        self._custom.create_namespaced_custom_object(
            CHAOS_GROUP,
            CHAOS_VERSION,
            self.spec.namespace,
            CHAOS_PLURAL,
            body,
            _request_timeout=REQUEST_TIMEOUT_S,
        )

    def pause(self) -> bool:
        return False  # the scenario refuses faults.pause with target.kubernetes

    def resume(self) -> bool:
        return False

    async def wait(self) -> int:
        """Until a watched pod is gone (-1: its exit code went with it) or restarted in place."""
        while True:
            if self._failure is not None:
                raise self._failure
            pods = {_name(p): p for p in await asyncio.to_thread(self._list)}
            for name, count in sorted(self._watched.items()):
                pod = pods.get(name)
                if pod is None or restarts(pod) > count:
                    self.name = name
                    return -1 if pod is None else last_exit_code(pod)
            await asyncio.sleep(POLL_S)

    async def stop(self, timeout: float) -> None:
        """Delete every PodChaos of the run, then copy the pods' logs; the pods themselves stay.

        The deletions are synchronous so that a second Ctrl-C cannot cut them short. Every call
        ends by ``timeout`` (``target.stop_timeout_s``). TargetError naming what could not be
        deleted, after trying them all.
        """
        credentials.kill_all()
        if self._api is None:
            return
        self._deadline = time.monotonic() + timeout
        self._deadline_for = f"target.stop_timeout_s ({timeout:g}s)"
        try:
            left = self._delete_chaos_objects()
            await asyncio.to_thread(self.collect_logs)
        finally:
            self._deadline = None
            self._api.close()  # type: ignore[no-untyped-call]
            self._api = self._core = self._custom = None
        if left:
            raise TargetError(
                f"target.kubernetes: could not delete PodChaos {', '.join(left)} in namespace "
                f"{self.spec.namespace}; delete them with kubectl delete podchaos -l "
                f"{RUN_LABEL}={_label_value(self.run_id)}"
            )

    def _delete_chaos_objects(self) -> list[str]:
        assert self._custom is not None
        left = []
        for name in self.chaos_objects:
            try:
                self._custom.delete_namespaced_custom_object(
                    CHAOS_GROUP,
                    CHAOS_VERSION,
                    self.spec.namespace,
                    CHAOS_PLURAL,
                    name,
                    _request_timeout=self._timeout(),
                )
            except ApiException as exc:
                if exc.status != 404:  # never created (its creation failed), or already gone
                    left.append(f"{name} ({_api_error(exc)})")
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                left.append(f"{name} ({_api_error(exc)})")
        return left

    def collect_logs(self) -> None:
        """Each matching pod's log (and its previous container's, after a restart) into ``logs_dir``."""
        assert self._core is not None
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        if self._silent:
            (self.logs_dir / "kubernetes.log").write_text("(no pod logs: the API server did not answer)\n")
            return
        try:
            pods = self._list()
        except TargetError as exc:
            (self.logs_dir / "kubernetes.log").write_text(f"(no pod logs: {exc.message})\n")
            return
        for pod in pods:
            containers = [c.name for c in pod.spec.containers] if pod.spec is not None else []
            for container in containers:
                stem = _name(pod) if len(containers) == 1 else f"{_name(pod)}.{container}"
                self._save_log(pod, container, self.logs_dir / f"{stem}.log", previous=False)
                if restarts(pod):
                    self._save_log(pod, container, self.logs_dir / f"{stem}.previous.log", previous=True)

    def _save_log(self, pod: V1Pod, container: str, path: Path, *, previous: bool) -> None:
        assert self._core is not None
        try:
            text = self._core.read_namespaced_pod_log(
                _name(pod),
                self.spec.namespace,
                container=container,
                previous=previous,
                _request_timeout=self._timeout(),
            )
        except _API_FAILURES as exc:
            text = f"(log not available: {_api_error(exc)})\n"
        path.write_text(text, encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 20) -> str:
        if self._core is None or "," in self.name or self.name == self.spec.selector:
            return "(no log: more than one pod)"
        if self._silent:
            return "(no log: the API server did not answer)"
        try:
            return self._core.read_namespaced_pod_log(
                self.name, self.spec.namespace, tail_lines=lines, _request_timeout=REQUEST_TIMEOUT_S
            ).rstrip()
        except _API_FAILURES as exc:
            return f"(no log: {_api_error(exc)})"

    def identity(self) -> dict[str, str]:
        return {"namespace": self.spec.namespace, "selector": self.spec.selector}
