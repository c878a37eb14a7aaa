"""``mcp-chaos contract``: the promises of a retry-safe tool checked by calls, or
``--catalog-cost``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.arguments import ids, pairs
from harness.cli.common import EXIT_GATE_FAILED, drive, say
from harness.cli.options import add_explore_options, add_scenario_options, explore_options, overrides
from harness.cli.outputs import output_file, writing
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands
    from harness.contract import CheckResult
    from harness.scenario import Scenario


def add(sub: Commands) -> None:
    """The command's arguments."""
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
    explore = contract.add_argument_group(
        "crash_points", "how the crash_points check explores: the options of mcp-chaos crashpoints"
    )
    add_explore_options(explore, "contract")  # type: ignore[arg-type]
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
    add_scenario_options(contract)
    contract.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
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
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    explore = explore_options(args, "contract")
    scenario = load_scenario(args.scenario, overrides(args))
    junit_path, json_path = output_file(args.junit, "--junit"), output_file(args.json, "--json")
    snapshot = output_file(args.snapshot, "--snapshot")
    check_environment(scenario)
    chosen = select(ids(args.only), ids(args.skip))
    if not chosen:
        raise UsageError("--only and --skip leave no check to run")
    if args.handle_wait < 0:
        raise UsageError(f"--handle-wait {args.handle_wait:g}: give the seconds to wait, 0 or more")
    if args.catalog_cost and (args.only or args.skip):
        raise UsageError("--catalog-cost measures the catalog and runs no check; drop --only and --skip")
    run_dir = rundir.prepare_run_dir(
        Path(args.results), scenario, args.run_id or f"{rundir.new_run_id(scenario)}-contract"
    )
    if args.catalog_cost:
        return _catalog_cost(scenario, run_dir, args.style_env)
    sys.stderr.write(f"contract {run_dir.name}: {len(chosen)} checks of {scenario.workload.tool}\n")

    def progress(result: CheckResult, seconds: float) -> None:
        sys.stderr.write(f"  {result.id}: {result.verdict.value} ({seconds:.1f}s)\n")

    started = time.monotonic()
    crash_env = pairs(args.crash_env, "=", "--crash-env")
    checking = run_contract(
        scenario,
        run_dir,
        chosen,
        crash_env=crash_env,
        token_budget=args.token_budget,
        snapshot=snapshot,
        handle_wait_s=args.handle_wait,
        explore=explore,
        on_result=progress,
    )
    results = drive(checking, [])
    seconds = time.monotonic() - started
    write_reports(run_dir, results, scenario=scenario.name, seconds=seconds)
    if junit_path is not None:
        with writing(junit_path, "--junit"):
            junit_path.write_text(junit(results, scenario=scenario.name, seconds=seconds), encoding="utf-8")
    if json_path is not None:  # the document write_reports wrote as contract.json
        document = (run_dir / CONTRACT_JSON).read_bytes()
        with writing(json_path, "--json"):
            json_path.write_bytes(document)
    say(terminal_table(results))
    say(f"\n{summary_line(results, seconds)}\nreport: {run_dir / CONTRACT_MD}")
    return 0 if all_kept(results) else EXIT_GATE_FAILED


def _catalog_cost(scenario: Scenario, run_dir: Path, env: str) -> int:
    """The catalog's tokens in the three styles, the target started once per style."""
    from harness.contract import cost

    sys.stderr.write(f"contract {run_dir.name}: the catalog in {', '.join(cost.STYLES)} ({env}=<style>)\n")
    started = time.monotonic()
    measured = drive(cost.measure(scenario, run_dir, env), [])
    cost.write_reports(run_dir, measured, scenario=scenario.name)
    say(cost.render_table(measured))
    say(f"\n{cost.render_ratios(measured)}")
    print(f"\nmeasured in {time.monotonic() - started:.1f}s; report: {run_dir / cost.COST_MD}")
    return 0
