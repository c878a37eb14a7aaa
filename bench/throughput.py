"""Driver vs wrk vs the SDK's client, against the same no-op target, at several concurrencies.

wrk (C, the reference for "the server's limit") runs for a fixed time; the
driver, its transport alone (``bench.transport``: the floor under the driver's
cost) and the SDK loop make as many calls as wrk managed in that time, each
in its own process, so calls/s and CPU per call (from the OS) are comparable.
Each concurrency level gets a fresh server, on which the four are measured in
alternating rounds judged as every ratio goal is (:mod:`bench.rounds`), and
every client's run is also charged the server CPU it caused.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import PeakRss, Server, cpu_seconds, server
from bench.rounds import Round, Rule, alternate, run_rounds

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop","arguments":{"n":1},' ..
  '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "noop"
"""


@dataclass
class Sample:
    client: str
    concurrency: int
    calls: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    relay_cpu_s: float = 0.0
    """The observing PostgreSQL relay's: a process of the harness's own, apart from the driver's."""
    place_cpu_s: float = 0.0
    """Observing: the driver process's placement of the relay's points once the calls were over (those of
    the warm-up round too), apart from the calls' CPU."""

    @property
    def rate(self) -> float:
        return self.calls / self.wall_s

    @property
    def client_ms(self) -> float:
        return self.client_cpu_s / self.calls * 1000

    @property
    def server_ms(self) -> float:
        return self.server_cpu_s / self.calls * 1000

    @property
    def relay_ms(self) -> float:
        return self.relay_cpu_s / self.calls * 1000

    @property
    def place_ms(self) -> float:
        """Per call placed (a warm-up round of as many calls comes first)."""
        return self.place_cpu_s / (2 * self.calls) * 1000


def _wait(proc: subprocess.Popen[str]) -> tuple[str, resource.struct_rusage]:
    """Reap a child and return its stdout and resource usage (wait4's rusage: its CPU; not its peak RSS,
    which counts its parent's from before exec: see :class:`bench.common.PeakRss`)."""
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{proc.args!r} failed with {proc.returncode}: {out[-500:]}")
    return out, usage


