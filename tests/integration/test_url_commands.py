"""The commands of a server the harness does not start (``target.kill_command``, ``restart_command``), run
by real shells: the values they are given are data, never code; what a command leaves in its process group
is ended when it exits (but for a restart that succeeded: it may leave its server running); a kill command
that never finished is a fault that did not happen, and the run is inconclusive, never a pass."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.errors import FaultUnfinished, TargetStartError
from harness.history import EventType, FaultKind, read_history
from harness.pods.factory import user_command
from harness.pods.remote import UrlPod
from harness.rundir import HISTORY
from tests.helpers.processes import RemoteTarget, alive
from tests.helpers.scenarios import EFFECTS_QUERY, invoice_scenario, run_scenario

pytestmark = pytest.mark.integration

CODE = "$(touch pwned-dollar) `touch pwned-backquote` \"; touch pwned-quote; \" '; touch pwned-single; '"
"""A value that runs ``touch`` wherever a shell reads it as code, whatever the quotes around it."""


def url_pod(
    tmp_path: Path,
    kill: str | list[str] | None,
    restart: str | list[str] | None = None,
    *,
    run_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> UrlPod:
    """The pod of a url target whose server nothing here runs: only its commands are real."""
    environ = {**os.environ, **(env or {})}
    run_dir = run_dir or tmp_path / "run"
    return UrlPod(
        "pod-0",
        url="http://127.0.0.1:9/mcp",
        kill=user_command(kill, "target.kill_command", run_dir, environ),
        restart=user_command(restart, "target.restart_command", run_dir, environ),
        env=environ,
        log_path=tmp_path / "pod-0.log",
        timeout_s=60,
    )


async def kill_once(pod: UrlPod) -> int:
    """Reach the pod, run its kill command, wait for it to exit."""
    await pod.start()
    assert pod.kill()
    return await pod.wait()


def pwned(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith("pwned"))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The commands run in ``tmp_path`` (a ``touch`` that runs leaves its file there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_shell_line_gets_the_run_directory_and_variables_as_data(in_tmp: Path) -> None:
    """A results path holding ``$(...)`` ran it, and a variable holding ``"; ...`` too; now each value
    arrives whole, in every place of the line a shell reads differently, and nothing runs."""
    run_dir = in_tmp / f"results {CODE}"
    line = (
        "printf '%s\\n' {run_dir} \"{run_dir}\" '{run_dir}' ${SECRET} \"${SECRET}\" '${SECRET}' "
        "x{run_dir}y \"$(printf '%s' '{run_dir}')\" > seen; "
        "sub=`printf '%s' {run_dir}`; printf '%s\\n' \"$sub\" >> seen "
        "# {run_dir} it's the log's line, and a comment"
    )
    pod = url_pod(in_tmp, line, run_dir=run_dir, env={"SECRET": f"s3cret {CODE}"})
    assert asyncio.run(kill_once(pod)) == -1
    assert pwned(in_tmp) == []
    where, secret = str(run_dir.resolve()), f"s3cret {CODE}"
    assert (in_tmp / "seen").read_text().splitlines() == [
        *[where] * 3,
        *[secret] * 3,
        f"x{where}y",
        where,
        where,
    ]
    assert pod.kill_command is not None
    assert "s3cret" not in " ".join(pod.kill_command.argv)  # in the command's environment only


def test_an_argv_command_gets_each_value_as_one_word(in_tmp: Path) -> None:
    run_dir = in_tmp / f"results {CODE}"
    write = "import json, sys; open('seen', 'w').write(json.dumps(sys.argv[1:]))"
    argv = ["{python}", "-c", write, "{run_dir}", "${SECRET}", "x{run_dir}"]
    pod = url_pod(in_tmp, argv, run_dir=run_dir, env={"SECRET": CODE})
    asyncio.run(kill_once(pod))
    where = str(run_dir.resolve())
    assert json.loads((in_tmp / "seen").read_text()) == [where, CODE, f"x{where}"]
    assert pwned(in_tmp) == []


def ended(pid: int, timeout: float = 30) -> bool:
    """Whether process ``pid`` ends within ``timeout`` (told by the kernel, through a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


@contextlib.contextmanager
def children() -> Iterator[list[int]]:
    """The pids of the children commands left (the body adds them), killed if they still run after it."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


BACKGROUND = "sleep 300 & echo $! > child.pid"
"""A command that leaves a child running in its process group."""


def test_a_kill_commands_background_child_is_ended_when_it_exits(in_tmp: Path) -> None:
    """It outlived the run: a kill command's child could strike the server later, unrecorded."""
    pod = url_pod(in_tmp, BACKGROUND)
    with children() as pids:
        assert asyncio.run(kill_once(pod)) == -1
        pids.append(int((in_tmp / "child.pid").read_text()))
        assert ended(pids[0])


def test_a_failed_kill_commands_child_is_ended_too(in_tmp: Path) -> None:
    pod = url_pod(in_tmp, f"{BACKGROUND}; exit 3")
    with children() as pids:
        with pytest.raises(FaultUnfinished, match=r"exited with code 3"):
            asyncio.run(kill_once(pod))
        pids.append(int((in_tmp / "child.pid").read_text()))
        assert ended(pids[0])


def test_a_restart_that_succeeded_may_leave_its_server_running(in_tmp: Path) -> None:
    """``server &`` is how a restart starts a server in the background: it runs on after the restart."""
    pod = url_pod(in_tmp, "true", BACKGROUND)

    async def kill_and_restart() -> None:
        await kill_once(pod)
        await pod.start()

    with children() as pids:
        asyncio.run(kill_and_restart())
        pids.append(int((in_tmp / "child.pid").read_text()))
        assert alive(pids[0])


def test_a_failed_restart_leaves_nothing_running(in_tmp: Path) -> None:
    pod = url_pod(in_tmp, "true", f"{BACKGROUND}; exit 4")

    async def kill_and_restart() -> None:
        await kill_once(pod)
        await pod.start()

    with children() as pids:
        with pytest.raises(TargetStartError, match=r"exited with code 4"):
            asyncio.run(kill_and_restart())
        pids.append(int((in_tmp / "child.pid").read_text()))
        assert ended(pids[0])


def test_a_kill_still_running_when_the_pod_stops_did_not_finish(in_tmp: Path) -> None:
    """What the end of a run does to a kill command that hangs: ended, with its child, and said so."""
    pod = url_pod(in_tmp, f"{BACKGROUND}; sleep 300")

    async def kill_then_stop() -> None:
        await pod.start()
        assert pod.kill()
        waiting = asyncio.ensure_future(pod.wait())
        async with asyncio.timeout(30):
            while not (in_tmp / "child.pid").exists() or not (in_tmp / "child.pid").read_text():
                await asyncio.sleep(0.01)  # until the command has started its child
        await pod.stop(5)
        await waiting

    with children() as pids:
        with pytest.raises(FaultUnfinished, match=r"had not finished when the run ended; it was killed"):
            asyncio.run(kill_then_stop())
        pids.append(int((in_tmp / "child.pid").read_text()))
        assert ended(pids[0])


@pytest.fixture
def remote(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RemoteTarget]:
    target = RemoteTarget(tmp_path, INVOICES_MODE=request.param, INVOICES_PRE_COMMIT_MS="100")
    try:
        yield target
    finally:
        target.stop()


@pytest.mark.parametrize("remote", ["atomic"], indirect=True)
def test_a_kill_command_that_never_finished_makes_the_run_inconclusive(
    tmp_path: Path, remote: RemoteTarget
) -> None:
    """It passed "with 1 kills, 0 pod exits": the kill command still ran when the workload ended, was
    killed then, and its kill counted as one that happened."""
    data = invoice_scenario(intents=6, concurrency=2, faults={"kill": {"count": 1, "hold_dispatch": True}})
    data["target"] = {"url": remote.url, "kill_command": "sleep 300", "command_timeout_s": 600}
    data["audit"] = {"effects": {"sql": {"url": f"sqlite:///{remote.db}", "query": EFFECTS_QUERY}}}
    result = run_scenario(data, tmp_path / "results")
    events = list(read_history(result.run_dir / HISTORY))
    (fault,) = [e for e in events if e["type"] == EventType.FAULT]
    (unfinished,) = [e for e in events if e["type"] == EventType.FAULT_UNFINISHED]
    assert unfinished["fault_seq"] == fault["seq"]
    assert unfinished["fault"] == FaultKind.KILL
    assert "target.kill_command (sleep 300) had not finished when the run ended" in unfinished["reason"]
    summary = result.summary
    assert summary.injected(FaultKind.KILL) == 0
    assert any(
        r.startswith("a kill did not finish, so whether it happened is not known")
        for r in summary.inconclusive
    )
    assert not result.gate_passed


def test_the_python_placeholder_runs_the_harness_interpreter_in_a_shell_line(in_tmp: Path) -> None:
    """The documented placeholders still work in a shell line: ``{python}`` is a command word there."""
    pod = url_pod(in_tmp, "{python} -c 'import sys; print(sys.executable)' > seen")
    asyncio.run(kill_once(pod))
    assert (in_tmp / "seen").read_text().strip() == sys.executable


@pytest.mark.parametrize("remote", ["atomic"], indirect=True)
def test_a_kill_command_that_outlives_its_timeout_fails_the_run_and_its_fault(
    tmp_path: Path, remote: RemoteTarget
) -> None:
    """Timed out during the run, the kill fails the run as before, and the history says which fault it
    was (an audit of the run directory counts no kill for it)."""
    # Each call takes 0.1 s or more: the kill, early, times out with most of the workload still to run.
    data = invoice_scenario(intents=40, faults={"kill": {"count": 1, "window": [0.05, 0.1]}})
    data["target"] = {"url": remote.url, "kill_command": "sleep 300", "command_timeout_s": 0.5}
    data["audit"] = {"effects": {"sql": {"url": f"sqlite:///{remote.db}", "query": EFFECTS_QUERY}}}
    results = tmp_path / "results"
    with pytest.raises(
        FaultUnfinished, match=r"target.kill_command \(sleep 300\) was still running after 0.5s"
    ):
        run_scenario(data, results)
    (run_dir,) = results.iterdir()
    events = list(read_history(run_dir / HISTORY))
    (unfinished,) = [e for e in events if e["type"] == EventType.FAULT_UNFINISHED]
    assert "was still running after 0.5s (target.command_timeout_s)" in unfinished["reason"]
    assert events[-1]["type"] == EventType.RUN_ENDED
    assert events[-1]["status"] == "failed"
