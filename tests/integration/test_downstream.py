"""The downstream proxy against real servers: the payments target (its https:// host fixed in its code),
the fake provider behind it (over HTTP and HTTPS), crash points at the call, a chaos run counted by it.

Nothing here is a mock: the target is an ordinary MCP server whose httpx client honours
HTTPS_PROXY and SSL_CERT_FILE, as it would in production; the provider is a real HTTP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trustme

from harness.audit.auditor import AuditResult
from harness.crashpoints.explore import explore, prepare
from harness.crashpoints.options import ExploreOptions
from harness.downstream import DownstreamProxy
from harness.effects.downstream import DownstreamSource
from harness.history import FaultKind, Verdict
from harness.loopback import free_port
from harness.scenario import DownstreamEffects, DownstreamService, parse_scenario
from tests.helpers.paths import PAYMENTS, PROVIDER
from tests.helpers.scenarios import fault_row, invoice_scenario, run_scenario

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def provider(tmp_path: Path, *, tls: bool) -> Iterator[tuple[str, str | None]]:
    """The fake provider as a process: its URL, and the CA that signed its certificate (HTTPS)."""
    port = free_port()
    args = [sys.executable, str(PROVIDER), str(port)]
    ca_file = None
    if tls:
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        cert, key, ca_file = (
            tmp_path / "provider.pem",
            tmp_path / "provider.key",
            tmp_path / "provider-ca.pem",
        )
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        ca.cert_pem.write_to_path(str(ca_file))
        args += ["--cert", str(cert), "--key", str(key)]
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            assert "listening" in process.stdout.readline()
            scheme = "https" if tls else "http"
            yield f"{scheme}://127.0.0.1:{port}", None if ca_file is None else str(ca_file)
        finally:
            process.kill()


def charges(upstream: str, ca: str | None) -> list[dict[str, Any]]:
    verify: ssl.SSLContext | bool = True if ca is None else ssl.create_default_context(cafile=ca)
    listed = httpx.get(f"{upstream}/v1/charges", verify=verify, trust_env=False).json()
    return list(listed["data"])


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "downstream.jsonl").read_bytes().splitlines()]


def payments_scenario(upstream: str | None, ca: str | None, **env: str) -> dict[str, Any]:
    """The payments target charging 3 intents, one at a time, behind the downstream proxy (the invoices
    scenario's client policy: retries for as long as a restart may take)."""
    downstream: dict[str, Any] = {} if upstream is None else {"upstream": upstream}
    if ca is not None:
        downstream["ca"] = ca
    data = invoice_scenario(intents=3)
    data["target"] = {"command": ["{python}", str(PAYMENTS)], "env": env, "restart_delay_s": 0.05}
    data["workload"] |= {
        "tool": "charge",
        "arguments": {
            "customer_id": "c-{index}",
            "amount_cents": 500,
            "memo": "{marker}",
            "idempotency_key": "{key}",
        },
    }
    data["services"] = {"downstream": downstream}
    data["audit"] = {"effects": {"downstream": {}}}
    return data


def test_a_call_through_connect_is_answered_for_the_fixed_host_forwarded_and_recorded(tmp_path: Path) -> None:
    """HTTPS_PROXY's CONNECT to a host that resolves nowhere: TLS with the run's CA, the call forwarded to
    an HTTPS upstream verified with its own CA, a replay told by the provider's header, a 502 named."""

    async def calls(proxy: DownstreamProxy, ca: Path) -> list[int]:
        verify = ssl.create_default_context(cafile=str(ca))
        async with httpx.AsyncClient(proxy=proxy.url, verify=verify, trust_env=False) as client:
            url = "https://api.payments.example/v1/charges"
            first = await client.post(
                url, json={"description": "ab-m0000001"}, headers={"Idempotency-Key": "k"}
            )
            again = await client.post(
                url, json={"description": "ab-m0000001"}, headers={"Idempotency-Key": "k"}
            )
            assert first.json() == again.json()
            assert again.headers["idempotent-replayed"] == "true"
            other = await client.post(url, json={"description": "ab-m0000002"})
            plain = await client.post("http://ledger.example/v1/charges", json={"memo": "ab-m0000005"})
        async with httpx.AsyncClient(trust_env=False) as client:  # {downstream_url}: the reverse proxy
            direct = await client.post(f"{proxy.url}/v1/charges", json={"memo": "ab-m0000003"})
        return [
            first.status_code,
            again.status_code,
            other.status_code,
            plain.status_code,
            direct.status_code,
        ]

    async def run(upstream: str, upstream_ca: str | None) -> list[int]:
        proxy = DownstreamProxy(tmp_path, DownstreamService(upstream=upstream, ca=upstream_ca))
        ca = proxy.write_ca()
        await proxy.start()
        try:
            return await calls(proxy, ca)
        finally:
            await proxy.close()

    with provider(tmp_path, tls=True) as (upstream, upstream_ca):
        assert asyncio.run(run(upstream, upstream_ca)) == [200, 200, 200, 200, 200]
        made = charges(upstream, upstream_ca)
    assert [c["description"] if "description" in c else c["memo"] for c in made] == [
        "ab-m0000001",
        "ab-m0000002",
        "ab-m0000005",
        "ab-m0000003",
    ]
    lines = records(tmp_path)
    assert [(r["host"], r["markers"], r.get("key"), r.get("replay", False)) for r in lines] == [
        ("api.payments.example", ["ab-m0000001"], "k", False),
        ("api.payments.example", ["ab-m0000001"], "k", True),
        ("api.payments.example", ["ab-m0000002"], None, False),
        ("ledger.example", ["ab-m0000005"], None, False),  # plain HTTP through HTTP_PROXY: absolute-form
        (None, ["ab-m0000003"], None, False),
    ]
    source = DownstreamSource(DownstreamEffects())
    assert source.count(tmp_path) == {"ab-m0000001": 1, "ab-m0000002": 1, "ab-m0000003": 1, "ab-m0000005": 1}

    # The provider gone: the target is told 502 with why, and the record says no effect was made.
    (tmp_path / "downstream.jsonl").unlink()
    with provider(tmp_path, tls=False) as (upstream, _):
        pass
    proxy = DownstreamProxy(tmp_path, DownstreamService(upstream=upstream))

    async def unreachable() -> httpx.Response:
        await proxy.start()
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                return await client.post(f"{proxy.url}/v1/charges", json={"memo": "ab-m0000004"})
        finally:
            await proxy.close()

    answer = asyncio.run(unreachable())
    assert answer.status_code == 502
    assert "could not be reached" in answer.text
    assert records(tmp_path)[0]["status"] == 502
    assert source.count(tmp_path) == {}


@pytest.mark.parametrize(("forward", "verdicts"), [("", {"duplicate": 2}), ("1", {"exactly_once": 2})])
def test_a_fixed_https_host_that_posts_without_a_key_duplicates_at_its_downstream_call(
    tmp_path: Path, forward: str, verdicts: dict[str, int]
) -> None:
    """The issue's case: no TLS relay written, no edit to the server. Held at downstream#1 (the provider made
    the charge, its answer never reached the server) and killed, R of R tries charge twice; forwarding the
    intent's key to the provider, which replays it, fixes it."""
    with provider(tmp_path, tls=True) as (upstream, ca):
        data = payments_scenario(upstream, ca, PAYMENTS_FORWARD_KEY=forward)
        options = ExploreOptions(repeat=2, only=("downstream#1",))
        planned = prepare(parse_scenario(data), tmp_path / "results", options)
        found = asyncio.run(explore(planned, out=io.StringIO(), progress_interval_s=None))
        made = charges(upstream, ca)
    assert {p.name: {v: n for v, n in p.verdicts.items() if n} for p in found.points} == {
        "downstream#1": verdicts
    }
    assert all(len(p.proven) == p.tries == 2 for p in found.points)
    # Every charge the provider made went through the proxy and was recorded there.
    recorded = [r for r in records(found.run_dir) if r["status"] == 200 and not r.get("replay")]
    assert len(recorded) == len(made)
    assert found.details["downstream#1"]["key"] == (
        None if not forward else found.audit.intents["key"][found.clean_intent]
    )


def test_a_chaos_run_counts_its_effects_at_the_stub_provider(tmp_path: Path) -> None:
    """No upstream at all: the proxy answers as a provider's sandbox, and a run under kills is audited from
    its record. The server forwards its key, the stub replays it: nothing is charged twice."""
    data = payments_scenario(None, None, PAYMENTS_FORWARD_KEY="1")
    data["workload"] |= {"intents": 40, "concurrency": 4}
    data["faults"] = {"kill": {"count": 2, "min_uptime_s": 0.3}}
    result = run_scenario(data, tmp_path / "results")
    summary = result.summary
    assert summary.verdicts[Verdict.EXACTLY_ONCE] == 40, summary.verdicts
    assert fault_row(summary, FaultKind.KILL).injected == 2
    replays = [r for r in records(result.run_dir) if r.get("replay")]
    assert all(r["key"] for r in replays)


def ledger_scenario(**target: Any) -> dict[str, Any]:
    """The invoices target telling a ledger at a fixed https:// URL of each invoice, with urllib (which
    honours HTTPS_PROXY and SSL_CERT_FILE as httpx does), before it records it, with the key."""
    env = {"INVOICES_SINK_URL": "https://ledger.example/v1/entries", "INVOICES_DOWNSTREAM": "before_commit"}
    data = invoice_scenario(mode="atomic", intents=12, concurrency=2, env=env)
    data["target"] |= target
    data["services"] = {"downstream": {}}
    data["audit"] = {"effects": {"downstream": {"path": "^/v1/entries$"}}}
    return data


def assert_every_entry_went_through_the_proxy_once(result: AuditResult) -> None:
    assert result.summary.verdicts[Verdict.EXACTLY_ONCE] == 12
    lines = records(result.run_dir)
    assert {(r["host"], r["path"], r["status"]) for r in lines} == {("ledger.example", "/v1/entries", 200)}
    assert all(r["key"] for r in lines)  # atomic forwards the intent's key


def test_a_process_calls_a_fixed_https_url_through_the_proxy(tmp_path: Path) -> None:
    assert_every_entry_went_through_the_proxy_once(run_scenario(ledger_scenario(), tmp_path / "results"))


@pytest.mark.docker
def test_a_container_trusts_the_proxy_s_ca_mounted_read_only(tmp_path: Path, docker_image: str) -> None:
    """In a container {downstream_ca} is a read-only mount of the run's CA file: the same calls verify."""
    data = ledger_scenario(image=docker_image)
    del data["target"]["command"]
    result = run_scenario(data, tmp_path / "results")
    assert_every_entry_went_through_the_proxy_once(result)


def test_what_a_hostile_target_sends_ends_its_own_connection_only(tmp_path: Path) -> None:
    """A CONNECT to a name no certificate can carry, a head larger than the proxy reads, a body over its
    limit: each is refused on its own connection and recorded as no effect, and the next call is served."""

    async def exchange(port: int, data: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            return b""  # dropped before it read everything sent
        finally:
            writer.close()

    async def run() -> tuple[bytes, bytes, bytes, int]:
        proxy = DownstreamProxy(tmp_path, DownstreamService())
        proxy.write_ca()
        port = await proxy.start()
        try:
            bad_host = await exchange(port, b"CONNECT bad..host:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b"POST /v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX: " + b"a" * 300_000
            huge = await exchange(port, head + b"\r\n\r\n")
            body = b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 17000000\r\n\r\n" + b"{" * 17_000_000
            large = await exchange(port, body)
            async with httpx.AsyncClient(trust_env=False) as client:
                after = await client.post(f"{proxy.url}/v1/charges", json={"memo": "ab-m0000001"})
            return bad_host, huge, large, after.status_code
        finally:
            await proxy.close()

    bad_host, huge, large, after = asyncio.run(run())
    assert bad_host.startswith(b"HTTP/1.1 400 ")
    assert huge.startswith(b"HTTP/1.1 431 ")  # a head over 64 KiB, refused before it was all read
    assert large.startswith(b"HTTP/1.1 413 ")
    assert after == 200
    assert [(r["method"], r["status"], r["markers"]) for r in records(tmp_path)] == [
        ("CONNECT", 400, []),
        ("", 431, []),  # no method: the head was never parsed
        ("POST", 413, []),
        ("POST", 200, ["ab-m0000001"]),
    ]
    assert DownstreamSource(DownstreamEffects()).count(tmp_path) == {"ab-m0000001": 1}
