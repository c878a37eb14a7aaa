"""``mcp-chaos run``: a scenario run, audited, its table printed; exit 1 when its gate fails."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import EXIT_GATE_FAILED, drive, preflight_call, say
from harness.cli.options import add_gate_options, add_scenario_options, overrides
from harness.cli.outputs import append_step_summary, output_file, step_summary_path, writing

if TYPE_CHECKING:
    from harness.audit.auditor import AuditResult
    from harness.cli.options import Commands
    from harness.remembered import Folder, Told
    from harness.replay import Replayed
    from harness.scenario import Scenario


def add(sub: Commands) -> None:
    """The command's arguments."""
    run = sub.add_parser("run", help="run a scenario, audit it and print the duplicate-rate table")
    run.add_argument("scenario", help="scenario YAML file")
    add_scenario_options(run)
    run.add_argument("--results", default="results", help="directory for run directories (default: results)")
    run.add_argument("--run-id", help="name of the run directory (default: time-scenario-random)")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    add_gate_options(run)
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
    run.add_argument(
        "--findings",
        metavar="DIR",
        help="where findings are remembered and replayed first by the next run (default: <results>/findings)",
    )
    run.add_argument(
        "--no-findings",
        action="store_true",
        help="neither replay remembered findings nor remember this run's",
    )
    run.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from harness import remembered
    from harness.faults.describe import announcement
    from harness.report import trend
    from harness.report.junit import run_junit
    from harness.report.text import render_step_summary, render_text
    from harness.run import control
    from harness.run.runner import check_environment, run_and_audit
    from harness.scenario import load_scenario

    scenario = load_scenario(args.scenario, overrides(args))
    summary_path, junit_path = step_summary_path(), output_file(args.junit, "--junit")
    trend_path = output_file(args.trend, "--trend", makes_dirs=True)  # a nightly's starts its folder
    check_environment(scenario)
    folder = None if args.no_findings else remembered.folder_for(args.findings, Path(args.results), scenario)
    run_dir = rundir.prepare_run_dir(Path(args.results), scenario, args.run_id)
    if not args.no_preflight:
        preflight_call(scenario, run_dir, run_dir.name, [run_dir])
    pairs, failing = ([], []) if folder is None else replay_remembered(folder, scenario, run_dir)
    progress = None if args.quiet else 1.0
    if args.control:
        sys.stderr.write(f"control: {scenario.workload.intents} intents with no faults first ...\n")
        sys.stderr.flush()
        baseline = drive(control.run_control(scenario, run_dir, progress_interval_s=progress), [run_dir])
        sys.stderr.write(control.describe(baseline) + "\n")
    sys.stderr.write(announcement(scenario, run_dir.name) + "\n")
    sys.stderr.flush()
    audit = drive(run_and_audit(scenario, run_dir, progress_interval_s=progress), [run_dir])
    told = ""
    if folder is not None and (pairs or folder.skipped):  # where the run's reader looks, beside its own
        told = remembered.markdown(pairs, folder, failing)
        report = run_dir / rundir.REPORT_MD
        with writing(report, "the report"), open(report, "a", encoding="utf-8") as file:
            file.write("\n" + told)
    append_step_summary(summary_path, render_step_summary(audit.summary) + (told + "\n" if told else ""))
    if junit_path is not None:
        junit_xml = run_junit(audit.summary, audit.summary.duration_s, remembered.cases(pairs, failing))
        with writing(junit_path, "--junit"):
            junit_path.write_text(junit_xml, encoding="utf-8")
    if trend_path is not None:
        with writing(trend_path, "--trend"):
            trend.append(trend_path, audit, args.trend_as)
    say(render_text(audit.summary))
    say(f"\nreport: {run_dir / rundir.REPORT_MD}")
    if folder is not None:
        remember(folder, scenario, audit)
    if failing:
        told = ", ".join(f"{r.verdict} at {r.point}" for r in failing)
        say(f"gate: failed by remembered findings still failing: {told} (exit {EXIT_GATE_FAILED})")
    return 0 if audit.gate_passed and not failing else EXIT_GATE_FAILED


def replay_remembered(folder: Folder, scenario: Scenario, run_dir: Path) -> tuple[list[Told], list[Replayed]]:
    """The findings remembered for the scenario, replayed first: each beside its replay, and those still
    failing that fail the gate."""
    from harness import remembered

    known, replays = drive(remembered.replay_remembered(folder, scenario, run_dir, out=sys.stderr), [run_dir])
    if not known and not folder.skipped:
        return [], []
    pairs = remembered.told(replays, known)
    say(remembered.describe(pairs, folder), err=True)
    failing = remembered.outcome(pairs, folder)
    return pairs, [r for r in failing if scenario.gate.fails_at_first(r.verdict)]


def remember(folder: Folder, scenario: Scenario, audit: AuditResult) -> None:
    """Save the run's findings a replay can make again, for the next run to replay first."""
    from harness.replay import findings_of

    saved = folder.remember(audit.run_dir, scenario, findings_of(audit))
    if saved:
        say(f"remembered: {len(saved)} finding(s) in {folder.path} (the next run replays them first)")
