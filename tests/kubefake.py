"""A small fake of the Kubernetes API: exactly the endpoints the Kubernetes runtime uses.

No API server can run on these machines, so ``harness/pods/kubernetes.py`` is tested
against this, written from the Kubernetes API reference (core/v1 Pod: list with
``labelSelector``, read, delete with ``gracePeriodSeconds``, ``log``; the Chaos Mesh
``PodChaos`` custom resource: create, list, delete) and nothing more. Any other
request is answered 404 and kept in :attr:`FakeCluster.unexpected`, so a test can
show the runtime used nothing else.

It is realistic where the harness's findings depend on it. A Deployment of
``replicas`` pods runs the reference target as real processes sharing one
SQLite store; a pod is Ready once its port accepts a connection (a tcpSocket
readiness probe). Deleting a pod with grace period 0 SIGKILLs it and removes the
object; with a grace period it is marked for deletion (and leaves the Service),
gets SIGTERM, SIGKILL when the period ends, and goes once its process is gone.
The ReplicaSet controller starts a replacement as soon as a pod is marked for
deletion. A container that exits on its own is restarted in place (restart count
and last state, as a kubelet does). A ``PodChaos`` with ``action: pod-kill`` is
acted on by a stand-in controller, as Chaos Mesh would. The Service is a TCP
proxy on 127.0.0.1 that spreads connections over the Ready pods and cuts them
when their pod dies.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from harness.loopback import free_port

TOKEN = "fake-token"
CHAOS_PATH = re.compile(r"^/apis/chaos-mesh\.org/v1alpha1/namespaces/([^/]+)/podchaos(?:/([^/]+))?$")
POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def parse_selector(selector: str) -> list[tuple[str, str, str | None]]:
    """Equality-based label selector terms (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``); ValueError if not."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in selector.split(","):
        term = raw.strip()
        match = re.fullmatch(r"([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)", term)
        if match:
            terms.append((match[1], "!=" if match[2] == "!=" else "=", match[3]))
        elif re.fullmatch(r"!?[A-Za-z0-9./_-]+", term):
            terms.append((term.lstrip("!"), "!" if term.startswith("!") else "exists", None))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return terms


def matches(labels: Mapping[str, str], terms: Sequence[tuple[str, str, str | None]]) -> bool:
    for key, op, value in terms:
        if (
            (op == "=" and labels.get(key) != value)
            or (op == "!=" and labels.get(key) == value)
            or (op == "exists" and key not in labels)
            or (op == "!" and key in labels)
        ):
            return False
    return True


@dataclass
class FakePod:
    name: str
    port: int
    labels: dict[str, str]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: str = field(default_factory=_now)
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    """One log file per container start: the last is the current container's, the one before the previous."""
    restart_count: int = 0
    last_exit: int | None = None
    ready: bool = False
    deleting: str | None = None
    """deletionTimestamp, once deletion began."""
    grace_s: int | None = None
    kill_at: float | None = None

    def to_json(self, namespace: str, grace_default: int) -> dict[str, Any]:
        running = self.proc is not None and self.proc.poll() is None
        state: dict[str, Any] = (
            {"running": {"startedAt": self.created}}
            if running
            else {"terminated": {"exitCode": self.proc.returncode if self.proc else 0, "reason": "Error"}}
        )
        last = (
            {} if self.last_exit is None else {"terminated": {"exitCode": self.last_exit, "reason": "Error"}}
        )
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": namespace,
            "uid": self.uid,
            "resourceVersion": str(abs(hash((self.name, self.restart_count, self.ready, self.deleting)))),
            "creationTimestamp": self.created,
            "labels": dict(self.labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "invoices-5d8f7c",
                    "uid": "rs-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if self.deleting is not None:
            meta["deletionTimestamp"] = self.deleting
            meta["deletionGracePeriodSeconds"] = self.grace_s
        ready = "True" if self.ready and self.deleting is None else "False"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "containers": [{"name": "server", "image": "mcp-chaos/invoices:dev"}],
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": grace_default,
            },
            "status": {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": ready, "lastTransitionTime": self.created},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": self.created},
                ],
                "containerStatuses": [
                    {
                        "name": "server",
                        "image": "mcp-chaos/invoices:dev",
                        "imageID": "docker-pullable://mcp-chaos/invoices@sha256:0",
                        "ready": ready == "True",
                        "started": running,
                        "restartCount": self.restart_count,
                        "state": state,
                        "lastState": last,
                    }
                ],
            },
        }


