"""However the harness ends, nothing it started outlives it, and what it saw can be audited.

Two targets that make this hard: one started through a shell wrapper (the server
is a grandchild, which ``PR_SET_PDEATHSIG`` does not reach), and one whose store
is the harness's own PostgreSQL cluster (a server process tree and a temporary
directory of ~40 MB). Each is interrupted with SIGINT, SIGTERM, SIGHUP (a closed
terminal) and SIGKILL (no code of the harness runs; its watchdog and
``mcp-chaos cleanup`` do the rest).
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from bench import audit as bench_audit
from harness.audit import scratch
from harness.init.connect import INIT_PREFIX
from harness.leftovers import run_tag
from harness.services import CLUSTER_PREFIX
from tests.helpers.cli import CLI, mcp_chaos, mcp_chaos_process, start_cli_run
from tests.helpers.containers import RUNS_CLEANUP
from tests.helpers.paths import INVOICES
from tests.helpers.processes import alive
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
WRAPPER = f'"$0" {INVOICES} & echo server $!; wait'
"""A shell that starts the server in the background and waits: the server is the harness's grandchild."""


def wrapper_target() -> dict[str, Any]:
    data = invoice_scenario(intents=100_000, concurrency=8, env={"INVOICES_PRE_COMMIT_MS": "20"})
    data["target"]["command"] = ["sh", "-c", WRAPPER, "{python}"]
    return data


def postgres_target() -> dict[str, Any]:
    data = invoice_scenario(intents=100_000, concurrency=8, env={"INVOICES_PRE_COMMIT_MS": "20"})
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": QUERY}}}
    return data


def started_processes(run_dir: Path, harness_pid: int) -> tuple[list[int], list[str]]:
    """Every process the run started that is known from outside, and its cluster directories."""
    pids = [
        e["pid"]
        for e in map(orjson.loads, (run_dir / "history.jsonl").read_bytes().splitlines())
        if e["type"] == "pod_started"
    ]
    for line in (run_dir / "pods" / "pod-0.log").read_text().splitlines():
        if line.startswith("server "):
            pids.append(int(line.split()[1]))
    clusters = glob.glob(os.path.join(tempfile.gettempdir(), f"{CLUSTER_PREFIX}{harness_pid}.*"))
    for cluster in clusters:
        pids.append(int(Path(cluster, "postmaster.pid").read_text().split()[0]))
    return pids, clusters


def gone(pids: list[int], paths: list[str], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids) and not any(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.1)
    return False


SIGKILL = pytest.param(signal.SIGKILL, marks=RUNS_CLEANUP)  # `cleanup` removes what the harness left
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, SIGKILL]


def interrupt(tmp_path: Path, data: dict[str, Any], sig: signal.Signals) -> tuple[Path, list[int], list[str]]:
    proc, run_dir = start_cli_run(tmp_path, data, run_id="interrupted", attempts=40, timeout=60)
    pids, clusters = started_processes(run_dir, proc.pid)
    assert len(pids) >= 2  # the pod and what it started
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if sig is signal.SIGKILL:
        # Every process is gone with the harness (the kernel's parent-death signal, the watchdog),
        # before any cleanup: PostgreSQL, run as its own user, once outlived it by up to a minute.
        assert gone(pids, [], timeout=10), f"outlived the harness: {[p for p in pids if alive(p)]}"
        cleanup = mcp_chaos("cleanup")
        assert cleanup.returncode == 0, cleanup.stderr
    else:
        assert proc.returncode == 130, err
        assert f"audit it with: mcp-chaos audit {run_dir}" in err
        last = orjson.loads((run_dir / "history.jsonl").read_bytes().splitlines()[-1])
        assert (last["type"], last["status"]) == ("run_ended", "interrupted")
    return run_dir, pids, clusters


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_wrapped_server_dies_with_the_harness(tmp_path: Path, sig: signal.Signals) -> None:
    run_dir, pids, _ = interrupt(tmp_path, wrapper_target(), sig)
    assert gone(pids, []), f"still running: {[p for p in pids if alive(p)]}"
    audit = mcp_chaos("audit", str(run_dir))
    assert audit.returncode == 0, audit.stderr
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["status"] == ("unfinished" if sig is signal.SIGKILL else "interrupted")
    assert summary["intents"]["started"] >= 20


@pytest.mark.postgres
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_the_postgres_service_leaves_nothing_behind(
    tmp_path: Path, sig: signal.Signals, postgres_server: None
) -> None:
    run_dir, pids, clusters = interrupt(tmp_path, postgres_target(), sig)
    assert clusters, "the run's cluster directory was not found"
    assert gone(pids, clusters), (
        f"left: {[p for p in pids if alive(p)]}, {[c for c in clusters if os.path.exists(c)]}"
    )
    audit = mcp_chaos("audit", str(run_dir))
    if sig is signal.SIGKILL:
        # The effects lived in the cluster and the final read never ran: said plainly, exit 4.
        assert audit.returncode == 4
        assert "ended before that final read" in audit.stderr
    else:
        assert audit.returncode == 0, audit.stderr
        assert orjson.loads((run_dir / "summary.json").read_bytes())["verdicts"]["duplicate"] == 0


