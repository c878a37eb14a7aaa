"""Shared helpers: the reference target as a real process, and whole harness runs in-process.

Also what lets the suite run in parallel (``pytest -n 2 --dist loadgroup``, as ``make test`` does):
tests are spread over worker processes, except where they share something of the machine.

- Every test that starts containers (it uses ``docker_image`` or ``ts_image``) is put in the
  ``docker`` xdist group: they run one after another on one worker, because each checks that no
  labelled container is left when it ends, and ``mcp-chaos cleanup`` removes the containers of
  any harness that is gone. A test that runs ``cleanup`` without ``--run`` joins that group too.
- A test marked ``exclusive`` runs with no other test beside it (a lock shared by the workers:
  the others finish the test they are in, then wait): for tests that look at state the whole
  machine shares, such as the temporary PostgreSQL clusters every run's start may remove.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from harness.audit.auditor import AuditResult
from harness.audit.summary import FaultRow, Summary
from harness.client.readiness import wait_ready as probe_until_ready
from harness.history import FaultKind
from harness.loopback import free_port
from harness.rundir import prepare_run_dir
from harness.runner import run_and_audit
from harness.scenario import parse_scenario

# Hypothesis's per-example deadline (200 ms) is a timed assertion, which this suite does not make
# (speed goals live in `make bench`): on a busy machine it failed whole runs of correct code.
settings.register_profile("mcp-chaos", deadline=None)
settings.load_profile("mcp-chaos")

ROOT = Path(__file__).resolve().parents[1]
INVOICES = ROOT / "targets" / "invoices" / "server.py"
EFFECTS_QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
CONTAINER_FIXTURES = {"docker_image", "ts_image"}
RUNS_CLEANUP = pytest.mark.xdist_group("docker")
"""For a test that runs ``mcp-chaos cleanup`` without ``--run``: it removes the containers of every
harness that is gone, so only beside the container tests' own, which expect theirs to be there."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CONTAINER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("docker"))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _name_groups(items)


def _name_groups(items: list[pytest.Item]) -> None:
    """Give each test of an xdist group the node id suffix (``@docker``) that the scheduler reads.

    pytest-xdist 3.8 does it by setting ``item._nodeid``, which pytest 9 no longer reads (node ids
    are ``NodeId`` objects in ``item._id``): its groups were silently ignored, and container tests
    ran side by side. This does what it meant, and fails loudly if pytest changes again.
    """
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        if groups and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
            assert item.nodeid.endswith(f"@{'_'.join(groups)}"), "pytest no longer takes this node id"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Under xdist: the whole test (setup, call, teardown) holds the workers' room, shared or alone."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)
    alone = item.get_closest_marker("exclusive") is not None
    with _room(Path(item.config.option.basetemp).parent, alone=alone):  # the workers' common basetemp
        return (yield)


@contextlib.contextmanager
def _room(shared_dir: Path, *, alone: bool) -> Iterator[None]:
    """A fair readers-writer lock between the workers (flock, so a killed worker releases it).

    A test that must be alone takes the turnstile first and keeps it while it waits, so the other
    workers cannot start new tests and starve it; every other test passes the turnstile, then
    shares the room.
    """
    turnstile, room = _lock_file(shared_dir / "turnstile.lock"), _lock_file(shared_dir / "room.lock")
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    if not alone:
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(room, fcntl.LOCK_UN)
        if alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)


