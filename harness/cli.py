"""The ``mcp-chaos`` command line: parses arguments and calls the library, nothing more.

Exit codes: 0 run (and gate) fine; 1 the scenario's gate failed; 2 bad usage or
scenario (an output path that cannot be written is one, found before any work);
3 the target could not be run; 4 a history or its effects could not be audited;
5 ``export-otlp``'s collector did not take the spans; 130 interrupted (the partial
run is kept and can be audited).

Everything printed passes :func:`harness.sanitize.terminal`: tables and errors
quote servers, and an ESC sequence from one must not reach a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from harness import rundir
from harness._version import __version__
from harness.errors import HarnessError, ScenarioError, TargetError, UsageError
from harness.sanitize import terminal

if TYPE_CHECKING:
    from harness.contract import CheckResult
    from harness.scenario import Scenario

# Each command imports what it uses when it runs: every command's modules took 0.7 s to import
# (pandas, the runner, Docker's SDK), and ``audit`` starts reading before it imports its own.

T = TypeVar("T")
EXIT_GATE_FAILED = 1
EXIT_INTERRUPTED = 130


class _Interrupted(Exception):
    def __init__(self, run_dirs: Sequence[Path]) -> None:
        self.run_dirs = list(run_dirs)


GATE_FLAGS = ("max_duplicates", "max_duplicate_rate", "max_lost", "fail_on", "expect", "allow_inconclusive")


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` and the flags that stand for scenario fields (``--seed``, the gate's)."""
    sets = list(args.set or [])
    if getattr(args, "seed", None) is not None:
        sets.append(f"seed={args.seed}")
    for flag in GATE_FLAGS:
        value = getattr(args, flag, None)
        if value is None:
            continue
        if flag in ("fail_on", "expect"):
            value = "[" + ", ".join(v.strip() for v in value.split(",") if v.strip()) + "]"
        elif flag == "allow_inconclusive":
            if not value:
                continue
            value = "true"
        sets.append(f"gate.{flag}={value}")
    return sets


def _ids(text: str | None) -> list[str]:
    """A comma-separated list (``--modes``, ``--only``, ``--skip``)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _gate_options(p: argparse.ArgumentParser) -> None:
    """The scenario's gate from the command line, for CI (they override the scenario's)."""
    p.add_argument("--max-duplicates", type=int, metavar="N", help="fail (exit 1) above N duplicates")
    p.add_argument("--max-duplicate-rate", type=float, metavar="RATE", help="fail above this rate (0.001)")
    p.add_argument("--max-lost", type=int, metavar="N", help="fail above N lost intents")
    p.add_argument(
        "--fail-on",
        metavar="LIST",
        help="fail on any of these only: duplicate,lost,applied_despite_error (default: every finding)",
    )
    p.add_argument(
        "--expect", metavar="LIST", help="a canary: fail unless the run shows each (duplicate,lost,...)"
    )
    p.add_argument(
        "--allow-inconclusive",
        action="store_true",
        default=None,
        help="pass a run that did not test what it planned (by default it fails)",
    )


def _say(text: str = "", *, err: bool = False) -> None:
    """Print a line for people; whatever a server put in it, no control sequence reaches the terminal."""
    print(terminal(text), file=sys.stderr if err else sys.stdout)


def _output_dir(value: str | None, flag: str) -> Path | None:
    """An output directory made and checked before any work (found bad after an exploration, it cost
    the exploration's table and ended in a traceback)."""
    if not value:
        return None
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value}: is a file, not a directory; name a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {value}: cannot be made ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {value}: cannot be written (permissions)")
    return path


def _output(value: str | None, flag: str, *, makes_dirs: bool = False) -> Path | None:
    """An output path checked before any work: a file that can be written in a directory that exists
    (or, with ``makes_dirs``, that the writer creates: its nearest existing ancestor must be writable).

    Found after a run, a bad path would cost the run and end in a traceback (exit 1,
    which reads as "gate failed"); here it is a usage error (exit 2).
    """
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value}: is a directory; name a file")
    parent = path.parent if str(path.parent) else Path(".")
    if makes_dirs:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {value}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {value}: cannot be written (permissions)")
    if (own := rundir.own_file(path)) is not None:
        raise UsageError(f"{flag} {value}: is {own}, a file of the run this would destroy; write elsewhere")
    return path