def _children_named(parent: int, name: str) -> list[int]:
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)
            command = Path(stat).with_name("cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if int(fields[1].split()[1]) == parent and command.endswith(name.encode()):
            found.append(int(Path(stat).parent.name))
    return found


@pytest.mark.postgres
def test_ctrl_c_during_initdb_ends_it_without_a_traceback(tmp_path: Path, postgres_server: None) -> None:
    """Ctrl-C while initdb makes the cluster: initdb is killed and waited for before the loop closes
    (it was collected afterwards: "Exception ignored ... RuntimeError: Event loop is closed")."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(postgres_target()))
    argv = [*CLI, "run", str(path), "--results", str(tmp_path / "r"), "--quiet", "--no-preflight"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (initdb := _children_named(proc.pid, "initdb")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.005)
        assert initdb, "initdb never ran"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert "Exception ignored" not in err, err
    assert err.strip().splitlines()[-1].startswith("mcp-chaos: interrupted; the partial run is in ")
    assert gone(initdb, glob.glob(os.path.join(tempfile.gettempdir(), f"{CLUSTER_PREFIX}{proc.pid}.*")))


@pytest.mark.postgres
@pytest.mark.parametrize("sig", [signal.SIGINT, SIGKILL], ids=lambda s: s.name)
def test_replicas_and_their_service_leave_nothing_behind(
    tmp_path: Path, sig: signal.Signals, postgres_server: None
) -> None:
    data = postgres_target()
    data["target"]["replicas"] = 3
    run_dir, pids, clusters = interrupt(tmp_path, data, sig)
    started = {
        e["pod"]
        for e in map(orjson.loads, (run_dir / "history.jsonl").read_bytes().splitlines())
        if e["type"] == "pod_started"
    }
    assert started == {"pod-0", "pod-1", "pod-2"}
    assert clusters
    assert len(pids) >= 4  # three replicas and the PostgreSQL server
    assert gone(pids, clusters), (
        f"left: {[p for p in pids if alive(p)]}, {[c for c in clusters if os.path.exists(c)]}"
    )


@pytest.mark.exclusive  # any run's start removes stale clusters too: it would take the test's own
def test_cleanup_removes_clusters_of_harnesses_that_are_gone(tmp_path: Path) -> None:
    ours, stale = _ours_and_stale(CLUSTER_PREFIX)
    foreign = Path(tempfile.mkdtemp(prefix=f"{CLUSTER_PREFIX}not-ours-"))
    try:
        result = mcp_chaos("cleanup")
        assert result.returncode == 0, result.stderr
        assert f"removed temporary PostgreSQL cluster {stale}" in result.stdout
        assert not stale.exists()
        assert ours.exists()
        assert foreign.exists()
    finally:
        for path in (ours, stale, foreign):
            if path.exists():
                path.rmdir()


@pytest.mark.exclusive  # any run's start removes stale clusters too: it would take the test's own
def test_cleanup_of_one_run_removes_that_run_s_clusters_only(tmp_path: Path) -> None:
    dead_owner = f"{os.getpid()}.1-"  # a start time no live process has
    mine = Path(tempfile.mkdtemp(prefix=f"{CLUSTER_PREFIX}{dead_owner}", suffix=f".{run_tag('night-1')}"))
    other = Path(tempfile.mkdtemp(prefix=f"{CLUSTER_PREFIX}{dead_owner}", suffix=f".{run_tag('night-2')}"))
    probe = Path(tempfile.mkdtemp(prefix=f"{INIT_PREFIX}{dead_owner}"))
    try:
        result = mcp_chaos("cleanup", "--run", "night-1")
        assert result.returncode == 0, result.stderr
        assert f"removed temporary PostgreSQL cluster {mine}" in result.stdout
        assert not mine.exists()
        assert other.exists()
        assert probe.exists()  # init's directories belong to no run
    finally:
        for path in (mine, other, probe):
            if path.exists():
                path.rmdir()


@RUNS_CLEANUP
@pytest.mark.exclusive
def test_cleanup_removes_init_directories_of_harnesses_that_are_gone(tmp_path: Path) -> None:
    ours, stale = _ours_and_stale(INIT_PREFIX)
    (stale / "init" / "pods").mkdir(parents=True)
    (stale / "init" / "pods" / "pod-0.log").write_text("token=unredacted\n")
    try:
        result = mcp_chaos("cleanup")
        assert result.returncode == 0, result.stderr
        assert f"removed init's temporary directory {stale}" in result.stdout
        assert not stale.exists()
        assert ours.exists()
    finally:
        ours.rmdir()


def test_a_sigkilled_init_leaves_no_directory(tmp_path: Path) -> None:
    """init's throwaway run directory holds the probed server's log; its watchdog deletes it."""
    never_answers = f"{sys.executable} -c 'import time; print(\"booting\", flush=True); time.sleep(600)'"
    args = ["init", "--command", never_answers, "--transport", "stdio", "-o", str(tmp_path / "s.yaml")]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids: list[int] = []
        histories: list[str] = []
        deadline = time.monotonic() + 60
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            pattern = f"{INIT_PREFIX}{proc.pid}.*/init/history.jsonl"
            histories = glob.glob(os.path.join(tempfile.gettempdir(), pattern))
            lines = Path(histories[0]).read_bytes().split(b"\n")[:-1] if histories else []  # whole lines
            pids = [e["pid"] for e in map(orjson.loads, lines) if e["type"] == "pod_started"]
        assert pids, "init's directory, named for its process, with its server started, was not found"
        directory = Path(histories[0]).parents[1]
        assert list(directory.glob("init/pods/*.log"))  # the server's log, not redacted
        proc.kill()
        proc.wait(timeout=30)
        assert gone(pids, [str(directory)], timeout=30), f"left: {directory}, {[p for p in pids if alive(p)]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _ours_and_stale(prefix: str) -> tuple[Path, Path]:
    """Two temporary directories named as the harness names its own: one for this test's process (a
    live owner), one for a dead owner (this pid with a start time no live process has)."""
    ours = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.{_start_time(os.getpid())}-"))
    stale = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.1-"))
    return ours, stale


@RUNS_CLEANUP
@pytest.mark.exclusive  # every audit removes the files of audits that are gone: it would take these
def test_a_sigkilled_audit_s_files_are_removed_by_the_next_audit_and_by_cleanup(tmp_path: Path) -> None:
    big, small = tmp_path / "big", tmp_path / "small"
    bench_audit.synthesize(big, 300_000)
    bench_audit.synthesize(small, 100)
    proc = subprocess.Popen([*CLI, "audit", str(big), "--no-html"], stdout=subprocess.DEVNULL)
    try:
        pattern = f"{tempfile.gettempdir()}/{scratch.PREFIX}{proc.pid}.*"
        deadline = time.monotonic() + 60
        while not glob.glob(f"{pattern}/intents.arrow") and time.monotonic() < deadline:
            time.sleep(0.01)  # the fold has begun writing intents
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = glob.glob(pattern)
        assert left, "the killed audit left nothing to remove: it finished first"
        every = f"{tempfile.gettempdir()}/{scratch.PREFIX}*"
        before = set(glob.glob(every))  # with this process's own, of audits it ran and still holds
        result = mcp_chaos_process("audit", small)  # report.html too: it once kept the rows alive
        assert result.returncode == 0, result.stderr
        after = set(glob.glob(every))
        assert not after & set(left)
        # And it left none of its own: anything new belongs to an audit still running (another suite
        # sharing this machine's temporary directory), never to one that has ended.
        owners = [int(Path(d).name.removeprefix(scratch.PREFIX).split(".")[0]) for d in after - before]
        assert all(alive(pid) for pid in owners), after - before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ours, stale = _ours_and_stale(scratch.PREFIX)
    try:
        result = mcp_chaos_process("cleanup")
        assert result.returncode == 0, result.stderr
        assert f"removed a killed audit's temporary directory {stale}" in result.stdout
        assert not stale.exists()
        assert ours.exists()  # a running audit's
    finally:
        for path in (stale, ours):
            if path.exists():
                path.rmdir()


def test_an_interrupted_exploration_in_copies_names_each_copy_s_run_to_audit(tmp_path: Path) -> None:
    """``crashpoints --jobs 2`` explores in two runs (``job-1``, ``job-2``); Ctrl-C names each to audit
    (it named their parent, which ``audit`` refuses: not a run directory), and each audits."""
    data = invoice_scenario(mode="naive", intents=3)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    argv = [*CLI, "crashpoints", str(path), "--results", str(tmp_path / "r"), "--run-id", "x", "--jobs", "2"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        histories = [tmp_path / "r" / "x" / f"job-{k}" / "history.jsonl" for k in (1, 2)]
        while not all(h.is_file() and h.stat().st_size > 0 for h in histories):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the copies never started"
            time.sleep(0.05)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    named = [
        line.rsplit("mcp-chaos audit ", 1)[1].rstrip(")") for line in err.splitlines() if "audit it" in line
    ]
    assert sorted(Path(n).name for n in named) == ["job-1", "job-2"], err
    for run_dir in named:
        audited = mcp_chaos("audit", run_dir, "--no-html")
        # A finding or none, or (interrupted before its first write) no store to count: never "not a run".
        assert audited.returncode in (0, 1, 4), audited.stderr
        assert "not a run directory" not in audited.stderr