def run_wrk(srv: Server, concurrency: int, seconds: int, script: Path) -> Sample:
    s0 = cpu_seconds(srv.pid)
    proc = subprocess.Popen(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(script), srv.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, usage = _wait(proc)
    cpu = usage.ru_utime + usage.ru_stime
    server_cpu = cpu_seconds(srv.pid) - s0
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk got error responses: {out}")
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        raise RuntimeError(f"cannot read wrk output: {out}")
    calls, wall = int(m.group(1)), float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    return Sample("wrk", concurrency, calls, wall, cpu, server_cpu)


def run_python(module: str, name: str, srv: Server, concurrency: int, calls: int, *extra: str) -> Sample:
    return _run_python(module, name, srv, concurrency, calls, *extra)[0]


def _run_python(
    module: str, name: str, srv: Server, concurrency: int, calls: int, *extra: str
) -> tuple[Sample, float]:
    """A client child process; returns its sample and its peak RSS in MB."""
    s0 = cpu_seconds(srv.pid)
    args = [
        sys.executable,
        "-m",
        module,
        srv.url,
        "--calls",
        str(calls),
        "--concurrency",
        str(concurrency),
        *extra,
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    peak = PeakRss(proc.pid, args)
    out, _ = _wait(proc)
    peak_mb = peak.stop()
    server_cpu = cpu_seconds(srv.pid) - s0
    result = json.loads(out)
    if result["ok"] != calls:
        raise RuntimeError(f"{name}: only {result['ok']} of {calls} calls succeeded")
    # The child's own CPU figure excludes interpreter start-up and imports; wait4's includes them.
    sample = Sample(name, concurrency, calls, result["wall_s"], result["cpu_s"], server_cpu)
    return sample, peak_mb


LEVELS = (1, 8, 32, 64)
"""The concurrencies the driver is held against wrk at."""
ThroughputRound = tuple[Sample, Sample, Sample, Sample]
"""One round at one concurrency: wrk, the transport alone, the driver, the SDK's client."""


def rounds_at(rule: Rule, concurrency: int, seconds: int = 3) -> list[Round[ThroughputRound]]:
    """Alternating rounds at one concurrency on one fresh server (:mod:`bench.rounds`): wrk first on
    even rounds, last on odd ones; a round's ratio is the driver's throughput over wrk's, wrk's calls/s
    its reference. The Python clients make as many calls as wrk managed in the first round."""
    calls = 0
    with server("noop/server.py") as srv, tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(WRK_SCRIPT)
        run_python("bench.drive", "driver", srv, concurrency, 500)  # warm-up: imports, caches

        def wrk() -> Sample:
            nonlocal calls
            sample = run_wrk(srv, concurrency, seconds, script)
            calls = calls or max(1000, int(sample.rate * seconds))
            return sample

        def transport() -> Sample:
            return run_python("bench.transport", "transport", srv, concurrency, calls)

        def driver() -> Sample:
            return run_python("bench.drive", "driver", srv, concurrency, calls)

        def sdk() -> Sample:
            return run_python("bench.sdk_loop", "sdk client", srv, concurrency, max(500, calls // 4))

        def one(index: int) -> tuple[float, float, ThroughputRound]:
            if index % 2 == 0:
                ref = wrk()
                floor, measured, by_hand = transport(), driver(), sdk()
            else:
                by_hand, measured, floor = sdk(), driver(), transport()
                ref = wrk()
            return measured.rate / ref.rate, ref.rate, (ref, floor, measured, by_hand)

        return run_rounds(rule, one)


def driver_peak_rss_mb(
    calls: tuple[int, ...] = (10_000, 100_000), concurrency: int = 32
) -> list[tuple[int, float]]:
    """Peak RSS of the driver's process for runs of different lengths (memory must not grow with intents)."""
    with server("noop/server.py") as srv:
        return [(n, _run_python("bench.drive", "driver", srv, concurrency, n)[1]) for n in calls]


def proxy_overhead(concurrency: int = 8, calls: int = 10_000, rounds: int = 3) -> tuple[Sample, Sample]:
    """The driver direct and through the fault proxy (in its process), same server: medians by CPU."""
    direct: list[Sample] = []
    proxied: list[Sample] = []
    with server("noop/server.py") as srv:
        run_python("bench.drive", "driver", srv, concurrency, 500)  # warm-up
        for _ in range(rounds):
            direct.append(run_python("bench.drive", "driver", srv, concurrency, calls))
            proxied.append(run_python("bench.drive", "driver + proxy", srv, concurrency, calls, "--proxy"))
    direct.sort(key=lambda s: s.client_ms)
    proxied.sort(key=lambda s: s.client_ms)
    return direct[len(direct) // 2], proxied[len(proxied) // 2]


def trace_overhead(concurrency: int = 8, calls: int = 10_000, rounds: int = 5) -> tuple[Sample, Sample]:
    """The driver without and with ``client.trace``, same server, alternating: medians by CPU."""
    off: list[Sample] = []
    on: list[Sample] = []
    with server("noop/server.py") as srv:
        run_python("bench.drive", "driver", srv, concurrency, 500)  # warm-up
        for _ in range(rounds):
            off.append(run_python("bench.drive", "driver", srv, concurrency, calls))
            on.append(run_python("bench.drive", "driver + trace", srv, concurrency, calls, "--trace"))
    off.sort(key=lambda s: s.client_ms)
    on.sort(key=lambda s: s.client_ms)
    return off[len(off) // 2], on[len(on) // 2]


ObserveRound = tuple[Sample, Sample, Sample]
"""One round of the observe goal: the database direct, the relay alone in the path, observing."""


def observe_overhead(rule: Rule, concurrency: int = 8, calls: int = 3000) -> list[Round[ObserveRound]]:
    """Rounds of the driver against the reference target on PostgreSQL: without observe mode (the
    reference, the round's yardstick), with the relay alone in the path (its reports dropped), and with
    observe mode (the PostgreSQL relay in a process of its own, its commits placed after the calls). The
    direct and observing arms alternate which goes first (decision 0073); the relay alone runs between them.
    Each round's ratio is its observing arm's driver CPU per call over its direct arm's."""
    import asyncio

    from harness.loopback import free_port
    from harness.services import Postgres

    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as loop:  # the cluster's one loop
        cluster = Postgres(Path(tmp), "bench", free_port())
        loop.run(cluster.start())

        def arm(name: str, *extra: str) -> Sample:
            return _observe_sample(name, cluster.url, concurrency, calls, *extra)

        def one(index: int) -> tuple[float, float, ObserveRound]:
            relay: list[Sample] = []

            def observing() -> Sample:
                relay.append(arm("driver, relay only", "--relay-only"))
                return arm("driver, observing", "--observe")

            off, on = alternate(index, lambda: arm("driver, database direct"), observing)
            return on.client_ms / off.client_ms, off.client_ms, (off, relay[0], on)

        try:
            return run_rounds(rule, one)
        finally:
            loop.run(cluster.stop())


def _observe_sample(name: str, database: str, concurrency: int, calls: int, *extra: str) -> Sample:
    args = [sys.executable, "-m", "bench.observe", database, "--calls", str(calls)]
    args += ["--concurrency", str(concurrency), *extra]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=600).stdout
    result = json.loads(out)
    if result["ok"] != calls:
        raise RuntimeError(f"{name}: only {result['ok']} of {calls} calls succeeded")
    if "--observe" in extra and result["placed_points"] < 2 * calls:  # the warm-up's and the round's
        raise RuntimeError(f"{name}: {result['placed_points']} points placed for {2 * calls} calls")
    return Sample(
        name,
        concurrency,
        calls,
        result["wall_s"],
        result["cpu_s"],
        0.0,
        result["relay_cpu_s"],
        result["place_cpu_s"],
    )
