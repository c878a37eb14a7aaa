"""Child process: the driver's transport alone, the floor under the driver's cost per call.

The harness's own keep-alive pool (``harness.client.pool``: asyncio protocols on llhttp, the event loop
a run uses) sends the exact bytes of a driver's request, N times at concurrency C, and reads nothing of
what comes back. No intents, no history, no MCP: what is left of the driver's CPU per call above this
row is the harness's own Python, and what this row costs above wrk's is the price of an event loop
driven from Python. Prints its own CPU and time, as ``bench.drive`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from urllib.parse import urlsplit

from harness import eventloop
from harness.client.classify import KEPT_HEADERS, answers
from harness.client.framing import Framing
from harness.client.messages import MODERN
from harness.client.pool import Pool
from harness.client.raw import End


def request(host: str, port: int, path: str) -> bytes:
    """What the driver sends for one intent of ``bench.drive``'s workload (a memo and a number)."""
    params = {"name": "noop", "arguments": {"n": 272, "memo": "bench-m0000000"}}
    framing = Framing(host, port, path)
    return framing.request("tools/call", params, 1, version=MODERN, session=None, name="noop")


async def loop_calls(url: str, calls: int, concurrency: int) -> dict[str, float]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    pool = Pool(parts.hostname, parts.port, keep_headers=KEPT_HEADERS)
    sent = request(parts.hostname, parts.port, parts.path)
    left, ok = calls, 0

    async def worker() -> None:
        nonlocal left, ok
        while left > 0:
            left -= 1
            raw = await pool.exchange(sent, timeout=10, answers=answers)
            ok += raw.end is End.COMPLETE and raw.status == 200

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    pool.close()
    return {"calls": calls, "ok": ok, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    args = p.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = eventloop.run(loop_calls(args.url, args.calls, args.concurrency))
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
