"""Child process: what a user would write by hand, the official SDK client calling a tool N times."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import resource
import time

from mcp.client import Client


async def loop(url: str, calls: int, concurrency: int) -> dict[str, float]:
    counter = itertools.count()
    ok = 0
    async with Client(url, mode="2026-07-28") as client:

        async def worker() -> None:
            nonlocal ok
            while next(counter) < calls:
                result = await client.call_tool("noop", {"n": 1})
                ok += not result.is_error

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return {"calls": calls, "ok": ok, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    args = p.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = asyncio.run(loop(args.url, args.calls, args.concurrency))
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
