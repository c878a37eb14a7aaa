"""nginx in front of the replicas: a balancer that re-sends a POST is a duplicate source of its own.

Deterministic: one intent at a time, and the reference target's failpoint kills
whichever replica commits the fifth invoice (the count lives in the shared
store), right after the commit and before it answers.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.audit.auditor import AuditResult
from harness.balancer import Nginx
from harness.client.http import McpHttpClient
from harness.client.messages import ToolCall
from harness.history import FaultKind, Outcome, Verdict, read_history
from harness.loopback import free_port
from tests.helpers.cli import start_cli_run
from tests.helpers.processes import Target, alive
from tests.helpers.scenarios import fault_row, invoice_scenario

pytestmark = [pytest.mark.integration, pytest.mark.nginx]

Run = Callable[[dict[str, Any]], AuditResult]
CRASHED = 4
"""The intent whose call is the fifth to commit."""


def behind_nginx(retry: str, *, max_attempts: int = 10, **kw: Any) -> dict[str, Any]:
    data = invoice_scenario(
        mode="naive",
        intents=kw.pop("intents", 12),
        env={"INVOICES_FAILPOINT": "after_business_commit@5"},
        **kw,
    )
    data["target"]["replicas"] = 3
    data["services"] = {"balancer": {"server": "nginx", "retry": retry}}
    data["client"]["max_attempts"] = max_attempts
    return data


def events(result: AuditResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_history(result.run_dir / "history.jsonl") if e["type"] == kind]


def test_a_balancer_that_resends_posts_makes_the_duplicate(run: Run, nginx_server: None) -> None:
    result = run(behind_nginx("non_idempotent"))
    summary = result.summary
    assert summary.verdicts[Verdict.DUPLICATE] == 1
    row = result.intents.set_index("intent").loc[CRASHED]
    assert (row["verdict"], row["effects"], row["attempts"], row["cause"]) == (
        "duplicate",
        2,
        1,  # the client sent it once and got a success
        "balancer_retry",
    )
    (resend,) = events(result, "balancer_retry")
    assert resend["intent"] == CRASHED
    assert len(resend["upstreams"]) == 2
    assert resend["upstreams"][0] != resend["upstreams"][1]
    assert all(u.startswith("pod-") for u in resend["upstreams"])
    assert fault_row(summary, FaultKind.BALANCER_RETRY).duplicate.count == 1
    assert summary.duplicate_causes == {"balancer_retry": 1}


@pytest.mark.parametrize("retry", ["default", "off"])
def test_nginx_by_default_leaves_the_retry_to_the_client(run: Run, nginx_server: None, retry: str) -> None:
    result = run(behind_nginx(retry))
    assert events(result, "balancer_retry") == []
    row = result.intents.set_index("intent").loc[CRASHED]
    # nginx answered 502; the client retried (the outcome was unknown) and naive ran it again.
    said = (result.summary.status, result.summary.status_reason, result.summary.unavailable)
    assert (row["verdict"], row["attempts"], row["cause"]) == ("duplicate", 2, "crash"), (row.to_dict(), said)
    first = next(e for e in events(result, "attempt_ended") if e["intent"] == CRASHED)
    assert (first["outcome"], first["detail"], first["status"]) == ("transport_error", "gateway_error", 502)


def test_with_a_client_that_never_retries_only_the_balancer_duplicates(run: Run, nginx_server: None) -> None:
    quiet = run(behind_nginx("default", max_attempts=1))
    assert quiet.summary.verdicts[Verdict.DUPLICATE] == 0
    assert quiet.summary.verdicts[Verdict.APPLIED_AFTER_GIVING_UP] == 1  # the 502 hid a commit
    eager = run(behind_nginx("non_idempotent", max_attempts=1))
    assert eager.summary.verdicts[Verdict.DUPLICATE] == 1


def test_the_balancer_is_gone_after_ctrl_c(tmp_path: Path, nginx_server: None) -> None:
    data = behind_nginx("default", intents=100_000, concurrency=4)
    data["target"]["env"] = {
        **data["target"]["env"],
        "INVOICES_FAILPOINT": "",
        "INVOICES_PRE_COMMIT_MS": "20",
    }
    proc, run_dir = start_cli_run(tmp_path, data, run_id="interrupted", attempts=40, timeout=60)
    started = [
        e for e in read_history(run_dir / "history.jsonl") if e["type"] in ("service_started", "pod_started")
    ]
    pids = [e["pid"] for e in started]
    assert any(e.get("service") == "nginx" for e in started)
    nginx_pid = next(e["pid"] for e in started if e.get("service") == "nginx")
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == nginx_pid]
    assert workers  # nginx's worker process, which must go too
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert not any(alive(pid) for pid in [*pids, *workers])
    assert (run_dir / "balancer" / "access.jsonl").stat().st_size > 0


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_a_request_moved_after_a_refused_connection_is_no_resend(
    tmp_path: Path, target: Callable[..., Target], nginx_server: None
) -> None:
    # nginx tries the port where nothing listens first (round robin), gets "connection refused",
    # and passes the request on: it reached one replica only, and cannot have taken effect twice.
    live = target()
    nginx = Nginx(tmp_path, [free_port(), live.port], free_port(), "default")

    async def call() -> None:
        await nginx.start()
        client = McpHttpClient(f"http://127.0.0.1:{nginx.port}/mcp")
        try:
            for i in range(2):
                arguments = {
                    "customer_id": "c",
                    "amount_cents": 5,
                    "memo": f"m{i}",
                    "idempotency_key": f"k{i}",
                }
                res = await client.call_tool(ToolCall("create_invoice", arguments, 100 + i), timeout=10)
                assert res.outcome is Outcome.OK, res
        finally:
            await client.aclose()
            await nginx.stop()

    asyncio.run(call())
    log = [orjson.loads(line) for line in (tmp_path / "balancer" / "access.jsonl").read_bytes().splitlines()]
    moved = [e for e in log if "," in e["upstreams"]]
    assert moved, log  # nginx did move a request off the dead port
    assert moved[0]["sent"].startswith("0, ")
    assert nginx.resends() == []
    assert live.invoices() == 2


def test_the_health_check_under_test_is_in_the_configuration(tmp_path: Path) -> None:
    nginx = Nginx(tmp_path, [4001, 4002], 4000, "non_idempotent", max_fails=0, fail_timeout_s=3)
    config = nginx.config()
    assert "server 127.0.0.1:4001 max_fails=0 fail_timeout=3s;" in config
    assert "proxy_next_upstream error timeout non_idempotent;" in config
    assert "listen 127.0.0.1:4000;" in config
