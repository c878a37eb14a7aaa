"""The driver in a 2025 session and over stdio, each against its reference, in alternating rounds.

Sessions: one ``targets/noop`` server in stateful mode serves wrk calling in a
2025-11-25 session (the server's limit in that mode) and the driver in
2026-07-28 mode and in a session; the goal is the driver in a session against
wrk. stdio: the driver and the official SDK's stdio client, each starting the
no-op server as its child; the server's CPU is read by the client (from /proc,
after its start-up). Rounds and their judging are :mod:`bench.rounds`'.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, Server, server
from bench.rounds import Round, Rule, alternate, run_rounds
from bench.throughput import Sample, run_python, run_wrk
from harness.client.http import McpHttpClient

WRK_SESSION_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
wrk.headers["Mcp-Session-Id"] = "SESSION"
local id = 0
request = function()
  id = id + 1
  return wrk.format(nil, nil, nil,
    '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{"name":"noop","arguments":{"n":1}}}')
end
"""
"""A request id of its own for each call (one thread): in a session the server keys its in-flight
requests by id, and calls sharing one at once answer each other's (500 "Session terminated before the
request completed"), as a client that reused ids would see."""
WRK_SECONDS = 3

SessionRound = tuple[Sample, Sample, Sample]
"""wrk in a session, the driver at 2026-07-28, the driver in a session."""
StdioRound = tuple[Sample, Sample]
"""The SDK's stdio client, the driver over stdio."""


def _open_session(url: str) -> str:
    """A 2025-11-25 session on the server, for wrk to call in (initialize, then initialized)."""

    async def handshake() -> str:
        async with McpHttpClient(url, protocol="2025-11-25") as client:
            failed = await client.initialize(timeout=10)
            if failed is not None or client.session is None:
                raise RuntimeError(f"no session: {failed}")
            return client.session

    return asyncio.run(handshake())


def session_mode(rule: Rule, levels: tuple[int, ...] = (8, 32)) -> dict[int, list[Round[SessionRound]]]:
    """Per concurrency, the rounds of the driver in a session against wrk in one, on one stateful server."""
    with server("noop/server.py", NOOP_SESSIONS="stateful") as srv, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "session.lua"
        run_python("bench.drive", "driver", srv, 8, 500)  # warm-up
        return {c: _session_rounds(rule, srv, script, c) for c in levels}


def _session_rounds(rule: Rule, srv: Server, script: Path, c: int) -> list[Round[SessionRound]]:
    """wrk, then the drivers, then the drivers, then wrk, ...: the 2026-07-28 driver (for the table) between.

    wrk runs for a fixed time; the drivers make as many calls as wrk did in the
    first round (where wrk goes first), so every round compares equal work.
    """
    calls = 0

    def wrk() -> Sample:
        nonlocal calls
        # A session of its own each time: the drivers' runs between open and close sessions of theirs,
        # and a server that bounds its sessions may have let an idle one go.
        script.write_text(WRK_SESSION_SCRIPT.replace("SESSION", _open_session(srv.url)))
        sample = run_wrk(srv, c, WRK_SECONDS, script)
        sample.client = "wrk 2025-11-25"
        calls = calls or max(1000, int(sample.rate * WRK_SECONDS))
        return sample

    def modern() -> Sample:
        return run_python("bench.drive", "driver 2026-07-28", srv, c, calls)

    def session() -> Sample:
        return run_python("bench.drive", "driver 2025-11-25", srv, c, calls, "--protocol", "2025-11-25")

    def one(index: int) -> tuple[float, float, SessionRound]:
        if index % 2 == 0:
            ref, new, in_session = wrk(), modern(), session()
        else:
            in_session, new, ref = session(), modern(), wrk()
        return in_session.rate / ref.rate, ref.rate, (ref, new, in_session)

    return run_rounds(rule, one)


def stdio_mode(rule: Rule, concurrency: int = 8) -> list[Round[StdioRound]]:
    """Rounds of the driver against the SDK's own stdio client, each starting the no-op server."""
    script = str(ROOT / "targets" / "noop" / "server.py")

    def one(index: int) -> tuple[float, float, StdioRound]:
        sdk, driver = alternate(
            index,
            lambda: _run_stdio("bench.sdk_loop", "sdk client (stdio)", script, concurrency, 2000),
            lambda: _run_stdio("bench.drive", "driver (stdio)", script, concurrency, 4000),
        )
        return driver.rate / sdk.rate, sdk.rate, (sdk, driver)

    return run_rounds(rule, one)


def _run_stdio(module: str, name: str, script: str, concurrency: int, calls: int) -> Sample:
    args = [sys.executable, "-m", module, script, "--calls", str(calls), "--concurrency", str(concurrency)]
    out = subprocess.run([*args, "--stdio"], stdout=subprocess.PIPE, text=True, check=True).stdout
    result = json.loads(out)
    if result["ok"] != calls:
        raise RuntimeError(f"{name}: only {result['ok']} of {calls} calls succeeded")
    return Sample(name, concurrency, calls, result["wall_s"], result["cpu_s"], result["server_cpu_s"])


def by_rate(samples: list[Sample]) -> Sample:
    """The median sample by throughput (the upper middle of an even count), for a table's row."""
    return sorted(samples, key=lambda s: s.rate)[len(samples) // 2]


def by_cpu(samples: list[Sample]) -> Sample:
    """The median sample by the client's CPU per call (the upper middle of an even count), for a row."""
    return sorted(samples, key=lambda s: s.client_ms)[len(samples) // 2]
