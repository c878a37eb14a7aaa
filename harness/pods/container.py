"""The Docker runtime: any server image as a pod, through the Docker SDK for Python.

A pod is one container on **host networking** (it listens on 127.0.0.1:$PORT;
no bridge network, no private-range address), with the run's data directory
bind-mounted at ``target.data_mount``. A kill is ``docker kill`` (SIGKILL, like
a pod kill); a restart starts the *same* container again, as a kubelet would.
Every container carries the labels ``mcp-chaos=1`` and ``mcp-chaos.run=<run id>``:
it is removed when the run ends, fails or is interrupted, at interpreter exit
as a last resort, and ``mcp-chaos cleanup`` removes what a killed harness left.

The SDK is synchronous. Slow calls (create, start, wait, stop) run in a thread;
``kill`` stays a direct call of a few milliseconds, so that the injector's kill
event is in the history before any attempt the kill breaks can end.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import TargetStartError
from harness.pods.process import STDIO_LINE_LIMIT

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
LABEL = "mcp-chaos"
RUN_LABEL = "mcp-chaos.run"
HARNESS_LABEL = "mcp-chaos.harness-pid"
_live: dict[str, Any] = {}  # container id -> container, until removed


def _remove_leftovers() -> None:
    for container in list(_live.values()):
        with contextlib.suppress(Exception):
            container.remove(force=True)
    _live.clear()


atexit.register(_remove_leftovers)


def _check_engine_socket() -> None:
    """Fail fast, and without leaking, when the engine's Unix socket does not answer.

    docker-py's Unix-socket connection does not close its socket when ``connect``
    fails, so every ping of a missing engine would leave one open (a
    ResourceWarning at exit). Connecting once ourselves, with the socket closed
    either way, answers the common "no engine here" case before the SDK is used.
    """
    host = os.environ.get("DOCKER_HOST", DEFAULT_DOCKER_HOST)
    if not host.startswith("unix://"):
        return  # TCP or SSH: the SDK's HTTP stack closes what it opens
    path = host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError as exc:
            raise TargetStartError(
                f"no Docker engine answers at {host} ({exc.strerror or type(exc).__name__}); start one "
                "(see docs/how-to/deployments.md: dockerd --bridge=none --iptables=false --ip-masq=false)"
            ) from None


def docker_client() -> Any:
    """A client for the local engine, or a TargetStartError that says how to get one."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise TargetStartError("the docker package is missing (reinstall mcp-chaos)") from None
    _check_engine_socket()
    client = None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        raise TargetStartError(
            f"no Docker engine answers ({type(exc).__name__}); start one "
            "(see docs/how-to/deployments.md: dockerd --bridge=none --iptables=false --ip-masq=false)"
        ) from None
    return client


