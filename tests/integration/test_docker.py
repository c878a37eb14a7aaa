"""The Docker runtime against a real engine and the reference image: kills, restarts, cleanup."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Outcome, Verdict, read_history
from harness.loopback import free_port
from harness.pods.factory import make_pod
from harness.scenario import parse_scenario
from tests.helpers.cli import CLI, mcp_chaos, start_cli_run
from tests.helpers.containers import labelled_containers
from tests.helpers.scenarios import invoice_scenario

pytestmark = [pytest.mark.integration, pytest.mark.docker]
CRASH = {"INVOICES_FAILPOINT": "after_business_commit@3"}

Run = Callable[[dict[str, Any]], AuditResult]


def image_scenario(image: str, mode: str, **kw: Any) -> dict[str, Any]:
    data = invoice_scenario(mode=mode, **kw)
    data["target"]["image"] = image
    del data["target"]["command"]
    return data


def test_crash_and_restart_of_the_same_container(run: Run, docker_image: str) -> None:
    data = image_scenario(docker_image, "naive", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == 1
    assert s.pods.crashes == 1
    events = list(read_history(result.run_dir / "history.jsonl"))
    started = [e for e in events if e["type"] == "pod_started"]
    assert len(started) == 2
    assert len({e["container"] for e in started}) == 1  # restarted, not recreated
    exited = next(e for e in events if e["type"] == "pod_exited")
    assert exited["returncode"] == 137  # SIGKILL, as the failpoint does it
    assert "listening on http://127.0.0.1" in (result.run_dir / "pods" / "pod-0.log").read_text()
    assert labelled_containers() == []


@pytest.mark.parametrize(("mode", "duplicates"), [("naive", True), ("atomic", False)])
def test_kills_through_the_docker_api(run: Run, docker_image: str, mode: str, duplicates: bool) -> None:
    env = {"INVOICES_PRE_COMMIT_MS": "1", "INVOICES_POST_COMMIT_MS": "40", "INVOICES_LATENCY_JITTER": "0.2"}
    data = image_scenario(docker_image, mode, intents=300, concurrency=8, env=env, kills={"count": 3})
    data["faults"]["kill"]["min_uptime_s"] = 0.3
    result = run(data)
    s = result.summary
    assert s.injected(FaultKind.KILL) == 3
    assert s.pods.exits == 3
    if duplicates:
        assert s.verdicts[Verdict.DUPLICATE] >= 3
        assert s.duplicate_causes == {"kill": s.verdicts[Verdict.DUPLICATE]}
    else:
        assert s.verdicts[Verdict.EXACTLY_ONCE] == 300
    assert labelled_containers() == []


def test_a_stop_during_a_start_leaves_no_container(tmp_path: Path, docker_image: str) -> None:
    # A restart's engine calls run in a thread that a cancelled await does not end: when a run
    # ended while a pod restarted, the container was created after the stop and outlived the run.
    import asyncio

    from harness.errors import TargetStartError

    scenario = parse_scenario(image_scenario(docker_image, "atomic"))
    (tmp_path / "data").mkdir()
    pod = make_pod(scenario.target, tmp_path, port=free_port(), name="pod-0", urls={})

    async def race() -> None:
        starting = asyncio.ensure_future(pod.start())
        await asyncio.sleep(0)  # the start's thread is on its way to the engine
        starting.cancel()  # as the end of a run cancels a supervisor mid-restart
        await pod.stop(5)
        with contextlib.suppress(asyncio.CancelledError, TargetStartError):
            await starting
        await asyncio.sleep(0.5)  # time for a start thread that outlived the stop to create its container

    asyncio.run(race())
    assert labelled_containers() == []


def test_containers_use_host_networking_only(tmp_path: Path, docker_image: str) -> None:
    import asyncio

    scenario = parse_scenario(image_scenario(docker_image, "atomic"))
    (tmp_path / "data").mkdir()
    pod = make_pod(scenario.target, tmp_path, port=free_port(), name="pod-0", urls={})

    async def check() -> dict[str, Any]:
        await pod.start()
        try:
            import docker

            (container,) = docker.from_env().containers.list(
                filters={"label": f"mcp-chaos.run={tmp_path.name}"}
            )
            return dict(container.attrs)
        finally:
            await pod.stop(5)

    attrs = asyncio.run(check())
    assert attrs["HostConfig"]["NetworkMode"] == "host"
    networks = attrs["NetworkSettings"]["Networks"]
    assert list(networks) == ["host"]
    assert networks["host"]["IPAddress"] == ""  # no bridge, no private-range address
    assert attrs["Config"]["Labels"]["mcp-chaos"] == "1"
    assert labelled_containers() == []


def test_black_box_image_audited_through_the_effect_sink(run: Run, docker_image: str) -> None:
    env = {"INVOICES_SINK_URL": "{sink_url}", "INVOICES_POST_COMMIT_MS": "40"}
    data = image_scenario(docker_image, "naive", intents=200, concurrency=8, env=env, kills={"count": 2})
    data["audit"] = {"effects": {"sink": {}}}
    result = run(data)
    s = result.summary
    assert (result.run_dir / "sink.jsonl").is_file()
    assert s.effects.total >= 200
    assert s.verdicts[Verdict.DUPLICATE] >= 1
    assert s.verdicts[Verdict.LOST] == 0


def test_missing_image_is_a_clear_error(run: Run, docker_image: str) -> None:
    from harness.errors import TargetStartError

    with pytest.raises(TargetStartError, match=r"image 'mcp-chaos/no-such-image:dev' not found locally"):
        run(image_scenario("mcp-chaos/no-such-image:dev", "atomic"))
    assert labelled_containers() == []


def test_ctrl_c_removes_the_container(tmp_path: Path, docker_image: str) -> None:
    data = image_scenario(docker_image, "atomic", intents=100_000, concurrency=4)
    proc, run_dir = start_cli_run(tmp_path, data, run_id="d")
    assert labelled_containers() != []
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert labelled_containers() == []
    assert orjson.loads((run_dir / "history.jsonl").read_bytes().splitlines()[-1])["status"] == "interrupted"


def test_cleanup_removes_what_a_killed_harness_left(tmp_path: Path, docker_image: str) -> None:
    data = image_scenario(docker_image, "atomic", intents=100_000, concurrency=4)
    proc, _ = start_cli_run(tmp_path, data, run_id="d")
    proc.kill()  # SIGKILL: the harness cannot remove its container
    proc.communicate(timeout=30)
    left = labelled_containers()
    assert left == ["mcp-chaos-d-pod-0"]
    cleanup = mcp_chaos("cleanup", "--run", "d")
    assert cleanup.returncode == 0, cleanup.stderr
    assert "removed container mcp-chaos-d-pod-0" in cleanup.stdout
    assert labelled_containers() == []


def test_pause_freezes_the_container(run: Run, docker_image: str) -> None:
    data = image_scenario(
        docker_image, "naive", intents=120, concurrency=4, env={"INVOICES_POST_COMMIT_MS": "20"}
    )
    data["faults"] = {"pause": {"count": 1, "duration_s": 1.5, "window": [0.3, 0.5]}}
    data["client"]["attempt_timeout_s"] = 0.5
    result = run(data)
    s = result.summary
    assert s.injected(FaultKind.PAUSE) == 1
    assert s.pods.exits == 0
    assert s.attempts.by_outcome[Outcome.TIMEOUT] >= 4  # every attempt in flight timed out while frozen
    assert s.verdicts[Verdict.DUPLICATE] >= 1  # thawed, the server ran the originals and the retries
    assert s.duplicate_causes == {"pause": s.verdicts[Verdict.DUPLICATE]}


def test_a_relative_results_directory_reaches_docker_as_an_absolute_path(
    tmp_path: Path, docker_image: str
) -> None:
    # What the README's `make chaos IMAGE=...` does: --results results, relative to the working directory.
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(image_scenario(docker_image, "atomic", intents=5)))
    proc = mcp_chaos("run", "s.yaml", "--results", "results", "--run-id", "rel", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| exactly_once |       5 |" in proc.stdout
    assert (tmp_path / "results" / "rel" / "data" / "invoices.db").is_file()
    assert labelled_containers() == []


@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("atomic", 0)])
def test_a_stdio_server_in_an_image(run: Run, docker_image: str, mode: str, duplicates: int) -> None:
    # stdin and stdout attached through the engine; the crash is the failpoint's exit as PID 1.
    data = image_scenario(docker_image, mode, env={**CRASH, "INVOICES_TRANSPORT": "stdio"})
    data["target"]["transport"] = "stdio"
    result = run(data)
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    assert (s.pods.crashes, s.sessions.opened) == (1, 2)
    assert "serving MCP on stdio" in (result.run_dir / "pods" / "pod-0.log").read_text()  # its stderr
    assert labelled_containers() == []


def test_cleanup_keeps_the_container_of_a_run_in_progress(tmp_path: Path, docker_image: str) -> None:
    data = image_scenario(docker_image, "atomic", intents=100_000, concurrency=4)
    proc, _ = start_cli_run(tmp_path, data, run_id="busy")
    try:
        cleanup = mcp_chaos("cleanup")
        assert cleanup.returncode == 0, cleanup.stderr
        assert "kept container mcp-chaos-busy-pod-0: its harness still runs" in cleanup.stdout
        assert labelled_containers() == ["mcp-chaos-busy-pod-0"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert labelled_containers() == []


def test_an_image_command_that_does_not_exist_is_one_line_and_exit_3(
    tmp_path: Path, docker_image: str
) -> None:
    data = image_scenario(docker_image, "atomic")
    data["target"]["command"] = ["no-such-program", "/app/server.py"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    proc = mcp_chaos("run", str(tmp_path / "s.yaml"), "--results", str(tmp_path))
    assert proc.returncode == 3
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("mcp-chaos: error:")]
    assert error.startswith(f"mcp-chaos: error: cannot start a container of {docker_image!r}:")
    assert error.endswith("(check target.command)")
    assert labelled_containers() == []


def test_three_replicas_in_containers_run_and_stop(tmp_path: Path, docker_image: str) -> None:
    # Three replicas' container waits once took every thread of asyncio's default pool, and the
    # stop that would have ended them never ran: the run hung after its last intent. A separate
    # process with a deadline, so a hang fails the test instead of stopping the suite.
    data = image_scenario(docker_image, "atomic", intents=30, concurrency=3)
    data["target"]["replicas"] = 3
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    argv = [*CLI, "run", "s.yaml", "--results", "r", "--run-id", "three"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        subprocess.run([*CLI, "cleanup", "--force"], check=False, timeout=60)
        pytest.fail("a run of three replicas in containers did not end within 90 s")
    assert proc.returncode == 0, err
    assert "| exactly_once |      30 |" in out
    started = [
        e for e in read_history(tmp_path / "r" / "three" / "history.jsonl") if e["type"] == "pod_started"
    ]
    assert sorted(e["pod"] for e in started if "three.preflight" not in str(e))[:3] == [
        "pod-0",
        "pod-1",
        "pod-2",
    ]
    assert len({e["container"] for e in started}) == 3
    assert "| pod-2   |" in out  # the report's row per replica
    assert labelled_containers() == []
