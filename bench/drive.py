"""Child process: the harness's driver making N calls at concurrency C; prints its own CPU and time.

Runs in its own process so that the OS accounts its CPU apart from the server
and from the benchmark's orchestration. Everything the driver does in a real
run happens here too: intents rendered from a template, history written per
attempt, outcomes classified, on the event loop a run uses (``MCP_CHAOS_LOOP``).
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
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from bench.common import cpu_seconds
from harness import eventloop
from harness.client.host import Host
from harness.client.http import McpHttpClient
from harness.client.stdio import StdioChannel, StdioClient
from harness.faults.proxy import FaultProxy
from harness.history import HistoryWriter, Outcome
from harness.pods.process import STDIO_LINE_LIMIT
from harness.run.driver import Driver
from harness.scenario import StreamFault, parse_scenario
from harness.workload import Workload


def scenario(calls: int, concurrency: int, trace: bool = False) -> dict[str, object]:
    return {
        "name": "bench",
        "target": {"command": ["unused"]},
        "workload": {
            "intents": calls,
            "concurrency": concurrency,
            "tool": "noop",
            "arguments": {"n": {"random_int": [0, 1000]}, "memo": "{marker}"},
        },
        "audit": {"effects": {"sql": {"url": "sqlite:///unused", "query": "select 1 as marker"}}},
        "client": {"trace": trace},
    }


async def drive(
    url: str, calls: int, concurrency: int, history: Path, proxy: bool, protocol: str, trace: bool
) -> dict[str, float]:
    s = parse_scenario(scenario(calls, concurrency, trace))
    with HistoryWriter(history) as h:
        fault_proxy: FaultProxy | None = None
        if proxy:
            # In-process, as in a real run; its one rule never fires, but every exchange is parsed,
            # identified and checked against it.
            never = StreamFault(fault="delay", tool="no-such-tool", probability=1.0)
            fault_proxy = FaultProxy(
                urlsplit(url).port or 0, [never], seed=0, history=h, lookup=lambda _: None, default_hold_s=1
            )
            url = f"http://127.0.0.1:{await fault_proxy.start()}/mcp"
        # As every client of a run: it declares and answers roots and forms (harness/client/host.py).
        host = Host(roots=(PurePosixPath(history.parent),))
        async with McpHttpClient(url, protocol=protocol, history=h, host=host) as client:
            driver = Driver(Workload(s, "bench"), [client], h, s.client, concurrency=concurrency, seed=0)
            if fault_proxy is not None:
                fault_proxy.lookup = driver.attempt_of
            start = time.perf_counter()
            stats = await driver.run()
            wall = time.perf_counter() - start
        if fault_proxy is not None:
            await fault_proxy.close()
    return {"calls": stats.attempts, "ok": stats.outcomes[Outcome.OK], "wall_s": wall}


async def drive_stdio(command: list[str], calls: int, concurrency: int, history: Path) -> dict[str, float]:
    """The driver against a stdio server it starts itself, as a run does; also reports the server's CPU."""
    s = parse_scenario(scenario(calls, concurrency))
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "NOOP_TRANSPORT": "stdio"},
        limit=STDIO_LINE_LIMIT,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        with HistoryWriter(history) as h:
            channel = StdioChannel(
                proc.stdout, proc.stdin, history=h, host=Host(roots=(PurePosixPath(history.parent),))
            )
            failed = await channel.initialize(timeout=30)
            if failed is not None:
                raise RuntimeError(f"stdio server did not take initialize: {failed}")
            driver = Driver(
                Workload(s, "bench"),
                [StdioClient(lambda: channel)],
                h,
                s.client,
                concurrency=concurrency,
                seed=0,
            )
            server_before = cpu_seconds(proc.pid)  # after its start-up and imports
            start = time.perf_counter()
            stats = await driver.run()
            wall = time.perf_counter() - start
            server_cpu = cpu_seconds(proc.pid) - server_before
            await channel.aclose()
    finally:
        proc.kill()
        await proc.wait()
    return {
        "calls": stats.attempts,
        "ok": stats.outcomes[Outcome.OK],
        "wall_s": wall,
        "server_cpu_s": server_cpu,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--proxy", action="store_true", help="go through an in-process fault proxy")
    p.add_argument("--protocol", default="2026-07-28", help="2026-07-28, or a 2025 version (a session)")
    p.add_argument("--stdio", action="store_true", help="url is a server script: run it and talk over stdio")
    p.add_argument("--trace", action="store_true", help="client.trace: a traceparent on every attempt")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_SELF)
        history = Path(tmp) / "history.jsonl"
        if args.stdio:
            command = [sys.executable, args.url]
            result = eventloop.run(drive_stdio(command, args.calls, args.concurrency, history))
        else:
            result = eventloop.run(
                drive(args.url, args.calls, args.concurrency, history, args.proxy, args.protocol, args.trace)
            )
        after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