def _harness_alive(container: Any) -> bool:
    """Whether the harness that started the container still runs (on this machine)."""
    raw = container.labels.get(HARNESS_LABEL, "")
    if not raw.isdigit() or int(raw) == os.getpid():
        return False
    try:
        os.kill(int(raw), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_containers(
    client: Any, run_id: str | None = None, *, force: bool = False
) -> tuple[list[str], list[str]]:
    """Remove this harness's containers (of one run, or all): (names removed, names kept).

    A container whose harness still runs is a run in progress: it is kept unless ``force``.
    """
    selector = f"{RUN_LABEL}={run_id}" if run_id else LABEL
    removed, kept = [], []
    for container in client.containers.list(all=True, filters={"label": selector}):
        if not force and _harness_alive(container):
            kept.append(container.name)
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
            _live.pop(container.id, None)
    return removed, kept


@contextlib.contextmanager
def _refused(missing: type[Exception], gone: str, failed: str, hint: str = "") -> Iterator[None]:
    """The Docker engine's refusal of a step as a TargetStartError: ``gone`` when what it acts on is
    ``missing`` (the image, the container), else ``failed``, the engine's explanation and ``hint``."""
    import docker.errors

    try:
        yield
    except missing:
        raise TargetStartError(gone) from None
    except docker.errors.APIError as exc:
        raise TargetStartError(f"{failed}: {exc.explanation}{hint}") from None


class DockerPod:
    """One pod of the Docker runtime: a container, restartable any number of times."""

    def __init__(
        self,
        name: str,
        *,
        image: str,
        command: Sequence[str] | None,
        env: Mapping[str, str],
        data_dir: Path,
        data_mount: str,
        log_path: Path,
        run_id: str,
        stdio: bool = False,
        mounts: Mapping[Path, str] | None = None,
    ) -> None:
        self.name = name
        self.image = image
        self.stdio_pipes = stdio
        """A stdio server: its stdin and stdout, attached through the engine, are the MCP channel."""
        self.command = list(command) if command else None
        self.env = dict(env)
        # Docker takes a relative bind source for a named volume (and refuses "results/..."):
        # hand it the absolute path, whatever the run directory was given as.
        self.data_dir = data_dir.resolve()
        self.data_mount = data_mount
        self.mounts = {str(host.resolve()): inside for host, inside in (mounts or {}).items()}
        """Files of the run the container reads at these paths (read-only)."""
        self.log_path = log_path
        self.run_id = run_id
        self._client: Any = None
        self._container: Any = None
        self._pid: int | None = None
        self._attached: Any = None  # the engine's attach socket object (kept: it owns the socket)
        self._stdout: asyncio.StreamReader | None = None
        self._stdin: asyncio.StreamWriter | None = None
        self._exit: asyncio.Future[int] | None = None
        """The current instance's exit, awaited by everyone who waits (one blocked thread per instance)."""
        self._waiter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"wait-{name}")
        """Its own thread: a container's wait blocks for as long as it runs, and with a few replicas
        those waits filled asyncio's default pool, so the stop that would end them never ran."""
        self._demux: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        """Serialises the engine calls of a start and a stop: each runs in a thread that a cancelled
        await does not end, so a restart still creating its container could outlive the stop."""
        self._stops = 0
        """How many stops have begun: a start that began before the latest one creates nothing."""

    @property
    def pid(self) -> int | None:
        return self._pid

    def _create(self) -> Any:
        import docker.errors

        self._client = docker_client()
        with _refused(
            docker.errors.ImageNotFound,
            f"image {self.image!r} not found locally (build it, e.g. `make image`, or docker load it)",
            f"cannot create a container of {self.image!r}",
        ):
            container = self._client.containers.create(
                self.image,
                command=self.command,
                name=f"mcp-chaos-{self.run_id}-{self.name}",
                environment=self.env,
                network_mode="host",
                volumes={
                    str(self.data_dir): {"bind": self.data_mount, "mode": "rw"},
                    **{host: {"bind": inside, "mode": "ro"} for host, inside in self.mounts.items()},
                },
                labels={LABEL: "1", RUN_LABEL: self.run_id, HARNESS_LABEL: str(os.getpid())},
                detach=True,
                stdin_open=self.stdio_pipes,
            )
        _live[container.id] = container
        return container

    def _start(self, stops_seen: int) -> int:
        with self._lock:
            if self._stops != stops_seen:
                raise TargetStartError(f"pod {self.name} was stopped while it started")
            return self._start_locked()

    def _start_locked(self) -> int:
        import docker.errors

        if self._container is None:
            self._container = self._create()
        with _refused(
            docker.errors.NotFound,
            f"the container of pod {self.name} is gone (removed by `mcp-chaos cleanup --force`?)",
            f"cannot start a container of {self.image!r}",
            " (check target.command)",
        ):
            self._container.start()
            self._container.reload()
        self._pid = int(self._container.attrs["State"]["Pid"]) or None
        return self._pid or 0

    async def start(self) -> int:
        pid = await asyncio.to_thread(self._start, self._stops)
        self._exit = None
        if self.stdio_pipes:
            await self._attach()
        return pid

    # -- stdio through the engine's attach endpoint
    async def _attach(self) -> None:
        """Attach to the container's stdin, stdout and stderr (multiplexed: no TTY) after a start."""
        await self._detach()
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        self._attached = await asyncio.to_thread(self._container.attach_socket, params=params)
        raw = getattr(self._attached, "_sock", self._attached)
        reader, self._stdin = await asyncio.open_connection(sock=raw, limit=STDIO_LINE_LIMIT)
        self._stdout = asyncio.StreamReader(limit=STDIO_LINE_LIMIT)
        self._demux = asyncio.ensure_future(self._demultiplex(reader, self._stdout))

    async def _demultiplex(self, stream: asyncio.StreamReader, stdout: asyncio.StreamReader) -> None:
        """Split the engine's frames (1 byte stream, 3 padding, 4 length) into stdout and the pod log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.log_path, "ab") as log:
                while True:
                    header = await stream.readexactly(8)
                    payload = await stream.readexactly(int.from_bytes(header[4:8], "big"))
                    if header[0] == 1:
                        stdout.feed_data(payload)
                    else:
                        log.write(payload)
                        log.flush()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            stdout.feed_eof()

    async def _detach(self) -> None:
        if self._stdin is not None:
            self._stdin.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._stdin.wait_closed(), 5)  # the socket is closed once this returns
            self._stdin = None
        if self._demux is not None:
            self._demux.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._demux
            self._demux = None
        if self._attached is not None:
            # The engine's socket has a file object on it (http.client's); the descriptor is only
            # released once that is closed too.
            with contextlib.suppress(Exception):
                self._attached.close()
            self._attached = None

    def stdio(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The current container's stdout and stdin, for a stdio server."""
        if self._stdout is None or self._stdin is None:
            raise RuntimeError(f"pod {self.name} has no stdio (not a stdio target, or not started)")
        return self._stdout, self._stdin

    def _state(self) -> dict[str, Any]:
        self._container.reload()
        state: dict[str, Any] = self._container.attrs["State"]
        return state

    def _act(self, action: str, **kwargs: Any) -> bool:
        """One direct call on the container; False when there is none or the engine refuses (not running)."""
        if self._container is None:
            return False
        try:
            getattr(self._container, action)(**kwargs)
        except Exception:
            return False
        return True

    def kill(self, sig: str = "SIGKILL") -> bool:
        """Signal the container now, SIGKILL unless told (a direct API call: see the module docstring)."""
        return self._act("kill", signal=sig)

    def pause(self) -> bool:
        """Freeze the container (the cgroup freezer)."""
        return self._act("pause")

    def resume(self) -> bool:
        return self._act("unpause")

    async def wait(self) -> int:
        """Wait for the container to stop; returns its exit code (137 after a kill, -1 if it is gone).

        Every caller shares one wait per instance; a caller that is cancelled leaves it running.
        """
        if self._exit is None:
            self._exit = asyncio.get_running_loop().run_in_executor(self._waiter, self._wait_blocking)
        return await asyncio.shield(self._exit)

    def _wait_blocking(self) -> int:
        container = self._container
        if container is None:
            return -1
        try:
            result = container.wait()
        except Exception:
            return -1  # removed under us: the next start says so
        return int(result.get("StatusCode", -1))

    def _stop(self, timeout: float) -> None:
        with self._lock:
            self._stop_locked(timeout)

    def _stop_locked(self, timeout: float) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                if self._state().get("Paused"):
                    self._container.unpause()
                self._container.stop(timeout=max(1, round(timeout)))
            with contextlib.suppress(Exception):
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                # A stdio server's stdout is the protocol, not a log: keep its stderr only.
                self.log_path.write_bytes(self._container.logs(stdout=not self.stdio_pipes, stderr=True))
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            _live.pop(self._container.id, None)
            self._container = None
        if self._client is not None:  # also when the container could not even be created
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    async def stop(self, timeout: float) -> None:
        """Stop (SIGTERM, then SIGKILL after ``timeout``), keep its logs in the run directory, remove it."""
        self._stops += 1  # before any await: a start still in its thread must see it
        await self._detach()
        await asyncio.to_thread(self._stop, timeout)
        self._waiter.shutdown(wait=False)

    def identity(self) -> dict[str, str]:
        return {"container": self._container.id[:12]} if self._container is not None else {}

    def log_tail(self, lines: int = 20) -> str:
        if self._container is None:
            try:
                return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
            except OSError:
                return "(no log)"
        try:
            raw: bytes = self._container.logs(stdout=True, stderr=True, tail=lines)
        except Exception:
            return "(no log)"
        return raw.decode("utf-8", "replace").rstrip()
