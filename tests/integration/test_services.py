"""PostgreSQL as the target's store and the effect sources that need a live service."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.audit.auditor import AuditResult
from harness.history import FaultKind, Outcome, Verdict, read_history
from tests.helpers.cli import mcp_chaos
from tests.helpers.processes import alive
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

Run = Callable[[dict[str, Any]], AuditResult]
QUERY = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"


def on_postgres(mode: str, **kw: Any) -> dict[str, Any]:
    data = invoice_scenario(mode=mode, **kw)
    data["services"] = {"postgres": {}}
    data["target"]["env"]["INVOICES_DB"] = "{postgres_url}"
    data["audit"] = {"effects": {"sql": {"url": "{postgres_url}", "query": QUERY}}}
    return data


@pytest.mark.postgres
@pytest.mark.parametrize(("mode", "duplicates"), [("naive", 1), ("keyed", 1), ("atomic", 0)])
def test_postgres_store_keeps_the_ordering(
    run: Run, postgres_server: None, mode: str, duplicates: int
) -> None:
    env = {"INVOICES_FAILPOINT": "after_business_commit@3"}
    result = run(on_postgres(mode, env=env))
    s = result.summary
    assert s.verdicts[Verdict.DUPLICATE] == duplicates
    assert s.verdicts[Verdict.EXACTLY_ONCE] == 3 - duplicates
    assert s.pods.crashes == 1
    events = list(read_history(result.run_dir / "history.jsonl"))
    (service,) = [e for e in events if e["type"] == "service_started"]
    assert service["url"].startswith("postgresql://postgres@127.0.0.1:")
    assert not alive(service["pid"])  # stopped with the run
    collected = [e for e in events if e["type"] == "effects_collected"]
    assert collected[0]["markers"] == 3
    assert orjson.loads((result.run_dir / "effects.json").read_bytes())["source"] == "sql"


@pytest.mark.postgres
def test_a_postgres_run_can_be_re_audited_without_postgres(run: Run, postgres_server: None) -> None:
    result = run(on_postgres("naive", env={"INVOICES_FAILPOINT": "after_business_commit@1"}))
    again = mcp_chaos("audit", str(result.run_dir))
    assert again.returncode == 1, again.stderr  # its duplicate fails the default gate
    assert "duplicate !  |       1 |" in again.stdout


def test_effects_from_a_read_tool(run: Run) -> None:
    data = invoice_scenario(mode="naive", env={"INVOICES_FAILPOINT": "after_business_commit@3"})
    data["audit"] = {
        "effects": {"tool": {"tool": "count_invoices", "arguments": {"memo_prefix": "{namespace}"}}}
    }
    result = run(data)
    assert result.summary.verdicts[Verdict.DUPLICATE] == 1
    record = orjson.loads((result.run_dir / "effects.json").read_bytes())
    assert record["source"] == "tool count_invoices"
    assert sorted(record["effects"].values()) == [1, 1, 2]


def test_a_failed_final_read_is_recorded_and_named_by_the_audit(run: Run) -> None:
    data = invoice_scenario(mode="atomic")
    data["audit"] = {"effects": {"tool": {"tool": "no_such_tool"}}}
    from harness.errors import AuditError

    with pytest.raises(AuditError, match="the final read of effects failed: read tool 'no_such_tool' failed"):
        run(data)


def test_pause_of_a_process_pod(run: Run) -> None:
    data = invoice_scenario(mode="naive", intents=120, concurrency=4, env={"INVOICES_POST_COMMIT_MS": "20"})
    data["faults"] = {"pause": {"count": 1, "duration_s": 1.5, "window": [0.3, 0.5]}}
    data["client"]["attempt_timeout_s"] = 0.5
    result = run(data)
    s = result.summary
    assert (s.injected(FaultKind.PAUSE), s.pods.exits) == (1, 0)
    assert s.attempts.by_outcome[Outcome.TIMEOUT] >= 4
    assert s.verdicts[Verdict.DUPLICATE] >= 1
    assert s.duplicate_causes == {"pause": s.verdicts[Verdict.DUPLICATE]}
    kinds = [e["type"] for e in read_history(result.run_dir / "history.jsonl")]
    assert kinds.count("pod_resumed") == 1


def test_atomic_survives_a_pause(run: Run) -> None:
    data = invoice_scenario(mode="atomic", intents=120, concurrency=4, env={"INVOICES_POST_COMMIT_MS": "20"})
    data["faults"] = {"pause": {"count": 1, "duration_s": 1.5, "window": [0.3, 0.5]}}
    data["client"]["attempt_timeout_s"] = 0.5
    result = run(data)
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 120


def refused(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.postgres
def test_the_registrys_services_start_in_order_hand_the_target_theirs_and_stop_in_reverse(
    tmp_path: Path, postgres_server: None
) -> None:
    """PostgreSQL (and its proxy), the sink and the downstream proxy made from the registry, their
    ports chosen before anything starts, each placeholder in the pod's environment, started in the
    registry's order and recorded as before, every port closed and the cluster gone once they stop."""
    import asyncio

    from harness import rundir
    from harness.run.services.downstream import DownstreamWired
    from harness.run.services.postgres import PostgresWired
    from harness.run.services.sink import SinkWired
    from harness.run.wiring import TargetWiring
    from harness.scenario import parse_scenario

    data = on_postgres("atomic")
    data["target"]["env"] |= {"SINK": "{sink_url}", "API": "{downstream_url}", "CA": "{downstream_ca}"}
    data["services"]["downstream"] = {}
    data["audit"] = {"effects": {"sink": {}}}
    scenario = parse_scenario(data)
    run_dir = rundir.prepare_run_dir(tmp_path, scenario)
    wiring = TargetWiring(scenario, run_dir)
    assert [type(s) for s in wiring.services] == [PostgresWired, SinkWired, DownstreamWired]
    assert wiring.fronts == []
    pg, sink, downstream = (
        wiring.service(PostgresWired),
        wiring.service(SinkWired),
        wiring.service(DownstreamWired),
    )
    assert pg is not None
    assert sink is not None
    assert downstream is not None
    env = wiring.pod.env  # type: ignore[attr-defined]
    assert env["INVOICES_DB"] == f"postgresql://postgres@127.0.0.1:{pg.proxy.port}/mcp_chaos"  # the proxy
    assert (env["SINK"], env["API"]) == (sink.sink.url, downstream.proxy.url)
    assert env["CA"] == env["SSL_CERT_FILE"] == str(downstream.proxy.ca_path.resolve())  # handed too
    assert env["HTTPS_PROXY"] == downstream.proxy.url
    ports = [pg.cluster.port, pg.proxy.port, sink.sink.port, downstream.proxy.port]
    assert all(refused(port) for port in ports)  # chosen, nothing started yet
    wiring.supervise()  # makes the supervisors, starts nothing
    assert wiring.reach("ns").postgres_url == pg.cluster.url  # an audit reads the cluster, not the proxy

    async def up_and_down() -> None:
        with wiring.history:
            async with wiring.running_services():
                assert not any(refused(port) for port in ports)

    asyncio.run(up_and_down())
    assert all(refused(port) for port in ports)
    assert not pg.cluster.dir.exists()
    events = [(e["type"], e["service"]) for e in read_history(run_dir / "history.jsonl") if "service" in e]
    assert events == [
        ("service_started", "postgres"),
        ("service_started", "downstream"),
        ("service_stopped", "postgres"),
    ]


