"""The suite's pytest hooks and fixtures; plain helpers and constants are in ``tests/helpers/``.

Also what lets the suite run in parallel (``pytest -n 2 --dist loadgroup``, as ``make test`` does):
tests are spread over worker processes, except where they share something of the machine.

- Every test that starts containers (it uses ``docker_image`` or ``ts_image``) is put in the
  ``docker`` xdist group: they run one after another on one worker, because each checks that no
  labelled container is left when it ends, and ``mcp-chaos cleanup`` removes the containers of
  any harness that is gone. A test that runs ``cleanup`` without ``--run`` joins that group too
  (``tests.helpers.containers.RUNS_CLEANUP``).
- A test marked ``exclusive`` runs with no other test beside it (a lock shared by the workers:
  the others finish the test they are in, then wait): for tests that look at state the whole
  machine shares, such as the temporary PostgreSQL clusters every run's start may remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import signal
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from harness.audit.auditor import AuditResult
from harness.history_schema import CHECK_ENV
from tests.helpers.containers import IMAGE, TS_IMAGE, reference_image
from tests.helpers.node import npm_ci, require_node
from tests.helpers.paths import SERVERS_DIR, TS_DIR
from tests.helpers.processes import Target
from tests.helpers.scenarios import run_scenario

# Hypothesis's per-example deadline (200 ms) is a timed assertion, which this suite does not make
# (speed goals live in `make bench`): on a busy machine it failed whole runs of correct code, so no
# profile has one. `ci` is Hypothesis's own CI profile: the same examples every run (derandomized
# from each test's source, no example database), too_slow (timed as well) not a failure, and a
# failure printed with the blob that replays it; a flaky test is a bug here, and a CI failure must
# be the code's, reproducible. `dev` varies the examples from run to run and replays past failures
# from .hypothesis/. `slow` tries 10 times the examples of a test that does not set its own.
# HYPOTHESIS_PROFILE chooses; without it, `ci` where CI is set (GitHub Actions sets it), else `dev`.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.register_profile("check", deadline=None, max_examples=20)  # `make check` (tests/helpers/quick.py)
settings.register_profile("slow", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if "CI" in os.environ else "dev"))

# Every history a run of the suite writes, in this process or a child's, is checked line by line
# against harness/history.schema.json when it is closed: a writer whose line the event types do not
# describe fails the test that ran it (harness/history_schema.py).
os.environ[CHECK_ENV] = "1"

# A shell starts a background job (`make test &`, `nohup`) with SIGINT and SIGQUIT ignored, and what it
# starts inherits that: the harness (rightly) keeps an ignored SIGINT ignored, so every test that
# presses Ctrl-C on a run found it still running, and the run went on, its 100,000 intents long. The
# tests press it on purpose: they take SIGINT back here, before the workers and every run they start
# (exec resets a handler, not an ignore).
for _sig, _default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _default)

CONTAINER_FIXTURES = {"docker_image", "ts_image"}


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


@pytest.fixture
def run(tmp_path: Path) -> Callable[[dict[str, Any]], AuditResult]:
    return lambda data: run_scenario(data, tmp_path / "results")


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


@pytest.fixture(scope="session")
def node() -> str:
    """Node.js with the TypeScript target's node_modules installed (`npm ci`, once); skipped where
    Node is missing."""
    node, npm = require_node("the TypeScript target")
    npm_ci(TS_DIR, npm, "the TypeScript target")
    return node


@pytest.fixture(scope="session")
def published_servers() -> str:
    """Node.js with the servers published by others (tests/servers, pinned by its lockfile)
    installed (`npm ci`, once, from the npm registry); skipped where Node is missing."""
    node, npm = require_node("the published servers")
    npm_ci(SERVERS_DIR, npm, "the published servers")
    return node
