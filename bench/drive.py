"""Child process: the harness's driver making N calls at concurrency C; prints its own CPU and time.

Runs in its own process so that the OS accounts its CPU apart from the server
and from the benchmark's orchestration. Everything the driver does in a real
run happens here too: intents rendered from a template, history written per
attempt, outcomes classified.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from harness.client.http import McpHttpClient
from harness.driver import Driver
from harness.faults.proxy import FaultProxy
from harness.history import HistoryWriter, Outcome
from harness.scenario import StreamFault, parse_scenario
from harness.workload import Workload


def scenario(calls: int, concurrency: int) -> dict[str, object]:
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
    }


async def drive(url: str, calls: int, concurrency: int, history: Path, proxy: bool) -> dict[str, float]:
    s = parse_scenario(scenario(calls, concurrency))
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
        async with McpHttpClient(url) as client:
            driver = Driver(Workload(s, "bench"), [client], h, s.client, concurrency=concurrency, seed=0)
            if fault_proxy is not None:
                fault_proxy.lookup = driver.attempt_of
            start = time.perf_counter()
            stats = await driver.run()
            wall = time.perf_counter() - start
        if fault_proxy is not None:
            await fault_proxy.close()
    return {"calls": stats.attempts, "ok": stats.outcomes[Outcome.OK], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--proxy", action="store_true", help="go through an in-process fault proxy")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_SELF)
        history = Path(tmp) / "history.jsonl"
        result = asyncio.run(drive(args.url, args.calls, args.concurrency, history, args.proxy))
        after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