@pytest.mark.parametrize(("stream", "through"), [(False, "replicas"), (True, "fault proxies")])
def test_nginx_is_made_in_front_of_the_replicas_or_their_fault_proxies(
    tmp_path: Path, stream: bool, through: str
) -> None:
    """nginx (no binary needed: it is made, never started) is the one service in front, sending to the
    ports a run's fault proxies take when there are stream faults, else to the replicas; beside the
    target there is none, and the clients of a run go to its port."""
    from harness import rundir
    from harness.run.services.balancer import NginxWired
    from harness.run.wiring import TargetWiring
    from harness.scenario import parse_scenario

    data = invoice_scenario(mode="atomic")
    data["target"]["replicas"] = 2
    data["services"] = {"balancer": {"retry": "non_idempotent"}}
    data["faults"] = {"stream": [{"fault": "sever_response", "probability": 0.1}]} if stream else {}
    scenario = parse_scenario(data)
    wiring = TargetWiring(scenario, rundir.prepare_run_dir(tmp_path, scenario))
    with wiring.history:
        assert wiring.services == []
        (front,) = wiring.fronts
        assert isinstance(front, NginxWired)
        assert wiring.service(NginxWired) is front
        sent_to = wiring.proxy_ports if stream else wiring.ports
        assert len(sent_to) == 2
        assert front.nginx.upstreams == sent_to, through
        assert front.entry_port == front.nginx.port not in (*wiring.ports, *wiring.proxy_ports)
        assert front.nginx.retry == "non_idempotent"
        assert front.handed().placeholders == {}
