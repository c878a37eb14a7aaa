"""The Kubernetes runtime against a local fake of the API endpoints it uses (``tests/kubefake.py``).

No cluster runs here: what is shown is that the runtime speaks those endpoints
as the API reference describes them, that a kill through the API or through a
Chaos Mesh PodChaos really kills a pod of the reference target (a process) and
the run waits for its replacement, that the audit counts what happened, and that
every object the run created is gone after success, failure and SIGINT.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.errors import TargetError, TargetStartError
from harness.history import EventType, FaultKind, Verdict
from tests.helpers.cli import CLI, mcp_chaos
from tests.helpers.processes import alive
from tests.helpers.scenarios import EFFECTS_QUERY, run_scenario
from tests.integration.test_contract import contract, verdicts
from tests.kubefake import TOKEN, FakeCluster, fake_cluster

pytestmark = pytest.mark.integration

ENDPOINTS = {
    "list pods": ("GET", "/api/v1/namespaces/chaos/pods?"),
    "delete pod": ("DELETE", "/api/v1/namespaces/chaos/pods/"),
    "pod log": ("GET", "/log?"),
    "create podchaos": ("POST", "/apis/chaos-mesh.org/v1alpha1/namespaces/chaos/podchaos"),
    "delete podchaos": ("DELETE", "/apis/chaos-mesh.org/v1alpha1/namespaces/chaos/podchaos/"),
}


def kube_scenario(
    cluster: FakeCluster, kubeconfig: Path, *, intents: int = 40, **kube: Any
) -> dict[str, Any]:
    db = cluster.env["INVOICES_DB"]
    return {
        "name": "kube",
        "seed": 3,
        "target": {
            "kubernetes": {
                "kubeconfig": str(kubeconfig),
                "context": "fake",
                "namespace": cluster.namespace,
                "selector": "app=invoices",
                "url": cluster.service_url,
                **kube,
            },
            "ready_timeout_s": 20,
            "restart_delay_s": 0,
        },
        "workload": {
            "intents": intents,
            "concurrency": 4,
            "tool": "create_invoice",
            "arguments": {
                "customer_id": "c-{index}",
                "amount_cents": 100,
                "memo": "{marker}",
                "idempotency_key": "{key}",
            },
        },
        # As tests/conftest.py's invoice_scenario: retries for about 10 s, longer than a replacement.
        "client": {
            "attempt_timeout_s": 10,
            "max_attempts": 100,
            "backoff": {"initial_s": 0.02, "max_s": 0.2},
        },
        "faults": {"kill": {"count": 2, "hold_dispatch": True}},
        "audit": {"effects": {"sql": {"url": f"sqlite:///{db}", "query": EFFECTS_QUERY}}},
    }


def history(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "history.jsonl").read_bytes().splitlines()]


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeCluster]:
    options = dict(getattr(request, "param", {}))
    env = {"INVOICES_MODE": "atomic", "INVOICES_PRE_COMMIT_MS": "20", **options.pop("env", {})}
    with fake_cluster(tmp_path / "cluster", env=env, **options) as c:
        yield c


@pytest.mark.parametrize("cluster", [{"replicas": 2}], indirect=True)
def test_kills_through_the_api_replace_pods_and_the_run_is_audited(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    first = set(cluster.pods)
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), intents=100)
    # Both kills in the first 40% of the intents: the rest outlasts a poll of the pods (the second
    # victim's exit is seen, and its replacement waited for, while the workload still runs).
    data["faults"]["kill"]["window"] = [0.05, 0.4]
    started = time.monotonic()
    audit = run_scenario(data, tmp_path / "results")
    took = time.monotonic() - started
    events = history(audit.run_dir)
    kills = [e for e in events if e["type"] == EventType.FAULT and e["fault"] == FaultKind.KILL]
    exits = [e for e in events if e["type"] == EventType.POD_EXITED]
    assert len(kills) == 2, events
    victims = [k["pod"] for k in kills]
    assert [e["pod"] for e in exits] == victims  # a kill's exit, not a crash
    assert cluster.deleted == [(v, 0) for v in victims]  # deleted with gracePeriodSeconds=0
    assert victims[0] in first
    assert not set(victims) & set(cluster.pods)  # gone, and replaced:
    assert len(cluster.pods) == 2
    ready = [e for e in events if e["type"] == EventType.POD_READY]
    assert ready[0]["pod"] == ",".join(sorted(first))
    assert ready[1]["pod"] not in first  # the replacement, Ready before the second kill
    assert events[-1]["kills"] == 2
    assert events[-1]["restarts"] == 2
    assert audit.summary.verdicts[Verdict.EXACTLY_ONCE] == 100, audit.summary
    # The logs of the pods that run at the end are in the run directory.
    logs = {p.name for p in (audit.run_dir / "pods").glob("*.log")}
    assert logs == {f"{name}.log" for name in cluster.pods}
    assert any("listening on" in (audit.run_dir / "pods" / name).read_text() for name in logs)
    assert not cluster.unexpected
    first_kill, first_exit = kills[0]["t"], exits[0]["t"]
    print(
        f"\napi kills: 100 intents, 2 kills, 2 replicas: {took:.1f}s; kill to exit seen "
        f"{first_exit - first_kill:.2f}s, to replacement ready {ready[1]['t'] - first_kill:.2f}s"
    )


CRASH = {"env": {"INVOICES_MODE": "naive", "INVOICES_FAILPOINT": "after_business_commit@2"}}


@pytest.mark.parametrize("cluster", [CRASH], indirect=True)
def test_a_container_restarted_in_place_is_a_crash_and_its_duplicate_is_counted(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    (name,) = cluster.pods
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), intents=3)
    data["workload"]["concurrency"] = 1
    del data["faults"]
    audit = run_scenario(data, tmp_path / "results")
    exits = [e for e in history(audit.run_dir) if e["type"] == EventType.POD_EXITED]
    assert [(e["pod"], e["returncode"]) for e in exits] == [(name, 137)]  # SIGKILLed by its failpoint
    assert cluster.pods[name].restart_count == 1
    assert audit.summary.pods.crashes == 1
    assert audit.summary.verdicts[Verdict.DUPLICATE] == 1  # naive: committed, answer lost, retried
    assert audit.intents.set_index("intent").loc[1]["cause"] == "crash"
    assert {p.name for p in (audit.run_dir / "pods").glob("*.log")} == {f"{name}.log", f"{name}.previous.log"}


def test_a_grace_period_of_null_is_the_pods_own(cluster: FakeCluster, tmp_path: Path) -> None:
    data = kube_scenario(
        cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), grace_period_s=None, intents=20
    )
    data["faults"]["kill"]["count"] = 1
    audit = run_scenario(data, tmp_path / "results")
    assert cluster.deleted == [(cluster.deleted[0][0], None)]  # no gracePeriodSeconds sent
    assert all("gracePeriodSeconds" not in path for method, path in cluster.requests if method == "DELETE")
    assert audit.summary.verdicts[Verdict.EXACTLY_ONCE] == 20


def test_chaos_mesh_kills_and_its_podchaos_is_deleted_after_the_run(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    data = kube_scenario(
        cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), kill="chaos_mesh", grace_period_s=1
    )
    audit = run_scenario(data, tmp_path / "results")
    assert len(cluster.podchaos_created) == 2
    assert cluster.podchaos == {}  # deleted at the end of the run
    assert [grace for _, grace in cluster.deleted] == [1, 1]  # the PodChaos's gracePeriod
    assert audit.summary.verdicts[Verdict.EXACTLY_ONCE] == 40
    methods = {(m, p.split("?")[0].rsplit("/", 1)[-1]) for m, p in cluster.requests}
    assert ("DELETE", cluster.podchaos_created[0]) in methods
    assert not any(m == "DELETE" and "/pods/" in p for m, p in cluster.requests)  # Chaos Mesh killed
    assert not cluster.unexpected


def test_podchaos_is_deleted_when_the_pod_never_comes_back(cluster: FakeCluster, tmp_path: Path) -> None:
    """A replacement that never becomes Ready: the run stops on it, UNAVAILABLE, and its PodChaos is
    deleted all the same."""
    cluster.broken_replacements = True
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), kill="chaos_mesh")
    data["target"]["ready_timeout_s"] = 2
    result = run_scenario(data, tmp_path / "results")
    (found,) = result.summary.unavailable
    assert not found.came_back
    assert "0 of 1 pods matching app=invoices in namespace chaos Ready" in found.sentence
    assert len(cluster.podchaos_created) == 1
    assert cluster.podchaos == {}


def test_podchaos_is_deleted_after_sigint(cluster: FakeCluster, tmp_path: Path) -> None:
    import yaml

    data = kube_scenario(
        cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), kill="chaos_mesh", intents=100_000
    )
    data["faults"] = {"kill": {"mean_interval_s": 0.5}}
    path = tmp_path / "kube.yaml"
    path.write_text(yaml.safe_dump(data))
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            str(path),
            "--results",
            str(results),
            "--no-preflight",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while len(cluster.podchaos_created) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert cluster.podchaos, "no PodChaos was created"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert cluster.podchaos_created
    assert cluster.podchaos == {}


@pytest.mark.parametrize("cluster", [{"chaos_mesh": False}], indirect=True)
def test_a_kill_the_api_refuses_fails_the_run_with_its_message(cluster: FakeCluster, tmp_path: Path) -> None:
    """Not "nothing was killed", which would have the injector try again at once, forever."""
    # 20 intents: a held kill that landed on work used to let a fast run end before it struck (the
    # landing now keeps the last intent back until the kill is made).
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), kill="chaos_mesh", intents=20)
    started = time.monotonic()
    with pytest.raises(TargetError, match=r"cannot create a PodChaos for pod invoices-\S+: 404 Not Found"):
        run_scenario(data, tmp_path / "results")
    assert time.monotonic() - started < 15
    assert len(cluster.pods) == 1  # nothing was killed


def test_contract_checks_restart_by_deleting_a_pod(cluster: FakeCluster, tmp_path: Path) -> None:
    (first,) = cluster.pods
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"))
    proc, report = contract(tmp_path, data, "--only", "restart_keeps_keys")
    assert proc.returncode == 0, proc.stderr
    assert verdicts(report) == {"restart_keeps_keys": "pass"}
    assert cluster.deleted == [(first, 0)]


@pytest.mark.parametrize(
    ("kube", "message"),
    [
        ({"selector": "app=invoicse"}, "target.kubernetes: no pod in namespace chaos matches app=invoicse"),
        ({"namespace": "prod"}, "target.kubernetes: no pod in namespace prod matches app=invoices"),
        ({"selector": "app in (a b"}, "cannot list pods in namespace chaos (app in (a b): 400 Bad Request"),
        ({"context": "staging"}, "target.kubernetes: cannot load the kubeconfig"),
    ],
)
def test_a_target_the_cluster_does_not_have_fails_at_once(
    cluster: FakeCluster, tmp_path: Path, kube: dict[str, Any], message: str
) -> None:
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig"), **kube)
    started = time.monotonic()
    with pytest.raises(TargetError) as caught:
        run_scenario(data, tmp_path / "results")
    assert message in caught.value.message
    assert "\n" not in caught.value.message
    assert time.monotonic() - started < 5  # not after target.ready_timeout_s


def test_a_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    data = {
        "name": "kube",
        "target": {
            "kubernetes": {
                "kubeconfig": str(tmp_path / "nope"),
                "selector": "app=x",
                "url": "http://127.0.0.1:9/mcp",
            }
        },
        "workload": {"intents": 1, "tool": "t", "arguments": {"m": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": str(tmp_path / "e.jsonl")}}},
    }
    with pytest.raises(TargetStartError, match=r"target\.kubernetes: cannot load the kubeconfig") as caught:
        run_scenario(data, tmp_path / "results")
    assert "\n" not in caught.value.message


def test_a_wrong_token_is_the_api_servers_answer(cluster: FakeCluster, tmp_path: Path) -> None:
    data = kube_scenario(cluster, cluster.kubeconfig(tmp_path / "kubeconfig", token="wrong"))
    with pytest.raises(
        Exception, match=r"cannot list pods in namespace chaos \(app=invoices\): 401 Unauthorized"
    ):
        run_scenario(data, tmp_path / "results")


# -- an API server or a credential plugin that never answers: the deadline holds, nothing is left


def kubeconfig(path: Path, server: str, *, user: dict[str, Any] | None = None) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user or {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    return path


def unreached_scenario(config: Path, ready_timeout_s: float) -> dict[str, Any]:
    return {
        "name": "kube",
        "target": {
            "kubernetes": {"kubeconfig": str(config), "selector": "app=x", "url": "http://127.0.0.1:9/mcp"},
            "ready_timeout_s": ready_timeout_s,
        },
        "workload": {"intents": 1, "tool": "t", "arguments": {"m": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": str(config.parent / "e.jsonl")}}},
    }


def finished(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """What the harness printed on stderr once it ended; killed (and the test failed) if it hangs."""
    try:
        return proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def error_line(err: str) -> str:
    """The one error line of what the harness printed (after its line naming the run)."""
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith("mcp-chaos: error: ")]
    assert err.endswith(line + "\n"), err  # nothing after it: no detail, no second error
    return line


def harness(tmp_path: Path, data: dict[str, Any]) -> subprocess.Popen[str]:
    """``mcp-chaos run`` as a real process: signals reach it, and a hang fails its test by a timeout."""
    path = tmp_path / "kube.yaml"
    path.write_text(json.dumps(data))
    argv = [*CLI, "run", str(path), "--results", str(tmp_path / "results"), "--no-preflight", "--quiet"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket on 127.0.0.1 that accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_an_api_server_that_never_answers_ends_at_the_deadline(tmp_path: Path, silent_server: str) -> None:
    proc = harness(tmp_path, unreached_scenario(kubeconfig(tmp_path / "kubeconfig", silent_server), 2))
    err = finished(proc)  # the client's own retries took 121 s
    assert proc.returncode == 3, err
    assert error_line(err).startswith(
        "mcp-chaos: error: target.kubernetes: the API server did not answer within target.ready_timeout_s "
        "(2s): ReadTimeoutError (/api/v1/namespaces/default/pods?labelSelector=app%3Dx)"
    ), err
    # The logs are not asked for at the end: each call would wait out its timeout again.
    (log,) = (tmp_path / "results").rglob("kubernetes.log")
    assert log.read_text() == "(no pod logs: the API server did not answer)\n"


HANGING_PLUGIN = """#!/bin/sh
sleep 600 &
echo "$$ $!" > "$(dirname "$0")/plugin.pids"
wait
"""


def hanging_plugin(tmp_path: Path, server: str) -> Path:
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(HANGING_PLUGIN)
    plugin.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}
    return kubeconfig(tmp_path / "kubeconfig", server, user=user)


def plugin_pids(tmp_path: Path, proc: subprocess.Popen[str]) -> list[int]:
    """The plugin's shell and the child it started, once it runs."""
    path = tmp_path / "plugin.pids"
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert path.exists(), "the credential plugin did not start"
    time.sleep(0.1)  # the line is written
    return [int(p) for p in path.read_text().split()]


