"""``python -m bench [throughput audit restart reproduce]``: PASS/FAIL/UNKNOWN per goal, and BENCHMARKS.md.

Exit code 1 when a goal fails, 3 when none fails but one could not be judged
(the machine was too busy: :mod:`bench.rounds`). Each benchmark measures the
harness and its reference in the same invocation; see the module docstrings
for how.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import audit, crashjobs, filetrace, modes, restart, throughput
from bench.common import ROOT, Goal, compile_harness, exit_code
from bench.rounds import Rule, alternate, judge, judging_rule, kept_data, run_rounds, summarize
from harness.report.tables import markdown_table

HTML_ROUNDS = 3
"""Audits with report.html, whose median is held against the audit alone (one swung by 10%)."""
ALL = (
    "throughput",
    "memory",
    "proxy",
    "trace",
    "observe",
    "sessions",
    "stdio",
    "audit",
    "restart",
    "filetrace",
    "crashjobs",
    "reproduce",
)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} × {model}; Python {platform.python_version()}; "
        f"{platform.system()} {platform.release()}"
    )


def bench_throughput(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    rows = []
    cpu = []
    for c in throughput.LEVELS:
        found = throughput.rounds_at(rule, c)
        kept = kept_data(found, rule)
        wrk_rate = statistics.median(r[0].rate for r in kept)
        for i, client in enumerate(("wrk", "transport", "driver", "sdk client")):
            rate = statistics.median(r[i].rate for r in kept)
            rows.append(
                [
                    client,
                    c,
                    f"{rate:.0f}",
                    f"{rate / wrk_rate:.2f}",
                    f"{statistics.median(r[i].client_ms for r in kept):.3f}",
                    f"{statistics.median(r[i].server_ms for r in kept):.3f}",
                ]
            )
        cpu.append(statistics.median(r[2].client_ms for r in kept))
        goals.append(judge(f"driver throughput vs wrk at concurrency {c}", found, rule, 0.9, "×", True))
        # CPU per call against wrk's in the same round (the OS's accounting of each): a ratio holds on
        # another machine, where an absolute figure in ms would not. The same rounds, judged alike.
        per_call = [dataclasses.replace(r, ratio=r.data[2].client_ms / r.data[0].client_ms) for r in found]
        goals.append(judge(f"driver CPU per call vs wrk's at concurrency {c}", per_call, rule, 3.0))
    goals.append(
        Goal("driver CPU per call, flatness (max/min over concurrency 1-64)", max(cpu) / min(cpu), 1.5, "×")
    )
    sections.append(
        "## Throughput and CPU per call (no-op tool, JSON responses)\n\n"
        f"{rule.rounds} alternating rounds per concurrency level on a fresh `targets/noop` server (wrk\n"
        "first, then last), judged by the rule above; the table has the medians of the rounds used, the\n"
        "goals the medians of their ratios. The driver runs on the event loop a run uses (uvloop;\n"
        "`MCP_CHAOS_LOOP`). wrk (C) is the reference for the server's limit; `transport` is the\n"
        "driver's own keep-alive pool sending the driver's request bytes with nothing else (no intents,\n"
        "history nor MCP: `bench/transport.py`), the floor under the driver's cost; `sdk client` is the\n"
        "official SDK's `Client` in a loop, what a user would write by hand. CPU per call is from the OS\n"
        "(wait4 / /proc), not wall clock.\n\n"
        + markdown_table(
            ["client", "concurrency", "calls/s", "× wrk", "client CPU ms/call", "server CPU ms/call"], rows
        )
    )


def bench_memory(goals: list[Goal], sections: list[str]) -> None:
    (small, small_mb), (large, large_mb) = throughput.driver_peak_rss_mb()
    goals.append(Goal(f"driver peak RSS, {large:,} vs {small:,} intents", large_mb / small_mb, 1.1, "×"))
    sections.append(
        "## Driver memory\n\nPeak RSS of the driver's process "
        "(history written as it goes, intents generated lazily):\n\n"
        + markdown_table(
            ["intents", "peak RSS MB"], [[f"{small:,}", f"{small_mb:.0f}"], [f"{large:,}", f"{large_mb:.0f}"]]
        )
    )


def bench_proxy(goals: list[Goal], sections: list[str]) -> None:
    direct, proxied = throughput.proxy_overhead()
    added_ms = proxied.client_ms - direct.client_ms
    rows = [
        [s.client, f"{s.rate:.0f}", f"{s.client_ms:.3f}", f"{s.server_ms:.3f}"] for s in (direct, proxied)
    ]
    sections.append(
        "## Fault proxy overhead\n\nThe driver with and without the fault proxy in its process "
        "(one rule that\nnever fires, so every exchange is parsed and identified), concurrency 8, "
        "median of 3 by CPU.\n"
        f"The proxy adds {added_ms:.3f} ms of CPU per exchange; throughput ratio "
        f"{proxied.rate / direct.rate:.2f}.\n\n"
        + markdown_table(["client", "calls/s", "harness CPU ms/call", "server CPU ms/call"], rows)
    )


def bench_trace(goals: list[Goal], sections: list[str]) -> None:
    off, on = throughput.trace_overhead()
    # About 3 µs per call (two blake2b hashes, a header, a _meta field, ~90 bytes more history):
    # 2-8% of the driver's CPU per call on a loaded 2-core machine.
    goals.append(Goal("driver CPU per call, client.trace on vs off", on.client_ms / off.client_ms, 1.15, "×"))
    rows = [[s.client, f"{s.rate:.0f}", f"{s.client_ms:.3f}", f"{s.server_ms:.3f}"] for s in (off, on)]
    sections.append(
        "## Trace context overhead\n\nThe driver without and with `client.trace` (a `traceparent` "
        "header and `_meta` field on\nevery attempt, its ids in the history), concurrency 8, alternating, "
        f"median of 5 by CPU.\nTracing adds {on.client_ms - off.client_ms:.3f} ms of CPU per call.\n\n"
        + markdown_table(["client", "calls/s", "harness CPU ms/call", "server CPU ms/call"], rows)
    )


def bench_observe(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    found = throughput.observe_overhead(rule)
    kept = kept_data(found, rule)
    off, relay, on = (modes.by_cpu([r[i] for r in kept]) for i in range(3))
    # Every run with services.postgres observes: the PostgreSQL relay (a process of its own) between the
    # target and its database, its commits placed in their attempts after the calls (issue #54: 10% at
    # most; decision 0092).
    goals.append(judge("driver CPU per call, observe mode on vs off (PostgreSQL)", found, rule, 1.1, "×"))
    rows = [
        [
            s.client,
            f"{s.rate:.0f}",
            f"{s.client_ms:.3f}",
            f"{s.client_ms / off.client_ms:.2f}×",
            f"{s.relay_ms:.3f}",
            f"{s.place_ms:.3f}" if s is on else "",
        ]
        for s in (off, relay, on)
    ]
    sections.append(
        "## Observe mode overhead\n\nThe driver against the reference target (atomic, PostgreSQL) with "
        "the database direct,\nthrough the PostgreSQL relay with its reports dropped unread (the relay alone "
        "in the path), and\nthrough the relay observing as every run with `services.postgres` does: its "
        "reports spooled unread,\nplaced in their attempts once the calls are over (decision 0092). "
        f"Concurrency 8, in {rule.rounds} alternating rounds\n(the median arm by the driver's CPU here). The "
        "relay is a process of its own (decision 0081): in the\npath alone it adds "
        f"{relay.client_ms - off.client_ms:.3f} ms of CPU per call to the driver's process; spooling its "
        f"reports\nadds {on.client_ms - relay.client_ms:.3f} ms more, and the relay takes "
        f"{on.relay_ms:.3f} ms per call besides. The placement after the\ncalls costs the driver's process "
        f"{on.place_ms:.3f} ms per call placed, once the run's calls are over.\n\n"
        + markdown_table(
            ["client", "calls/s", "driver CPU ms/call", "÷ direct", "relay CPU ms/call", "placed, ms/call"],
            rows,
        )
    )


def bench_sessions(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    rows = []
    for c, found in modes.session_mode(rule).items():
        kept = kept_data(found, rule)
        wrk, modern, session = (modes.by_rate([r[i] for r in kept]) for i in range(3))
        for s in (wrk, modern, session):
            rows.append(
                [s.client, s.concurrency, f"{s.rate:.0f}", f"{s.client_ms:.3f}", f"{s.server_ms:.3f}"]
            )
        goals.append(judge(f"session mode: driver vs wrk at concurrency {c}", found, rule, 0.9, "×", True))
        cpu = statistics.median(r[2].client_ms for r in kept)
        goals.append(Goal(f"driver CPU per call in session mode at concurrency {c}", cpu, 0.3, " ms"))
    sections.append(
        "## 2025 sessions vs 2026-07-28\n\nOne `targets/noop` server in stateful mode serves both: wrk "
        "calling in a 2025-11-25 session\n(the server's limit in that mode), and the driver in 2026-07-28 "
        f"mode and in a session, in {rule.rounds}\nalternating rounds (the median by throughput here). "
        "The goals compare the driver with wrk in the\nsame mode: the server spends more CPU "
        "per call on its session path than on its stateless one\n(see the last column), so the two modes' "
        "throughputs differ by the server's cost, and the\ndriver's CPU per call rises as the calls it can "
        "batch per wake-up fall.\n\n"
        + markdown_table(
            ["client", "concurrency", "calls/s", "client CPU ms/call", "server CPU ms/call"], rows
        )
    )


def bench_stdio(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    found = modes.stdio_mode(rule)
    kept = kept_data(found, rule)
    sdk, driver = (modes.by_rate([r[i] for r in kept]) for i in range(2))
    rows = [
        [s.client, s.concurrency, f"{s.rate:.0f}", f"{s.client_ms:.3f}", f"{s.server_ms:.3f}"]
        for s in (driver, sdk)
    ]
    goals.append(judge("stdio: driver vs the SDK's stdio client throughput", found, rule, 1.0, "×", True))
    sections.append(
        "## stdio\n\nThe driver and the official SDK's stdio client (`Client(StdioServerParameters(...))`), "
        "each starting\nthe no-op server as its child and calling it over stdin/stdout at concurrency 8, "
        f"in {rule.rounds} alternating\nrounds (the median by throughput here). The server's CPU is read "
        "from /proc after its start-up.\n\n"
        + markdown_table(
            ["client", "concurrency", "calls/s", "client CPU ms/call", "server CPU ms/call"], rows
        )
    )


def bench_audit(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    """The audit against its floor, the orjson parse of the same file, in alternating rounds."""
    rows = []
    peaks: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in audit.SIZES:
            run_dir = Path(tmp) / str(n)
            audit.synthesize(run_dir, n)

            def one(i: int, run_dir: Path = run_dir) -> tuple[float, float, tuple[float, audit.AuditSample]]:
                floor, sample = alternate(i, lambda: audit.parse_floor(run_dir), lambda: audit.audit(run_dir))
                return sample.wall_s / floor, floor, (floor, sample)

            found = run_rounds(rule, one)
            goals.append(judge(f"audit vs its parse floor, {n:,} intents", found, rule, 1.5))
            kept = kept_data(found, rule)
            ratio = float(statistics.median(s.wall_s / f for f, s in kept))
            wall = statistics.median(s.wall_s for _, s in kept)
            floor = statistics.median(f for f, _ in kept)
            peaks[n] = statistics.median(s.peak_rss_mb for _, s in kept)
            rows.append(
                [
                    f"{n:,}",
                    f"{kept[0][1].history_mb:.0f}",
                    f"{floor:.2f}",
                    f"{wall:.2f}",
                    f"{ratio:.2f}",
                    f"{peaks[n]:.0f}",
                ]
            )
            if n == audit.SIZES[0]:
                html_rule = Rule(HTML_ROUNDS, rule.reruns)

                def html_one(i: int, run_dir: Path = run_dir) -> tuple[float, float, audit.AuditSample]:
                    alone, with_html = alternate(
                        i, lambda: audit.audit(run_dir), lambda: audit.audit(run_dir, html=True)
                    )
                    return with_html.wall_s / alone.wall_s, alone.wall_s, with_html

                html_found = run_rounds(html_rule, html_one)
                with_html = kept_data(html_found, html_rule)
                html_wall = statistics.median(s.wall_s for s in with_html)
                html_peak = statistics.median(s.peak_rss_mb for s in with_html)
                rows.append(
                    [
                        f"{n:,} with report.html",
                        f"{with_html[0].history_mb:.0f}",
                        f"{floor:.2f}",
                        f"{html_wall:.2f}",
                        f"{html_wall / floor:.2f}",
                        f"{html_peak:.0f}",
                    ]
                )
                name = f"audit + report.html vs audit alone, {n:,} intents"
                goals.append(judge(name, html_found, html_rule, 1.3))
                goals.append(Goal("audit + report.html, peak RSS", html_peak, 1024, " MB"))
            shutil.rmtree(run_dir)  # 3M intents are 1.5 GB of history
    small, large = audit.SIZES
    growth = peaks[large] / peaks[small]
    goals.append(Goal(f"audit peak RSS, {large:,} vs {small:,} intents", growth, 1.3, "×"))
    goals.append(Goal(f"audit peak RSS, {large:,} intents", peaks[large], 400, " MB"))
    sections.append(
        "## Audit\n\n`mcp-chaos audit --no-html` of synthesised pod-kill-shaped histories (all event types,\n"
        "3% of intents retried, 8 kills), as a child process, wall clock and peak RSS from the OS.\n"
        "Its floor is the same file merely parsed, line by line, with orjson in this process; the two\n"
        f"are measured in {rule.rounds} alternating rounds, and the table has the medians of the rounds "
        "used\n(see the judging rule above). The row with report.html adds its plots, measured in "
        f"{HTML_ROUNDS} rounds\nalternating with the audit alone, which may cost at most 30% more.\n\n"
        + markdown_table(["intents", "history MB", "parse s", "audit s", "× parse", "peak RSS MB"], rows)
    )


def bench_restart(goals: list[Goal], sections: list[str]) -> None:
    rows = [["process (reference invoices target)", f"{restart.restart_s('process'):.2f} s"]]
    if restart.docker_available():
        rows.append([f"docker ({restart.IMAGE}, host network)", f"{restart.restart_s('docker'):.2f} s"])
    else:
        rows.append(["docker", "not measured: no engine or no image (make image)"])
    sections.append(
        "## Restart latency\n\n" + markdown_table(["runtime", "kill → ready (median of 10)"], rows)
    )


def bench_filetrace(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    """A traced call against an untraced one, in alternating rounds; then one SQLite intent explored."""
    tracer_untraced = False

    def one(i: int) -> tuple[float, float, tuple[float, float]]:
        nonlocal tracer_untraced
        (untraced, tracer), (traced, _) = alternate(
            i, lambda: filetrace.call_ms(200, traced=False), lambda: filetrace.call_ms(200, traced=True)
        )
        tracer_untraced |= tracer
        return traced / untraced, untraced, (untraced, traced)

    found = run_rounds(rule, one)
    summary = summarize(found, rule)
    untraced, traced = ([r[i] for r in kept_data(found, rule)] for i in range(2))
    goals.append(Goal("file tracing off: tracer processes an untraced run starts", float(tracer_untraced), 0))
    seconds, explored = filetrace.exploration_s()
    goals.append(
        Goal(
            "crashpoints of one SQLite intent, the default options (every state, kill and power loss)",
            seconds,
            180,
            " s",
        )
    )
    tries = sum(p.tries for p in explored.points)
    sections.append(
        "## File tracing\n\n"
        "The reference notes server on SQLite (its defaults), 200 `write_note` calls at concurrency 1, "
        f"untraced and traced in {rule.rounds} alternating rounds; a call's median time from the history. "
        "Traced, the server runs through the seccomp launcher and the tracer only keeps its model of what "
        "is durable (a run's power losses): a crash point's exploration also asks the harness at each "
        "operation.\n\n"
        + markdown_table(
            ["", "median ms per call", "rounds"],
            [
                ["untraced", f"{statistics.median(untraced):.2f}", ", ".join(f"{v:.2f}" for v in untraced)],
                ["traced", f"{statistics.median(traced):.2f}", ", ".join(f"{v:.2f}" for v in traced)],
                ["traced / untraced", f"{summary.ratio:.2f}×", summary.unknown or summary.spread],
            ],
        )
        + f"\n\n`crashpoints` of one intent with its defaults: {len(explored.points)} points, {tries} tries, "
        f"{seconds:.1f} s on {os.cpu_count()} cores."
    )


def bench_crashjobs(goals: list[Goal], sections: list[str], rule: Rule) -> None:
    """``crashpoints --jobs 1`` and ``--jobs 2`` in alternating rounds: the speed-up, and the same table."""
    rows = []
    for target in ("postgres", "files"):

        def one(i: int, target: str = target) -> tuple[float, float, tuple[float, float, bool]]:
            (one, table_one), (two, table_two) = alternate(
                i, lambda: crashjobs.wall_s(target, 1), lambda: crashjobs.wall_s(target, 2)
            )
            return one / two, one, (one, two, table_one == table_two)

        found = run_rounds(rule, one)
        summary = summarize(found, rule)
        goals.append(judge(f"crashpoints --jobs 2 vs 1, {target}, speed-up", found, rule, 1.5, "×", True))
        # Every round's tables, the re-run ones too: whether they agree does not depend on the machine.
        same = all(same for _, _, same in (r.data for r in found))
        goals.append(Goal(f"crashpoints --jobs 2 vs 1, {target}, tables that differ", float(not same), 0))
        kept = kept_data(found, rule)
        rows.append(
            [
                target,
                f"{statistics.median(one for one, _, _ in kept):.1f}",
                f"{statistics.median(two for _, two, _ in kept):.1f}",
                f"{summary.ratio:.2f}×",
                summary.spread,
            ]
        )
    sections.append(
        "## Crash points in copies of the target\n\n"
        "The same exploration (R = 3, every crash state) in one copy and in two (`--jobs 2`), in alternating "
        "rounds: the reference target's PostgreSQL scenario (4 points) and the notes server's durable JSON "
        f"lines (6 states of 14 crash points, kill and power loss), on {os.cpu_count()} cores.\n\n"
        + markdown_table(["target", "--jobs 1 s", "--jobs 2 s", "speed-up", "rounds"], rows)
    )


def bench_reproduce(goals: list[Goal], sections: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "reproduce",
                "--quiet",
                "--results",
                tmp,
                "--scenario",
                str(ROOT / "scenarios" / "pod-kill.yaml"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - start
    goals.append(Goal("make reproduce (three variants, article scenario), wall", wall, 180, " s"))
    sections.append(f"## make reproduce\n\nThree variants, one run each, one after the other: {wall:.0f} s.")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("only", nargs="*", help=f"benchmarks to run, from {', '.join(ALL)} (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each ratio goal but the audit's")
    parser.add_argument(
        "--audit-rounds",
        type=int,
        default=5,
        help="rounds of the audit's ratio goals: one round's ratio swings by 10%% on two cores",
    )
    parser.add_argument(
        "--reruns",
        type=int,
        default=-1,
        help="rounds a ratio goal may add in place of rounds a busy machine spoiled (default: its rounds)",
    )
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    args = parser.parse_args()
    chosen = args.only or list(ALL)
    unknown = sorted(set(chosen) - set(ALL))
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(ALL)}")
    compile_harness()
    rule = Rule(args.rounds, args.reruns)
    goals: list[Goal] = []
    sections: list[str] = []
    for name in chosen:
        print(f"== {name}", file=sys.stderr, flush=True)
        if name == "throughput":
            bench_throughput(goals, sections, rule)
        elif name == "proxy":
            bench_proxy(goals, sections)
        elif name == "trace":
            bench_trace(goals, sections)
        elif name == "observe":
            bench_observe(goals, sections, rule)
        elif name == "memory":
            bench_memory(goals, sections)
        elif name == "sessions":
            bench_sessions(goals, sections, rule)
        elif name == "stdio":
            bench_stdio(goals, sections, rule)
        elif name == "audit":
            bench_audit(goals, sections, Rule(args.audit_rounds, args.reruns))
        elif name == "restart":
            bench_restart(goals, sections)
        elif name == "filetrace":
            bench_filetrace(goals, sections, rule)
        elif name == "crashjobs":
            bench_crashjobs(goals, sections, rule)
        else:
            bench_reproduce(goals, sections)
    lines = [g.line() for g in goals]
    print("\n".join(lines))
    Path(args.output).write_text(
        "# Benchmarks\n\n"
        f"Generated by `make bench` on {dt.date.today().isoformat()}: {machine()}.\n"
        f"Benchmarks run: {', '.join(chosen)}.\n\n"
        "## Goals\n\n"
        + judging_rule(rule)
        + "\n\n```\n"
        + "\n".join(lines)
        + "\n```\n\n"
        + "\n\n".join(sections)
        + "\n",
        encoding="utf-8",
    )
    print(f"written {args.output}", file=sys.stderr)
    return exit_code(goals)


if __name__ == "__main__":
    sys.exit(main())