def _step_summary_path() -> Path | None:
    """``$GITHUB_STEP_SUMMARY``, checked like any output path, or None where the CI offers none."""
    return _output(os.environ.get("GITHUB_STEP_SUMMARY"), "GITHUB_STEP_SUMMARY")


def _drive(coro: Coroutine[Any, Any, T], run_dirs: Sequence[Path]) -> T:
    """Run the event loop; Ctrl-C, SIGTERM or SIGHUP become _Interrupted naming the partial runs."""
    import asyncio

    from harness.runner import cancel_on_stop_signals

    try:
        return asyncio.run(cancel_on_stop_signals(coro))
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise _Interrupted(run_dirs) from None


def _preflight(scenario: Scenario, parent: Path, run_id: str, run_dirs: Sequence[Path]) -> None:
    """One real call whose effect must be counted once; PreflightError (exit 2) otherwise."""
    from harness.preflight import preflight

    sys.stderr.write(f"preflight: one call of {scenario.workload.tool} ...\n")
    sys.stderr.flush()
    done = _drive(preflight(scenario, parent, run_id), run_dirs)
    _say(done.describe(), err=True)


def _step_summary(path: Path | None, markdown: str) -> None:
    """Append to the CI job's summary page when the CI offers one (GitHub Actions does); the
    Markdown's server text is escaped by its renderer (:func:`harness.report.text.in_markdown`)."""
    if path is not None:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(markdown)


def cmd_run(args: argparse.Namespace) -> int:
    from harness import control
    from harness.faults.describe import announcement
    from harness.report import trend
    from harness.report.junit import run_junit
    from harness.report.text import render_step_summary, render_text
    from harness.runner import check_environment, run_and_audit
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    summary_path, junit_path = _step_summary_path(), _output(args.junit, "--junit")
    trend_path = _output(args.trend, "--trend", makes_dirs=True)  # a nightly's trend.csv starts its folder
    check_environment(scenario)
    run_dir = rundir.prepare_run_dir(Path(args.results), scenario, args.run_id)
    if not args.no_preflight:
        _preflight(scenario, run_dir, run_dir.name, [run_dir])
    progress = None if args.quiet else 1.0
    if args.control:
        sys.stderr.write(f"control: {scenario.workload.intents} intents with no faults first ...\n")
        sys.stderr.flush()
        baseline = _drive(control.run_control(scenario, run_dir, progress_interval_s=progress), [run_dir])
        sys.stderr.write(control.describe(baseline) + "\n")
    sys.stderr.write(announcement(scenario, run_dir.name) + "\n")
    sys.stderr.flush()
    audit = _drive(run_and_audit(scenario, run_dir, progress_interval_s=progress), [run_dir])
    _step_summary(summary_path, render_step_summary(audit.summary))
    if junit_path is not None:
        junit_xml = run_junit(audit.summary, audit.summary.duration_s)
        junit_path.write_text(junit_xml, encoding="utf-8")
    if trend_path is not None:
        trend.append(trend_path, audit, args.trend_as)
    _say(render_text(audit.summary))
    _say(f"\nreport: {run_dir / rundir.REPORT_MD}")
    return 0 if audit.gate_passed else EXIT_GATE_FAILED


