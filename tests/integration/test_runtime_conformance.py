"""The conformance kit every pod runtime must pass: the promises of :class:`harness.pods.pod.Pod` that
the supervisor, the injector and crash points rely on, checked through the wiring a run uses.

For each runtime (a process over HTTP and over stdio, a Docker container over HTTP and over stdio,
pods in a Kubernetes cluster, here a local fake of its API):

- started, it becomes ready and answers a tool call; its pid is known and its start is in the history;
- killed (SIGKILL), the kill returns at once with the fault recorded, the supervisor sees the exit,
  starts it again, and it answers again;
- paused, a call waits; resumed, it is answered (where the runtime can pause at all);
- its log is readable;
- stopped, it is gone: a kill then signals nothing, and stopping again is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import rundir
from harness.client.messages import ToolCall
from harness.history import EventType, Outcome, read_history
from harness.run.wiring import TargetWiring
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario
from tests.integration.test_kubernetes import kube_scenario
from tests.kubefake import fake_cluster

pytestmark = pytest.mark.integration

RUNTIMES = ["process-http", "process-stdio", "docker-http", "docker-stdio", "kubernetes"]


@pytest.fixture
def runtime_scenario(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    runtime: str = request.param
    if runtime == "kubernetes":
        with fake_cluster(tmp_path / "cluster", env={"INVOICES_MODE": "atomic"}) as cluster:
            yield kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"))
        return
    data = invoice_scenario()
    data["client"]["attempt_timeout_s"] = 5
    if runtime.startswith("docker"):
        data["target"]["image"] = request.getfixturevalue("docker_image")
        data["target"]["command"] = None
    if runtime.endswith("stdio"):
        data["target"]["transport"] = "stdio"
        data["target"]["env"]["INVOICES_TRANSPORT"] = "stdio"
    yield data


async def call(wiring: TargetWiring, request_id: int, timeout: float = 10) -> Outcome:
    (client,) = wiring.clients()
    arguments = {"customer_id": "c", "amount_cents": 100, "memo": f"kit-m{request_id:07d}"}
    arguments["idempotency_key"] = f"k{request_id}"
    try:
        res = await client.call_tool(ToolCall("create_invoice", arguments, request_id), timeout=timeout)
    finally:
        await client.aclose()
    return res.outcome


async def ready_again(wiring: TargetWiring, after_seq: int, timeout: float = 60) -> None:
    supervisor = wiring.supervisor
    assert supervisor is not None
    async with asyncio.timeout(timeout):
        while supervisor.ready_seq <= after_seq or not supervisor.ready.is_set():
            await asyncio.sleep(0.02)


async def exercise(data: dict[str, Any], results: Path) -> tuple[Path, dict[str, Any]]:
    scenario = parse_scenario(data)
    run_dir = rundir.prepare_run_dir(results, scenario)
    wiring = TargetWiring(scenario, run_dir)
    seen: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(wiring.history)
        supervisor = await stack.enter_async_context(wiring.running())
        seen["first_pid"] = supervisor.pod.pid
        seen["first_call"] = await call(wiring, 1)

        seq = supervisor.ready_seq
        seen["killed"] = supervisor.kill(trigger="conformance kit")
        await ready_again(wiring, seq)
        seen["second_pid"] = supervisor.pod.pid
        seen["after_restart"] = await call(wiring, 2)

        if supervisor.pause(duration_s=1.0, trigger="conformance kit"):
            seen["paused_call"] = await call(wiring, 3, timeout=0.5)
            supervisor.resume()
            seen["after_resume"] = await call(wiring, 4)
        seen["log"] = supervisor.pod.log_tail()
        await wiring.stop_pods()
        seen["kill_after_stop"] = supervisor.pod.kill()
        await supervisor.pod.stop(1.0)  # again: nothing to do, nothing raised
    return run_dir, seen


@pytest.mark.parametrize(
    "runtime_scenario",
    [
        pytest.param(r, marks=[pytest.mark.docker, pytest.mark.xdist_group("docker")])
        if r.startswith("docker")
        else r
        for r in RUNTIMES
    ],
    indirect=True,
)
def test_a_runtime_keeps_the_pod_protocol(runtime_scenario: dict[str, Any], tmp_path: Path) -> None:
    run_dir, seen = asyncio.run(exercise(runtime_scenario, tmp_path / "results"))
    events = read_history(run_dir / rundir.HISTORY)
    kinds = [e["type"] for e in events]

    assert seen["first_pid"] is not None
    assert seen["first_call"] is Outcome.OK
    assert kinds.count(EventType.POD_STARTED) == 2  # the start, and the restart after the kill
    assert kinds.count(EventType.POD_READY) == 2
    assert seen["killed"] is True
    assert EventType.POD_EXITED in kinds
    assert seen["second_pid"] is not None
    assert seen["after_restart"] is Outcome.OK
    can_pause = "kubernetes" not in runtime_scenario["target"]  # a cluster's pods are not frozen
    assert ("paused_call" in seen) is can_pause
    if can_pause:
        assert seen["paused_call"] is Outcome.TIMEOUT
        assert seen["after_resume"] is Outcome.OK
    assert isinstance(seen["log"], str)
    assert seen["log"]
    assert seen["kill_after_stop"] is False