class FakeCluster:
    """One namespace, one Deployment of the reference target, its Service, and Chaos Mesh (optional)."""

    def __init__(
        self,
        workdir: Path,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        namespace: str = "chaos",
        replicas: int = 1,
        labels: Mapping[str, str] | None = None,
        termination_grace_s: int = 2,
        chaos_mesh: bool = True,
        seed: int = 0,
    ) -> None:
        self.workdir = workdir
        self.command = list(command)
        self.env = dict(env)
        self.namespace = namespace
        self.replicas = replicas
        self.labels = dict(labels or {"app": "invoices"})
        self.termination_grace_s = termination_grace_s
        self.chaos_mesh = chaos_mesh
        self.broken_replacements = False
        """Pods started from now on exit at once (a bad rollout): no replacement becomes Ready."""
        self.pods: dict[str, FakePod] = {}
        self.deleted: list[tuple[str, int | None]] = []
        """Each pod deletion begun: (name, grace period in seconds)."""
        self.podchaos: dict[str, dict[str, Any]] = {}
        self.podchaos_created: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.unexpected: list[tuple[str, str]] = []
        self.lock = threading.RLock()
        self._rng = random.Random(seed)
        self._rr = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Bound to port 0 and asked which it got: a port picked free and bound later can be taken in
        # between by another test's server (it was, once, under two workers).
        self._api = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._api.daemon_threads = True
        self.api_port = int(self._api.server_address[1])
        self._service = socket.create_server(("127.0.0.1", 0))
        self._service.settimeout(0.2)
        self.service_port = int(self._service.getsockname()[1])
        self.service_url = f"http://127.0.0.1:{self.service_port}/mcp"

    # -- life
    def start(self) -> FakeCluster:
        with self.lock:
            for _ in range(self.replicas):
                self._create_pod()
        for target in (self._api.serve_forever, self._control, self._serve_service):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        self._stop.set()
        self._api.shutdown()
        self._api.server_close()
        self._service.close()
        for thread in self._threads:
            thread.join(timeout=5)
        with self.lock:
            for pod in self.pods.values():
                self._kill(pod)

    def kubeconfig(self, path: Path, *, token: str = TOKEN) -> Path:
        """A kubeconfig whose context ``fake`` reaches this API server with a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.api_port}"}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if sum(p.ready and p.deleting is None for p in self.pods.values()) >= self.replicas:
                    return
            time.sleep(0.05)
        raise RuntimeError("the fake cluster's pods did not become Ready")

    # -- the kubelet, the ReplicaSet controller and Chaos Mesh's controller, as one loop
    def _create_pod(self) -> FakePod:
        suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        pod = FakePod(f"invoices-5d8f7c-{suffix}", free_port(), dict(self.labels))
        self.pods[pod.name] = pod
        self._run_container(pod)
        return pod

    def _run_container(self, pod: FakePod) -> None:
        log = self.workdir / f"{pod.name}.{len(pod.logs)}.log"
        pod.logs.append(log)
        command = ["false"] if self.broken_replacements else self.command
        with open(log, "wb") as out:
            pod.proc = subprocess.Popen(
                command,
                env={**os.environ, **self.env, "PORT": str(pod.port)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        pod.ready = False

    def _kill(self, pod: FakePod, sig: signal.Signals = signal.SIGKILL) -> None:
        if pod.proc is not None and pod.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.proc.pid, sig)
            if sig == signal.SIGKILL:
                pod.proc.wait()

    def delete_pod(self, pod: FakePod, grace_s: int | None) -> None:
        """Begin a deletion as the API server and the kubelet would; called with the lock held."""
        if pod.deleting is not None:
            return
        grace = self.termination_grace_s if grace_s is None else grace_s
        self.deleted.append((pod.name, grace_s))
        pod.deleting, pod.grace_s, pod.ready = _now(), grace, False
        if grace == 0:
            self._kill(pod)
            del self.pods[pod.name]
        else:
            pod.kill_at = time.monotonic() + grace
            self._kill(pod, signal.SIGTERM)
        self._replace()

    def _replace(self) -> None:
        while sum(p.deleting is None for p in self.pods.values()) < self.replicas:
            self._create_pod()

    def _control(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                for pod in list(self.pods.values()):
                    self._tend(pod)
                for chaos in self.podchaos.values():
                    self._act_on(chaos)

    def _tend(self, pod: FakePod) -> None:
        assert pod.proc is not None
        if pod.deleting is not None:
            if pod.kill_at is not None and time.monotonic() >= pod.kill_at:
                self._kill(pod)
            if pod.proc.poll() is not None:
                del self.pods[pod.name]
            return
        rc = pod.proc.poll()
        if rc is not None:  # crashed: the kubelet restarts the container in place
            pod.restart_count += 1
            pod.last_exit = 128 - rc if rc < 0 else rc  # a container killed by signal N exits 128+N
            self._run_container(pod)
        elif not pod.ready:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", pod.port), 0.05):
                pod.ready = True

    def _act_on(self, chaos: dict[str, Any]) -> None:
        status = chaos.setdefault("status", {})
        if status.get("injected") or chaos["spec"].get("action") != "pod-kill":
            return
        selector = chaos["spec"].get("selector", {})
        names = selector.get("pods", {}).get(self.namespace, [])
        victims = [self.pods[n] for n in names if n in self.pods]
        if not names:
            candidates = [
                p
                for p in self.pods.values()
                if matches(p.labels, list((k, "=", v) for k, v in selector.get("labelSelectors", {}).items()))
            ]
            victims = candidates[:1] if chaos["spec"].get("mode") == "one" else candidates
        for victim in victims:
            self.delete_pod(victim, int(chaos["spec"].get("gracePeriod", 0)))
        status["injected"] = True

    # -- the Service
    def _serve_service(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._service.accept()
            except (TimeoutError, OSError):
                continue
            with self.lock:
                ready = [p for p in self.pods.values() if p.ready and p.deleting is None]
                self._rr += 1
                backend = ready[self._rr % len(ready)].port if ready else None
            if backend is None:
                client.close()  # no endpoints: the connection is refused
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", backend), 1)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy one direction; when either side ends, both do (a dead backend cuts its connections)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def _handler(cluster: FakeCluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}") if length else {}

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with cluster.lock:
                cluster.requests.append((method, self.path))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._body()
                self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                return
            pod_match = POD_PATH.match(url.path)
            chaos_match = CHAOS_PATH.match(url.path)
            body = self._body() if method in ("POST", "DELETE") else {}
            with cluster.lock:
                if pod_match:
                    answer = self._pods(method, pod_match, query, body)
                elif chaos_match and cluster.chaos_mesh:
                    answer = self._chaos(method, chaos_match, body)
                else:
                    answer = None
                if answer is None:
                    cluster.unexpected.append((method, self.path))
                    answer = (
                        404,
                        _status(404, "NotFound", "the server could not find the requested resource"),
                    )
            self._send(*answer)

        def _pods(
            self, method: str, match: re.Match[str], query: dict[str, str], body: dict[str, Any]
        ) -> tuple[Any, ...] | None:
            namespace, name, log = match[1], match[2], match[3]
            pods = cluster.pods if namespace == cluster.namespace else {}
            grace = cluster.termination_grace_s
            if name is None and method == "GET" and not log:
                try:
                    terms = (
                        parse_selector(query.get("labelSelector", "")) if query.get("labelSelector") else []
                    )
                except ValueError as exc:
                    return 400, _status(400, "BadRequest", str(exc))
                items = [p.to_json(namespace, grace) for p in pods.values() if matches(p.labels, terms)]
                return 200, {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                }
            pod = pods.get(name or "")
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if method == "GET" and log:
                previous = query.get("previous") == "true"
                if previous and len(pod.logs) < 2:
                    message = f'previous terminated container "server" in pod "{name}" not found'
                    return 400, _status(400, "BadRequest", message)
                text = pod.logs[-2 if previous else -1].read_text(errors="replace")
                if "tailLines" in query:
                    text = "".join(text.splitlines(keepends=True)[-int(query["tailLines"]) :])
                return 200, text, "text/plain"
            if method == "GET" and not log:
                return 200, pod.to_json(namespace, grace)
            if method == "DELETE" and not log:
                raw = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
                snapshot = pod.to_json(namespace, grace)
                cluster.delete_pod(pod, None if raw is None else int(raw))
                return 200, pod.to_json(namespace, grace) if pod.name in cluster.pods else snapshot
            return None

        def _chaos(self, method: str, match: re.Match[str], body: dict[str, Any]) -> tuple[Any, ...] | None:
            namespace, name = match[1], match[2]
            if method == "POST" and name is None:
                meta = body.get("metadata", {})
                if body.get("kind") != "PodChaos" or body.get("apiVersion") != "chaos-mesh.org/v1alpha1":
                    return 400, _status(
                        400, "BadRequest", "kind and apiVersion must be PodChaos, chaos-mesh.org/v1alpha1"
                    )
                if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", meta.get("name", "")):
                    return 422, _status(422, "Invalid", f"metadata.name {meta.get('name')!r} is invalid")
                if meta["name"] in cluster.podchaos:
                    return 409, _status(409, "AlreadyExists", f'podchaos "{meta["name"]}" already exists')
                obj = {
                    **body,
                    "metadata": {
                        **meta,
                        "namespace": namespace,
                        "uid": str(uuid.uuid4()),
                        "creationTimestamp": _now(),
                    },
                }
                cluster.podchaos[meta["name"]] = obj
                cluster.podchaos_created.append(meta["name"])
                return 201, obj
            if method == "GET" and name is None:
                return 200, {
                    "apiVersion": "chaos-mesh.org/v1alpha1",
                    "kind": "PodChaosList",
                    "items": list(cluster.podchaos.values()),
                }
            if method == "DELETE" and name is not None:
                if name not in cluster.podchaos:
                    return 404, _status(404, "NotFound", f'podchaos.chaos-mesh.org "{name}" not found')
                return 200, cluster.podchaos.pop(name)
            return None

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@contextlib.contextmanager
def fake_cluster(workdir: Path, **options: Any) -> Iterator[FakeCluster]:
    """A started fake cluster running the reference invoices target; everything stops on exit."""
    from tests.helpers.paths import INVOICES

    workdir.mkdir(parents=True, exist_ok=True)
    env = {"INVOICES_DB": str(workdir / "invoices.db"), **options.pop("env", {})}
    cluster = FakeCluster(workdir, [sys.executable, str(INVOICES)], env, **options).start()
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.close()