def none_alive(pids: list[int], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_a_credential_plugin_that_hangs_ends_at_the_deadline_and_is_killed(
    tmp_path: Path, silent_server: str
) -> None:
    proc = harness(tmp_path, unreached_scenario(hanging_plugin(tmp_path, silent_server), 2))
    pids = plugin_pids(tmp_path, proc)
    err = finished(proc)
    assert proc.returncode == 3, err
    assert f"the kubeconfig's credential plugin '{tmp_path / 'plugin.sh'}' did not answer within" in (
        error_line(err)
    )
    assert none_alive(pids), f"still running: {[p for p in pids if alive(p)]}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_credential_plugin_that_hangs_dies_with_the_harness(
    tmp_path: Path, silent_server: str, sig: signal.Signals
) -> None:
    proc = harness(tmp_path, unreached_scenario(hanging_plugin(tmp_path, silent_server), 120))
    pids = plugin_pids(tmp_path, proc)
    proc.send_signal(sig)
    err = finished(proc)  # Ctrl-C was ignored until the plugin ended
    if sig is signal.SIGINT:
        assert proc.returncode == 130, err
    assert none_alive(pids), f"still running: {[p for p in pids if alive(p)]}"  # the watchdog's work


def test_a_credential_plugin_that_answers_is_used(cluster: FakeCluster, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.sh"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": TOKEN},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.api_port}", user=user)
    data = kube_scenario(cluster, config, intents=10)
    data["target"]["kubernetes"]["context"] = "c"
    result = run_scenario(data, tmp_path / "results")
    assert result.summary.intents.started == 10


