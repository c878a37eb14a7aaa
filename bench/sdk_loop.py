"""Child process: what a user would write by hand, the official SDK client calling a tool N times."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import sys
import time
from pathlib import Path

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from bench.common import cpu_seconds


async def loop(url: str, calls: int, concurrency: int, stdio: bool) -> dict[str, float]:
    counter = itertools.count()
    ok = 0
    server: StdioServerParameters | str = url
    if stdio:  # url is the server script; the SDK starts it and talks over its stdin and stdout
        server = StdioServerParameters(
            command=sys.executable, args=[url], env={**os.environ, "NOOP_TRANSPORT": "stdio"}
        )
    async with Client(server, mode="legacy" if stdio else "2026-07-28") as client:

        async def worker() -> None:
            nonlocal ok
            while next(counter) < calls:
                result = await client.call_tool("noop", {"n": 1})
                ok += not result.is_error

        server_before = _children_cpu() if stdio else 0.0  # after its start-up and imports
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        server_cpu = _children_cpu() - server_before if stdio else 0.0
    return {"calls": calls, "ok": ok, "wall_s": wall, "server_cpu_s": server_cpu}


def _children_cpu() -> float:
    """CPU of this process's (only) child so far: the stdio server the SDK started."""
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    return sum(cpu_seconds(int(pid)) for pid in children)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--stdio", action="store_true", help="url is a server script: start it, talk over stdio")
    args = p.parse_args()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = asyncio.run(loop(args.url, args.calls, args.concurrency, args.stdio))
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
