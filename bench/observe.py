"""Child process: the driver against the reference target on PostgreSQL, with the run's observe mode or
without it (or with the relay alone in the path); prints its own CPU and time.

Observe mode is what every run with ``services.postgres`` now pays: the PostgreSQL relay, a process of
its own between the target and its database (every message framed, every commit told over a pipe),
its reports copied unread to a spool as a run's are, and the decision router, which keeps no window
while the calls run (decision 0092); after them, the spooled commits are placed in their attempts
(:mod:`harness.crashpoints.placement`), and that CPU is printed apart (``place_cpu_s``): it is the
run's, not the calls'. Without observe mode the target talks to the cluster directly and the driver is
told nothing. The target and the relay are children of this process, so the OS accounts their CPU
apart; the relay's is read from /proc and printed beside the driver's.

``--relay-only`` is the floor under observing: the relay in the path as observing has it, its reports
read off the pipe and dropped unread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import ROOT, cpu_seconds
from bench.drive import scenario
from harness import eventloop
from harness.client.http import McpHttpClient
from harness.crashpoints.pgproxy import ObservingRelay, PostgresProxy, postgres_proxy
from harness.crashpoints.placement import Placed, place_after_run
from harness.crashpoints.plans import ObservePlan
from harness.crashpoints.router import Router
from harness.history import HistoryWriter, Outcome
from harness.loopback import free_port
from harness.run.driver import Driver, Unscheduled
from harness.scenario import parse_scenario
from harness.workload import Workload


class Observed(Unscheduled):
    """The run's scheduler as far as observing goes: the router hears every attempt."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def started(self, intent: int, attempt: int) -> None:
        self.router.started(intent, attempt)

    def ended(self, intent: int, attempt: int, outcome: Outcome, seconds: float) -> Mapping[str, Any]:
        return self.router.ended(intent, attempt)


class Dropped(ObservingRelay):
    """The observing relay with its reports read and dropped (once it listens): the relay in the path,
    no point placed."""

    def drain(self) -> None:
        if self._ready is not None and not self._ready.done():
            super().drain()  # its "ready" line
            return
        out = self._out
        while out is not None:
            try:
                chunk = os.read(out, 65536)
            except BlockingIOError:
                return
            if len(chunk) < 65536:
                return


async def listening(port: int, target: asyncio.subprocess.Process, *, timeout_s: float) -> None:
    """Until the target accepts connections (it connects to its database first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if target.returncode is not None:
            raise RuntimeError(f"the target exited ({target.returncode}) before it listened")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"the target did not listen on {port} in {timeout_s:g} s")


def invoices(calls: int, concurrency: int) -> dict[str, Any]:
    data = scenario(calls, concurrency)
    data["workload"] = {
        "intents": calls,
        "concurrency": concurrency,
        "tool": "create_invoice",
        "arguments": {
            "customer_id": "c-{index}",
            "amount_cents": {"random_int": [100, 9999]},
            "memo": "{marker}",
            "idempotency_key": "{key}",
        },
    }
    return data


async def drive(
    database: str, calls: int, concurrency: int, history: Path, observe: bool, relay_only: bool = False
) -> dict[str, float]:
    s = parse_scenario(invoices(calls, concurrency))
    router = Router(ObservePlan()) if observe or relay_only else None
    proxy: PostgresProxy | ObservingRelay | None = None
    url = database
    spool = history.with_name("relay-points.jsonl")
    if router is not None:
        router.defer()  # as a run whose only observing site is the relay
        port = int(database.rsplit(":", 1)[1].split("/", 1)[0])
        proxy = Dropped(port, router) if relay_only else postgres_proxy(port, router, spool=spool)
        await proxy.start()
        url = proxy.url(database.rsplit("/", 1)[1])
    port = free_port()
    env = {**os.environ, "PORT": str(port), "INVOICES_DB": url, "INVOICES_MODE": "atomic"}
    target = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "targets" / "invoices" / "server.py"),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    placed = Placed(0, 0)
    place_cpu = 0.0
    try:
        await listening(port, target, timeout_s=30)
        with HistoryWriter(history) as h:
            async with McpHttpClient(f"http://127.0.0.1:{port}/mcp", history=h) as client:
                scheduler = Observed(router) if router is not None and not relay_only else None

                def driver(namespace: str, seed: int) -> Driver:
                    return Driver(
                        Workload(s, namespace),
                        [client],
                        h,
                        s.client,
                        concurrency=concurrency,
                        seed=seed,
                        scheduler=scheduler,
                    )

                # A warm-up round of the same size first: connections, prepared plans.
                await driver("bench", 0).run()
                before = resource.getrusage(resource.RUSAGE_SELF)
                relay_before = relay_cpu(proxy)
                measured = driver("bench2", 1)
                start = time.perf_counter()
                stats = await measured.run()
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_SELF)
                relay = relay_cpu(proxy) - relay_before
            target.kill()
            await target.wait()
            if isinstance(proxy, ObservingRelay):
                await proxy.close()
                if proxy.spooled:  # what a run does once its calls are over
                    started = time.process_time()
                    placed = place_after_run(spool, h)
                    place_cpu = time.process_time() - started
    finally:
        if target.returncode is None:
            target.kill()
            await target.wait()
        if proxy is not None:
            await proxy.close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ok = stats.outcomes[Outcome.OK]
    return {
        "calls": stats.attempts,
        "ok": ok,
        "wall_s": wall,
        "cpu_s": cpu,
        "relay_cpu_s": relay,
        "place_cpu_s": place_cpu,
        "placed_points": placed.points,
    }


def relay_cpu(proxy: PostgresProxy | ObservingRelay | None) -> float:
    """The observing relay's CPU so far (none without observe mode)."""
    if not isinstance(proxy, ObservingRelay) or proxy.pid is None:
        return 0.0
    return cpu_seconds(proxy.pid)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("database", help="postgresql://... of a cluster the bench started")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--observe", action="store_true", help="the PostgreSQL proxy and the router, observing")
    p.add_argument("--relay-only", action="store_true", help="the observing relay, its reports dropped")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history.jsonl"
        result = eventloop.run(
            drive(args.database, args.calls, args.concurrency, history, args.observe, args.relay_only)
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