@functools.cache
def _lock_file(path: Path) -> int:
    """One descriptor per lock and worker, open for the session: flock locks belong to the open file."""
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def invoice_scenario(
    *,
    mode: str = "atomic",
    intents: int = 3,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    kills: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A scenario dict for the reference invoices target; ``sections`` replace top-level keys."""
    data: dict[str, Any] = {
        "name": "itest",
        "seed": 1,
        "target": {
            "command": ["{python}", str(INVOICES)],
            "env": {"INVOICES_MODE": mode, "INVOICES_DB": "{data_dir}/invoices.db", **(env or {})},
            "restart_delay_s": 0.05,
            "ready_timeout_s": 30,
        },
        "workload": {
            "intents": intents,
            "concurrency": concurrency,
            "tool": "create_invoice",
            "arguments": {
                "customer_id": "c-{index}",
                "amount_cents": {"random_int": [100, 9999]},
                "memo": "{marker}",
                "idempotency_key": "{key}",
            },
        },
        # Retries every 0.1 s on average (full jitter up to 0.2 s), for about 10 s: longer than any
        # restart of the target, even on a loaded machine where it takes seconds. A test of giving
        # up sets its own budget; 30 attempts (3 s) ran out under parallel tests on 2 cores.
        "client": {
            "attempt_timeout_s": 10,
            "max_attempts": 100,
            "backoff": {"initial_s": 0.02, "max_s": 0.2},
        },
        "audit": {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": EFFECTS_QUERY}}},
    }
    if kills is not None:
        data["faults"] = {"kill": kills}
    data.update(sections)
    return data


def run_scenario(data: dict[str, Any], results: Path) -> AuditResult:
    """A whole run (real target process, driver, supervisor, injector), its audit and reports."""
    scenario = parse_scenario(data)
    run_dir = prepare_run_dir(results, scenario)
    # report.html is left to the tests about it (tests/integration/test_reports.py): it costs a second.
    return asyncio.run(
        run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=3600, html=False)
    )


def fault_row(summary: Summary, kind: FaultKind) -> FaultRow:
    """The summary's row for one kind of fault, which the test expects to be there."""
    row = summary.fault(kind)
    assert row is not None, f"no {kind} in the summary's faults: {[r.kind for r in summary.faults]}"
    return row


@pytest.fixture
def run(tmp_path: Path) -> Callable[[dict[str, Any]], AuditResult]:
    return lambda data: run_scenario(data, tmp_path / "results")


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait for a reference target started by a test, with the harness's own readiness probe."""
    readiness = asyncio.run(probe_until_ready(url, timeout_s=timeout, alive=lambda: proc.poll() is None))
    if readiness.exited:
        raise RuntimeError(f"reference target exited with {proc.returncode}")
    if not readiness.ready:
        raise RuntimeError(f"reference target not ready: {readiness.last}")


class Target:
    """The reference invoices server as a real child process."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.db = tmp_path / f"invoices-{self.port}.db"
        full_env = {**os.environ, "PORT": str(self.port), "INVOICES_DB": str(self.db), **env}
        self.log = open(tmp_path / f"target-{self.port}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(INVOICES)], env=full_env, stdout=self.log, stderr=self.log
        )
        wait_ready(self.url, self.proc)

    def invoices(self) -> int:
        import sqlite3

        with sqlite3.connect(self.db) as db:
            return int(db.execute("SELECT COUNT(*) FROM invoices").fetchone()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Callable[..., Target]]:
    """Start reference targets with the given INVOICES_* environment; all are stopped afterwards."""
    started: list[Target] = []

    def start(**env: str) -> Target:
        t = Target(tmp_path, **env)
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()


IMAGE = "mcp-chaos/invoices:dev"
TS_IMAGE = "mcp-chaos/invoices-ts:dev"


def source_hash(image: str) -> str:
    """What targets/images/build.sh labels an image with: a hash of the sources it was built from."""
    import hashlib

    if image == TS_IMAGE:
        files = [TS_DIR / "server.mjs", TS_DIR / "package-lock.json", TS_DIR / "Dockerfile"]
    else:
        target = ROOT / "targets" / image.split("/", 1)[1].split(":", 1)[0]
        files = [*sorted(target.glob("*.py")), target / "Dockerfile"]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def reference_image(name: str) -> str:
    """A reference image on a live Docker engine: built if missing, skipped where no engine runs."""
    import docker

    from harness.errors import TargetStartError
    from harness.pods.container import docker_client

    try:
        client = docker_client()  # closes what it opened when no engine answers
    except TargetStartError as exc:
        pytest.skip(exc.message)
    try:
        if client.images.get(name).labels.get("mcp-chaos.source") != source_hash(name):
            raise docker.errors.ImageNotFound("built from other sources")  # stale: build it again
    except docker.errors.ImageNotFound:
        with npm_lock():  # build.sh reinstalls the TypeScript target's node_modules (npm ci)
            subprocess.run([str(ROOT / "targets" / "images" / "build.sh")], check=True, cwd=ROOT)
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            pytest.skip(f"{name} could not be built here (targets/images/build.sh says why)")
    finally:
        client.close()
    return name


@pytest.fixture(scope="session")
def docker_image() -> str:
    return reference_image(IMAGE)


@pytest.fixture(scope="session")
def ts_image() -> str:
    return reference_image(TS_IMAGE)


@pytest.fixture(scope="session")
def postgres_server() -> None:
    """PostgreSQL server binaries, which services.postgres needs; skipped where they are missing."""
    from harness.errors import TargetStartError
    from harness.services import postgres_binaries

    try:
        postgres_binaries()
    except TargetStartError as exc:
        pytest.skip(f"{exc.message} (.ci/run installs it)")


@pytest.fixture(scope="session")
def nginx_server() -> None:
    """The nginx binary, which services.balancer needs; skipped where it is missing."""
    from harness.balancer import nginx_binary
    from harness.errors import TargetStartError

    try:
        nginx_binary()
    except TargetStartError as exc:
        pytest.skip(f"{exc.message} (.ci/run installs it)")


def labelled_containers() -> list[str]:
    import docker

    with contextlib.closing(docker.from_env()) as client:
        return [c.name for c in client.containers.list(all=True, filters={"label": "mcp-chaos"})]


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# The command line in tests. `main()` in this process wherever no process lifecycle is under test
# (`mcp_chaos`): a child interpreter costs about a second of start-up and imports per call. A real
# process (`mcp_chaos_process`, or `CLI` for Popen) where a test is about signals, process groups,
# a SIGKILLed harness, a deadline on a run that could hang, or what a real process prints.

CLI = [sys.executable, "-m", "harness.cli"]
"""``mcp-chaos`` as a child process runs it (the console script is a wrapper around the same main)."""


def mcp_chaos_process(
    *args: str | os.PathLike[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``mcp-chaos ARGS`` as a real process; ``env`` is added to this process's environment."""
    return subprocess.run(
        [*CLI, *(os.fspath(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def mcp_chaos(
    *args: str | os.PathLike[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mcp-chaos ARGS`` in this process: ``main()``, with what it prints captured as a process's would be.

    Standard output and error are swapped for buffers during the call, as capsys does; a plain
    function rather than a fixture, so that a test's helpers (``contract()``, ``gated()``) call it
    as they called the process. ``cwd`` and ``env`` (added to the environment) hold for the call
    only. Whatever the command changed of the process is put back (the environment, which a
    command may write to, as ``contract`` does for tiktoken's cache) or must already be back (the
    working directory, the handlers of the signals a run catches): the next test finds the
    process as this one did.
    """
    from harness.cli import main

    argv = [os.fspath(a) for a in args]
    out, err = _Captured(), _Captured()
    environ, cwd_before, handlers = dict(os.environ), os.getcwd(), _stop_handlers()
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.update(env or {})
        inside = os.getcwd()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help and --version
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)  # as the interpreter does on its way out
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        changed = os.getcwd() != inside
    finally:
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(environ)
    assert not changed, "mcp-chaos changed the working directory"
    assert _stop_handlers() == handlers, "mcp-chaos left its signal handlers installed"
    return subprocess.CompletedProcess(["mcp-chaos", *argv], code, out.text(), err.text())


class _Captured(io.TextIOWrapper):
    """A text stream over bytes, as a process's standard output is (``.buffer`` included)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="", write_through=True)

    def text(self) -> str:
        self.flush()
        assert isinstance(self.buffer, io.BytesIO)
        return self.buffer.getvalue().decode("utf-8", "replace")


def _stop_handlers() -> tuple[object, ...]:
    import signal

    return tuple(signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))


def _hangup_not_ignored() -> None:
    """A run started as a terminal starts it, whatever started the tests: under ``nohup`` the harness
    (rightly) leaves SIGHUP ignored, and a test that hangs up on it would find it still running."""
    import signal

    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_cli_run(
    tmp_path: Path, data: dict[str, Any], *, run_id: str, attempts: int = 30, timeout: float = 60
) -> tuple[subprocess.Popen[str], Path]:
    """``mcp-chaos run`` as a child process, returned once ``attempts`` attempts have ended."""
    import yaml

    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(data))
    results = tmp_path / "r"
    argv = [*CLI, "run", str(path), "--results", str(results), "--run-id", run_id]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_hangup_not_ignored
    )
    history = results / run_id / "history.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if history.exists() and history.read_bytes().count(b"attempt_ended") >= attempts:
            return proc, results / run_id
        time.sleep(0.1)
    proc.kill()
    proc.communicate()
    raise AssertionError(f"the run did not get going in {timeout:g}s")


TS_DIR = ROOT / "targets" / "invoices-ts"


@contextlib.contextmanager
def npm_lock() -> Iterator[None]:
    """One ``npm ci`` of the TypeScript target at a time on this machine: the test workers, and
    other test sessions, may share the checkout (the node fixture and an image rebuild both run it)."""
    with open(Path(tempfile.gettempdir()) / "mcp-chaos-invoices-ts-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _node(why: str) -> tuple[str, str | None]:
    """Node.js 18+ and npm (npm may be missing where node_modules are installed); skipped otherwise."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        pytest.skip(f"{why} needs Node.js 18+ and npm (e.g. apt-get install -y nodejs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"{why} needs Node.js 18+, found {version}")
    return node, npm


def _npm_ci(directory: Path, npm: str | None, why: str) -> None:
    """``npm ci`` in ``directory`` unless its node_modules match its lockfile (one at a time)."""
    installed = directory / "node_modules" / ".package-lock.json"
    lockfile = directory / "package-lock.json"
    with npm_lock():
        if installed.exists() and installed.stat().st_mtime >= lockfile.stat().st_mtime:
            return
        if npm is None:
            pytest.skip(f"{why}: node_modules are missing and there is no npm to install them")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {directory.relative_to(ROOT)} failed:\n{done.stdout}{done.stderr}")


@pytest.fixture(scope="session")
def node() -> str:
    """Node.js with the TypeScript target's node_modules installed (`npm ci`, once); skipped where
    Node is missing."""
    node, npm = _node("the TypeScript target")
    _npm_ci(TS_DIR, npm, "the TypeScript target")
    return node


SERVERS_DIR = ROOT / "tests" / "servers"
PUBLISHED = SERVERS_DIR / "node_modules" / "@modelcontextprotocol"
MEMORY_SERVER = PUBLISHED / "server-memory" / "dist" / "index.js"
"""The official memory server (stdio; a JSON-lines file named by MEMORY_FILE_PATH)."""
FILESYSTEM_SERVER = PUBLISHED / "server-filesystem" / "dist" / "index.js"
"""The official filesystem server (stdio; the directories it may touch are its arguments)."""


@pytest.fixture(scope="session")
def published_servers() -> str:
    """Node.js with the servers published by others (tests/servers, pinned by its lockfile)
    installed (`npm ci`, once, from the npm registry); skipped where Node is missing."""
    node, npm = _node("the published servers")
    _npm_ci(SERVERS_DIR, npm, "the published servers")
    return node