def test_a_plugin_that_fails_is_one_line_naming_it(tmp_path: Path, silent_server: str) -> None:
    plugin = tmp_path / "plugin.sh"
    plugin.write_text("#!/bin/sh\necho 'no SSO session: run aws sso login' >&2\nexit 1\n")
    plugin.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}
    data = unreached_scenario(kubeconfig(tmp_path / "kubeconfig", silent_server, user=user), 5)
    with pytest.raises(
        TargetStartError, match=r"plugin '.*plugin\.sh' exited with 1: no SSO session"
    ) as caught:
        run_scenario(data, tmp_path / "results")
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [\n", "is not YAML (expected the node content, but found '<stream end>' at line 2)"),
        ("- 1\n", "is not a kubeconfig (TypeError"),
        ('{"clusters": 5, "contexts": [{"name": "x"}], "current-context": "x"}', "is not a kubeconfig"),
    ],
)
def test_a_kubeconfig_that_is_not_one_is_a_one_line_scenario_error(
    tmp_path: Path, text: str, message: str
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(text)
    path = tmp_path / "kube.yaml"
    path.write_text(json.dumps(unreached_scenario(config, 5)))
    proc = mcp_chaos("run", str(path), "--results", str(tmp_path / "r"), "--no-preflight", "--quiet")
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc.stderr)
    assert line.startswith(f"mcp-chaos: error: target.kubernetes: the kubeconfig {config} "), line
    assert message in line