def _tune_for_the_audit() -> None:
    """Load numpy and pyarrow with settings they read once, when they load (this command line has not
    loaded them yet); the environment is then put back as it was, for whatever starts later.

    Arrow's C++ allocator: its default here, mimalloc, gives freed pages back
    within milliseconds, and the audit, which frees and allocates a chunk's worth
    of buffers over and over, faulted them in again. With jemalloc an audit of a
    million intents took a quarter less system time and 25 MB less memory (runs in
    pairs). OpenBLAS: the audit does no linear algebra, and the thread OpenBLAS
    starts spun for a tenth of a second of the other core. A value already set is
    kept.
    """
    tuned = {"OPENBLAS_NUM_THREADS": "1"}
    if sys.platform == "linux":  # where pyarrow's wheels have jemalloc
        tuned["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    unset = [name for name in tuned if name not in os.environ]
    try:
        for name in unset:
            os.environ[name] = tuned[name]
        import numpy  # noqa: F401 (OpenBLAS reads its variable as numpy loads it)
        import pyarrow

        pyarrow.default_memory_pool()  # Arrow reads its own on first use
    finally:
        for name in unset:
            os.environ.pop(name, None)


def cmd_audit(args: argparse.Namespace) -> int:
    from harness.audit.store import read_early

    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    early = read_early(run_dir)  # SQLite reads the effects while numpy, Arrow and DuckDB are imported
    _tune_for_the_audit()
    from harness.audit.begin import begin

    begun = begin(run_dir, early)
    from harness.auditing import audit_and_report
    from harness.report.text import render_text

    audit = audit_and_report(run_dir, html=not args.no_html, begun=begun, keep_rows=False)
    audit.judged.remove()  # read no more (and entry() ends the process without a collection)
    _say(render_text(audit.summary))
    _say(f"\nreport: {run_dir / rundir.REPORT_MD}")
    return 0 if audit.gate_passed else EXIT_GATE_FAILED


def cmd_explain(args: argparse.Namespace) -> int:
    """The story of one intent, or of the first intent of each kind of finding."""
    from harness.audit.auditor import audit_run, story_of
    from harness.report.stories import explain, story_lines

    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    if args.intent is not None and not 0 <= args.intent < 2**62:
        raise UsageError(f"explain: intent {args.intent} is no intent's index (they count from 0)")
    audit = audit_run(run_dir)
    if args.intent is None:
        _say(explain(audit.summary))
    else:
        _say("\n".join(story_lines(story_of(audit, args.intent))))
    return 0


def cmd_export_otlp(args: argparse.Namespace) -> int:
    """The run's intents and attempts as OTLP spans, to a collector on this machine or a file."""
    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    path = _output(args.file, "--file")
    try:  # the SDK is an optional extra, imported only by this command
        from harness import otlp
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"export-otlp needs the OpenTelemetry SDK ({exc.name} is missing): pip install 'mcp-chaos[otlp]'"
        ) from None
    if path is not None:
        done, where = otlp.export_file(run_dir, path), str(path)
    else:
        done, where = otlp.export_endpoint(run_dir, args.endpoint), otlp.collector_url(args.endpoint)
    _say(f"exported {done.spans} spans of {done.traces} intents (one trace each) to {where}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from harness.faults.describe import describe_plan
    from harness.runner import check_environment
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    print(f"{args.scenario}: valid scenario {scenario.name!r}, seed {scenario.seed}")
    _say("\n".join(describe_plan(scenario)))
    if args.preflight:
        check_environment(scenario)
        sys.stdout.flush()
        _preflight(scenario, Path(args.results), rundir.new_run_id(scenario), [])
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from harness import reproduce

    results_dir = Path(args.results)
    modes = list(reproduce.MODES) if args.modes is None else _ids(args.modes)
    plans = reproduce.plan(Path(args.scenario), modes, args.runs, _overrides(args))
    started = time.monotonic()
    run_dirs: list[Path] = []
    running = reproduce.run_plan(
        plans,
        results_dir,
        run_dirs,
        preflight_first=not args.no_preflight,
        progress_interval_s=None if args.quiet else 1.0,
    )
    variants = reproduce.audit(_drive(running, run_dirs))
    seconds = time.monotonic() - started
    saved = reproduce.write_reports(results_dir, variants, seconds)
    _say(reproduce.table(variants))
    print(f"\nwall time {seconds:.0f}s; table saved to {saved}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Remove what a SIGKILLed harness left: its temporary PostgreSQL clusters, init's throwaway
    directories and audits' temporary files (which belong to no run: only without ``--run``), and
    containers (by label)."""
    from harness.audit import scratch
    from harness.init.connect import remove_stale_probes
    from harness.pods.container import docker_client, remove_containers
    from harness.services import remove_stale_clusters

    for path in remove_stale_clusters(args.run):
        print(f"removed temporary PostgreSQL cluster {path}")
    for path in remove_stale_probes() if args.run is None else ():
        print(f"removed init's temporary directory {path}")
    for path in scratch.remove_stale() if args.run is None else ():
        print(f"removed a killed audit's temporary directory {path}")
    try:
        client = docker_client()
    except TargetError as exc:
        print(f"containers not checked: {exc.message}")
        return 0
    try:
        removed, kept = remove_containers(client, args.run, force=args.force)
    finally:
        client.close()
    for name in removed:
        print(f"removed container {name}")
    for name in kept:
        print(f"kept container {name}: its harness still runs (--force removes it anyway)")
    print(f"{len(removed)} container(s) removed")
    return 0


def _pairs(values: Sequence[str] | None, sep: str, flag: str) -> dict[str, str]:
    pairs = {}
    for item in values or ():
        name, found, value = item.partition(sep)
        if not found or not name.strip():
            raise UsageError(f"{flag} {item!r} is not NAME{sep}VALUE")
        pairs[name.strip()] = value.strip() if sep == ":" else value
    return pairs


async def _ask(names: Sequence[str]) -> str:
    """Which tool to test, asked at a terminal (``init`` only asks where one is attached)."""
    for number, name in enumerate(names, 1):
        _say(f"  {number}. {name}", err=True)
    while True:
        sys.stderr.write(f"Which tool should the workload call? [1-{len(names)}, default 1] ")
        sys.stderr.flush()
        answer = (await _typed_line()).strip() or "1"
        if answer.isdigit() and 1 <= int(answer) <= len(names):
            return names[int(answer) - 1]
        if answer in names:
            return answer


async def _typed_line() -> str:
    """A line typed at the terminal, read without blocking the event loop: ``input()`` would hold it,
    and Ctrl-C with it, until Enter."""
    import asyncio

    loop = asyncio.get_running_loop()
    typed: asyncio.Future[bytes] = loop.create_future()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not typed.done():
            typed.set_result(os.read(fd, 4096))

    loop.add_reader(fd, readable)
    try:
        line = await typed
    finally:
        loop.remove_reader(fd)
    if not line:
        raise UsageError("no tool was chosen (end of input); name it with --tool")
    return line.decode(errors="replace")


def cmd_init(args: argparse.Namespace) -> int:
    from harness.init import Origin, init_scenario

    output = Path(args.output)
    if output.is_dir():
        raise UsageError(f"-o {args.output}: is a directory; name a file")
    if output.exists() and not args.force:
        raise UsageError(f"{output} already exists; pass -o with another file, or --force to overwrite it")
    origin = Origin(
        image=args.image,
        command=args.command_line,
        url=args.url,
        transport=args.transport,
        env=_pairs(args.env, "=", "--env"),
        headers=_pairs(args.header, ":", "--header"),
    )
    doing = f"asking {origin.url}" if origin.url else f"starting {origin.describe()}"
    sys.stderr.write(f"init: {doing} for its tools ...\n")
    prompt = _ask if sys.stdin.isatty() and sys.stderr.isatty() else None

    def say(line: str) -> None:
        _say(line, err=True)

    text = _drive(init_scenario(origin, name=args.name, tool=args.tool, prompt=prompt, say=say), [])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    todos = sum(1 for line in text.splitlines() if "TODO" in line)
    print(
        f"wrote {output}"
        + (f": do what its {todos} TODO line(s) say and delete them, then" if todos else "; next:")
    )
    print(f"  mcp-chaos validate --preflight {output}")
    print(f"  mcp-chaos run {output}")
    return 0


def cmd_contract(args: argparse.Namespace) -> int:
    from harness.contract import run_contract, select
    from harness.contract.report import (
        CONTRACT_JSON,
        CONTRACT_MD,
        all_kept,
        junit,
        summary_line,
        terminal_table,
        write_reports,
    )
    from harness.runner import check_environment
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    junit_path, json_path = _output(args.junit, "--junit"), _output(args.json, "--json")
    snapshot = _output(args.snapshot, "--snapshot")
    check_environment(scenario)
    ids = select(_ids(args.only), _ids(args.skip))
    if not ids:
        raise UsageError("--only and --skip leave no check to run")
    if args.handle_wait < 0:
        raise UsageError(f"--handle-wait {args.handle_wait:g}: give the seconds to wait, 0 or more")
    if args.crash_repeat < 1 or args.crash_max_points < 1:
        raise UsageError("--crash-repeat and --crash-max-points must be at least 1")
    if args.catalog_cost and (args.only or args.skip):
        raise UsageError("--catalog-cost measures the catalog and runs no check; drop --only and --skip")
    run_dir = rundir.prepare_run_dir(
        Path(args.results), scenario, args.run_id or f"{rundir.new_run_id(scenario)}-contract"
    )
    if args.catalog_cost:
        return _catalog_cost(scenario, run_dir, args.style_env)
    sys.stderr.write(f"contract {run_dir.name}: {len(ids)} checks of {scenario.workload.tool}\n")

    def progress(result: CheckResult, seconds: float) -> None:
        sys.stderr.write(f"  {result.id}: {result.verdict.value} ({seconds:.1f}s)\n")

    started = time.monotonic()
    crash_env = _pairs(args.crash_env, "=", "--crash-env")
    checking = run_contract(
        scenario,
        run_dir,
        ids,
        crash_env=crash_env,
        token_budget=args.token_budget,
        snapshot=snapshot,
        handle_wait_s=args.handle_wait,
        crash_repeat=args.crash_repeat,
        crash_max_points=args.crash_max_points,
        on_result=progress,
    )
    results = _drive(checking, [])
    seconds = time.monotonic() - started
    write_reports(run_dir, results, scenario=scenario.name, seconds=seconds)
    if junit_path is not None:
        junit_path.write_text(junit(results, scenario=scenario.name, seconds=seconds), encoding="utf-8")
    if json_path is not None:  # the document write_reports wrote as contract.json
        json_path.write_bytes((run_dir / CONTRACT_JSON).read_bytes())
    _say(terminal_table(results))
    _say(f"\n{summary_line(results, seconds)}\nreport: {run_dir / CONTRACT_MD}")
    return 0 if all_kept(results) else EXIT_GATE_FAILED


def _catalog_cost(scenario: Scenario, run_dir: Path, env: str) -> int:
    """The catalog's tokens in the three styles, the target started once per style."""
    from harness.contract import cost

    sys.stderr.write(f"contract {run_dir.name}: the catalog in {', '.join(cost.STYLES)} ({env}=<style>)\n")
    started = time.monotonic()
    measured = _drive(cost.measure(scenario, run_dir, env), [])
    cost.write_reports(run_dir, measured, scenario=scenario.name)
    _say(cost.render_table(measured))
    _say(f"\n{cost.render_ratios(measured)}")
    print(f"\nmeasured in {time.monotonic() - started:.1f}s; report: {run_dir / cost.COST_MD}")
    return 0


def cmd_crashpoints(args: argparse.Namespace) -> int:
    """Kill the target at every point of a call, R times each; exit 1 when a point has a finding."""
    from harness.crashpoints import emit as crash_emit
    from harness.crashpoints import explore as crash_explore
    from harness.crashpoints import render as crash_render
    from harness.runner import check_environment
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    json_path = _output(args.json, "--json")
    emit = _output_dir(args.emit, "--emit")
    if args.repeat < 1 or args.max_points < 1:
        raise UsageError("--repeat and --max-points must be at least 1")
    if (why := crash_explore.unexplorable(scenario)) is not None:
        raise ScenarioError(f"crashpoints: {why}")
    check_environment(scenario)
    only = _ids(args.only) or None
    if only is not None:
        args.max_points = max(args.max_points, len(only))
    sys.stderr.write(
        f"crashpoints: a clean call of {scenario.workload.tool}, then {args.repeat} "
        f"{'try' if args.repeat == 1 else 'tries'} per point\n"
    )
    planned = crash_explore.prepare(
        scenario,
        Path(args.results),
        repeat=args.repeat,
        max_points=args.max_points,
        only=only,
        run_id=args.run_id,
    )
    progress = None if args.quiet else 1.0
    found = _drive(crash_explore.explore(planned, progress_interval_s=progress), [planned.run_dir])
    report = crash_render.write_reports(found)
    if json_path is not None:
        json_path.write_text(crash_render.json_text(found), encoding="utf-8")
    if emit is not None:
        for path in crash_emit.write_tests(found, emit):
            sys.stderr.write(f"wrote {path}\n")
    _say(crash_render.render_terminal(found))
    print(f"report: {report}")
    if found.findings or found.unavailable:
        return EXIT_GATE_FAILED
    if found.inconclusive and not args.allow_inconclusive:
        _say("crashpoints: inconclusive (pass it with --allow-inconclusive)", err=True)
        return EXIT_GATE_FAILED
    return 0


def cmd_trend(args: argparse.Namespace) -> int:
    """The trend table; exit 1 when the newest run of a scenario moved beyond its interval."""
    from harness.report import trend

    path = Path(args.file)
    output = _output(args.output, "-o")
    table, moved = trend.render(path)
    _say(table)
    if output is not None:
        trend.write_output(path, output)
    if moved:
        print(
            "\nthe newest run's interval does not overlap the previous run's: the rate moved", file=sys.stderr
        )
    return EXIT_GATE_FAILED if moved else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.report.compare import counts_of, mixed_scenarios, render_comparison, write_comparison

    run_dirs = [Path(d) for d in args.run_dirs]
    output = _output(args.output, "-o")
    runs = [counts_of(d) for d in run_dirs]
    if (warning := mixed_scenarios(runs)) is not None:
        _say(f"mcp-chaos: warning: {warning}", err=True)
    _say(render_comparison(runs))
    if output is not None:
        write_comparison(output, runs, run_dirs)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-chaos",
        description="Retry-safety chaos harness for MCP servers (2026-07-28 and 2025, HTTP and stdio).",
    )
    parser.add_argument("--version", action="version", version=f"mcp-chaos {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def scenario_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a scenario field")
        p.add_argument("--seed", type=int, help="override the scenario's seed")

    run = sub.add_parser("run", help="run a scenario, audit it and print the duplicate-rate table")
    run.add_argument("scenario", help="scenario YAML file")
    scenario_options(run)
    run.add_argument("--results", default="results", help="directory for run directories (default: results)")
    run.add_argument("--run-id", help="name of the run directory (default: time-scenario-random)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    _gate_options(run)
    run.add_argument(
        "--junit", metavar="FILE", help="also write JUnit XML: a case per gate criterion and fault"
    )
    run.add_argument(
        "--trend", metavar="FILE", help="append this run's row to a trend file (.csv or .parquet)"
    )
    run.add_argument(
        "--trend-as", metavar="SERIES", help="the trend series of this run (default: the scenario)"
    )
    run.add_argument(
        "--no-preflight", action="store_true", help="skip the one call that proves the audit sees its effect"
    )
    run.add_argument(
        "--control",
        action="store_true",
        help="first run the same workload with no faults (into <run>/control/), to compare with",
    )
    run.set_defaults(func=cmd_run)

    audit = sub.add_parser("audit", help="(re-)audit a run directory, complete or partial")
    audit.add_argument("run_dir")
    audit.add_argument("--no-html", action="store_true", help="skip report.html (its plots)")
    audit.set_defaults(func=cmd_audit)

    explain_cmd = sub.add_parser(
        "explain", help="what happened to an intent, or to the first intent of each kind of finding"
    )
    explain_cmd.add_argument("run_dir")
    explain_cmd.add_argument(
        "intent", nargs="?", type=int, help="an intent's index (default: one per finding)"
    )
    explain_cmd.set_defaults(func=cmd_explain)

    export = sub.add_parser(
        "export-otlp",
        help="a run's intents and attempts as OpenTelemetry spans (OTLP), to a local collector or a file",
    )
    export.add_argument("run_dir")
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--endpoint",
        help="an OTLP/HTTP collector on this machine (http://127.0.0.1:4318; /v1/traces unless a path given)",
    )
    where.add_argument("--file", help="write OTLP JSON lines here, as the collector's file exporter does")
    export.set_defaults(func=cmd_export_otlp)

    validate = sub.add_parser("validate", help="check a scenario file and print its fault schedule")
    validate.add_argument("scenario")
    validate.add_argument(
        "--preflight", action="store_true", help="also start the target, make one call, count its effect"
    )
    validate.add_argument("--results", default="results", help="where the preflight's run directory goes")
    scenario_options(validate)
    validate.set_defaults(func=cmd_validate)

    rep = sub.add_parser("reproduce", help="the article's experiment: naive, keyed and atomic side by side")
    rep.add_argument("--scenario", default="scenarios/pod-kill.yaml")
    rep.add_argument("--runs", type=int, default=1, help="runs per variant, pooled (consecutive seeds)")
    rep.add_argument("--modes", metavar="LIST", help="the modes to run (default: naive,keyed,atomic)")
    rep.add_argument("--results", default="results")
    rep.add_argument("--quiet", action="store_true", help="no progress line")
    rep.add_argument("--no-preflight", action="store_true", help="skip each variant's preflight call")
    scenario_options(rep)
    rep.set_defaults(func=cmd_reproduce)

    compare = sub.add_parser(
        "compare", help="runs side by side: rates, intervals, Fisher's test, sample size"
    )
    compare.add_argument("run_dirs", nargs="+", help="audited run directories; the first is the baseline")
    compare.add_argument(
        "-o", "--output", metavar="FILE", help="also write it: FILE.html (with a plot) or Markdown"
    )
    compare.set_defaults(func=cmd_compare)

    trend_cmd = sub.add_parser("trend", help="duplicate rate over runs from a trend file; exit 1 if it moved")
    trend_cmd.add_argument("file", help="a trend file written by run --trend")
    trend_cmd.add_argument(
        "-o", "--output", metavar="FILE", help="also write FILE.html (a plot) or the table"
    )
    trend_cmd.set_defaults(func=cmd_trend)

    contract = sub.add_parser("contract", help="check the promises of a retry-safe tool (no chaos needed)")
    contract.add_argument("scenario", help="scenario YAML file: its target, tool and argument template")
    contract.add_argument(
        "--only",
        metavar="ID,...",
        help="run only these checks, by id (an unknown id is an error that names them)",
    )
    contract.add_argument("--skip", metavar="ID,...", help="skip these checks")
    contract.add_argument(
        "--crash-env",
        action="append",
        metavar="NAME=VALUE",
        help="for crash_window: environment that makes the target crash between effect and key record",
    )
    contract.add_argument(
        "--crash-repeat",
        type=int,
        default=1,
        metavar="R",
        help="crash_points: tries per hold point (default 1; mcp-chaos crashpoints explores with more)",
    )
    contract.add_argument(
        "--crash-max-points",
        type=int,
        default=8,
        metavar="N",
        help="crash_points: points explored at most, the call's own first (default 8)",
    )
    contract.add_argument(
        "--token-budget", type=int, default=4000, help="catalog: most o200k_base tokens (default 4000)"
    )
    contract.add_argument(
        "--snapshot", metavar="FILE", help="catalog: compare tools/list with FILE (written when missing)"
    )
    contract.add_argument(
        "--handle-wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="handles: how long to wait for a handle to expire (default 5)",
    )
    contract.add_argument(
        "--catalog-cost",
        action="store_true",
        help="instead of the checks: the catalog's tokens written bloated, engineered and terse (the "
        "article's section 06), the target started once per style with --style-env set to the style",
    )
    contract.add_argument(
        "--style-env",
        default="INVOICES_DESCRIPTIONS",
        metavar="NAME",
        help="--catalog-cost: the target's variable that selects the style (default INVOICES_DESCRIPTIONS, "
        "the reference target's)",
    )
    contract.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one test case per check)")
    contract.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    contract.add_argument(
        "--results", default="results", help="directory for run directories (default: results)"
    )
    contract.add_argument("--run-id", help="name of the run directory")
    scenario_options(contract)
    contract.set_defaults(func=cmd_contract)

    crash = sub.add_parser(
        "crashpoints", help="hold the target at each commit of a call, kill it there, retry, judge each try"
    )
    crash.add_argument("scenario", help="scenario YAML file: its target, tool, services and effect source")
    crash.add_argument("--repeat", type=int, default=3, metavar="R", help="tries per point (default 3)")
    crash.add_argument("--only", metavar="POINT,...", help="explore only these points (db_commit#2, ...)")
    crash.add_argument(
        "--max-points",
        type=int,
        default=8,
        metavar="N",
        help="points explored at most, the call's own first, then its retries' (default 8)",
    )
    crash.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    crash.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="exit 0 when nothing was found though some point could not be proven (by default: exit 1)",
    )
    crash.add_argument(
        "--emit", metavar="DIR", help="write a reproducing scenario and a pytest file per finding into DIR"
    )
    crash.add_argument(
        "--results", default="results", help="directory for run directories (default: results)"
    )
    crash.add_argument("--run-id", help="name of the run directory")
    crash.add_argument("--quiet", action="store_true", help="no progress line")
    scenario_options(crash)
    crash.set_defaults(func=cmd_crashpoints)

    init = sub.add_parser("init", help="start a server, list its tools and draft a scenario for it")
    where = init.add_mutually_exclusive_group(required=True)
    where.add_argument("--image", help="a Docker image whose server the harness starts")
    where.add_argument(
        "--command", dest="command_line", help='the command that starts it, e.g. "python server.py"'
    )
    where.add_argument(
        "--url", help="a server already serving MCP over HTTP (its start command is left as TODO)"
    )
    init.add_argument("--transport", choices=["http", "stdio"], default="http")
    init.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment for the server")
    init.add_argument(
        "--header",
        action="append",
        metavar="NAME:VALUE",
        help="in single quotes, so the scenario keeps the variable: 'Authorization: Bearer ${TOKEN}'",
    )
    init.add_argument("--tool", help="the tool the workload calls (default: asked, or the likeliest)")
    init.add_argument("--name", help="the scenario's name")
    init.add_argument(
        "-o", "--output", default="scenario.yaml", help="where to write it (default: scenario.yaml)"
    )
    init.add_argument("--force", action="store_true", help="overwrite the output file")
    init.set_defaults(func=cmd_init)

    cleanup = sub.add_parser(
        "cleanup",
        help="remove what a killed harness left: PostgreSQL clusters, init's and audits' files, containers",
    )
    cleanup.add_argument("--run", help="only those of this run id")
    cleanup.add_argument("--force", action="store_true", help="also those of runs whose harness still runs")
    cleanup.set_defaults(func=cmd_cleanup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (``sys.argv[1:]`` by default); its exit code."""
    return _command(build_parser().parse_args(argv))


QUICK_EXIT = ("audit",)
"""Commands after which :func:`entry` ends the process without Python's teardown."""


def entry() -> NoReturn:
    """The ``mcp-chaos`` console script and ``python -m harness.cli``: :func:`main`, then the exit.

    After ``audit`` the process ends without Python tearing down the modules it
    imported (pandas, Arrow, DuckDB): 0.12 s of a million-intent audit's 2.9, spent
    on nothing, as mypy ends its runs. By then the audit has closed what it opened
    and removed its temporary files, and the output is flushed. Other commands exit
    as usual: a run's services stop in their own exit handlers.
    """
    args = build_parser().parse_args()
    code = _command(args)
    if args.command in QUICK_EXIT:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # a reader gone (| head): nothing more to tell it
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _command(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
        return code
    except _Interrupted as exc:
        for run_dir in exc.run_dirs:
            print(
                f"\nmcp-chaos: interrupted; the partial run is in {run_dir} "
                f"(audit it with: mcp-chaos audit {run_dir})",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        # Outside a run (validate, audit, cleanup) there is no partial run to point at; reports are
        # written through renames, so an interrupted audit leaves the previous ones whole.
        print(f"\nmcp-chaos: interrupted during {args.command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except HarnessError as exc:
        _say(f"mcp-chaos: error: {exc.message}", err=True)
        if exc.details:
            _say("\n".join("  | " + line for line in exc.details.splitlines()), err=True)
        return exc.exit_code


if __name__ == "__main__":
    entry()
