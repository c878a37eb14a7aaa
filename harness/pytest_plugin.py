"""The pytest plugin (entry point ``pytest11``, name ``mcp_chaos``): where users' tests already are.

- ``pytest --mcp-chaos-contract SCENARIO [--mcp-chaos-only CHECK,...]``, in any folder, with or
  without test files: each contract check is a test item (``contract::twins``, ...). A failed
  check fails its item with the check's why and evidence, a check that does not apply is skipped
  with its reason, a check that could not finish (``error``) is an error, so ``--junitxml``
  gives one case per check. The checks share one target, started once, as ``mcp-chaos
  contract`` does: the first item starts it and each item runs the event loop until its own
  check has concluded (:class:`SteppedContract`), so each item's time is its check's.
- The ``mcp_chaos`` fixture (:class:`McpChaos`) for users' own tests: ``.run(scenario,
  **overrides)`` returns the run's typed :class:`~harness.audit.summary.Summary`, and
  ``.contract(scenario, only=...)`` the checks' results, each check run once per session
  for a scenario and its overrides.

The ``crash_points`` check explores as ``mcp-chaos crashpoints`` does, with the same options
(``--mcp-chaos-repeat``, ``--mcp-chaos-budget``, ``--mcp-chaos-power-loss`` /
``--mcp-chaos-no-power-loss``, ``--mcp-chaos-jobs``): the one table of
:mod:`harness.crashpoints.options`, rendered here with the plugin's prefix; they apply to the
items and to the fixture's ``.contract()``.

Every pytest run in an environment that has mcp-chaos installed loads this module, this
project's own test suite included: at load time it imports only pytest, the standard library
and that table (standard library only; ``harness/__init__.py`` imports its names lazily for
the same reason), and it adds nothing to a session until its options or its fixture are used.

A check's why and evidence quote the server: they arrive redacted and cut
(:func:`harness.contract.told`) and pass :func:`harness.sanitize.terminal` before pytest
prints them (pytest's own JUnit writer escapes for XML).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from harness.audit.summary import Summary
    from harness.contract import CheckResult
    from harness.crashpoints.options import ExploreOptions
    from harness.scenario import Scenario

ScenarioSource = str | os.PathLike[str] | Mapping[str, Any]
"""A scenario file, or a scenario already parsed from YAML (relative paths: the working directory's)."""

SUITE = "contract"
"""The collector of the contract's items: their node ids read ``contract::<check>``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcp-chaos", "mcp-chaos: retry-safety checks of an MCP server")
    group.addoption(
        "--mcp-chaos-contract",
        metavar="SCENARIO",
        help="run the scenario's contract checks, one test item each (contract::twins, ...)",
    )
    group.addoption(
        "--mcp-chaos-only",
        metavar="CHECK,...",
        help="with --mcp-chaos-contract: only these checks (replay,twins,...)",
    )
    group.addoption(
        "--mcp-chaos-set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="with --mcp-chaos-contract: override a scenario field, as mcp-chaos --set does",
    )
    group.addoption(
        "--mcp-chaos-crash-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --mcp-chaos-contract: for crash_window, environment that makes the target crash "
        "between its effect and its key record, as mcp-chaos contract --crash-env",
    )
    from harness.crashpoints.options import SPECS

    for spec in SPECS:  # the exploration's options, as every command that explores names them
        if spec.kind == "flag":
            for flag, value in ((spec.name, True), (f"no-{spec.name}", False)):
                group.addoption(
                    f"--mcp-chaos-{flag}",
                    dest=f"mcp_chaos_{spec.field}",
                    action="store_const",
                    const=value,
                    default=None,
                    help=f"crash_points: {spec.help}" if value else argparse.SUPPRESS,
                )
        else:
            group.addoption(
                f"--mcp-chaos-{spec.name}",
                dest=f"mcp_chaos_{spec.field}",
                metavar=spec.metavar,
                help=f"crash_points: {spec.help}",
            )
    group.addoption(
        "--mcp-chaos-results",
        default="results",
        metavar="DIR",
        help="where contract and run directories go (default: results)",
    )


@dataclass
class _Session:
    """What the plugin keeps for one pytest session: the contract's plan and what it made."""

    results: Path
    source: Path | None = None
    """The scenario file of --mcp-chaos-contract."""
    scenario: Scenario | None = None
    checks: list[str] = field(default_factory=list)
    crash_env: dict[str, str] = field(default_factory=dict)
    explore: ExploreOptions | None = None
    """How crash_points explores (``--mcp-chaos-repeat``, ...); None: the defaults."""
    contract: SteppedContract | None = None
    made: list[Path] = field(default_factory=list)
    """Contract and run directories made this session, for the terminal summary."""


_SESSION = pytest.StashKey[_Session]()


def pytest_configure(config: pytest.Config) -> None:
    results = config.invocation_params.dir / config.getoption("mcp_chaos_results")
    state = config.stash[_SESSION] = _Session(results)
    state.explore = _explore_options(config)
    path = config.getoption("mcp_chaos_contract")
    if path is None:
        if any(config.getoption(f"mcp_chaos_{name}") for name in ("only", "set", "crash_env")):
            raise pytest.UsageError(
                "--mcp-chaos-only, --mcp-chaos-set and --mcp-chaos-crash-env "
                "go with --mcp-chaos-contract SCENARIO"
            )
        return
    from harness.arguments import ids, pairs
    from harness.contract import select
    from harness.errors import HarnessError
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario

    state.source = config.invocation_params.dir / path
    try:
        state.scenario = load_scenario(state.source, config.getoption("mcp_chaos_set"))
        check_environment(state.scenario)
        state.checks = select(ids(config.getoption("mcp_chaos_only")), [])
        state.crash_env = pairs(config.getoption("mcp_chaos_crash_env"), "=", "--mcp-chaos-crash-env")
    except HarnessError as exc:
        raise pytest.UsageError(_said(f"mcp-chaos: {exc.message}")) from None


def _explore_options(config: pytest.Config) -> ExploreOptions | None:
    """The exploration's options given on the command line, checked; None where none was given."""
    from harness.crashpoints.options import SPECS, read_options

    given = {spec.field: config.getoption(f"mcp_chaos_{spec.field}") for spec in SPECS}
    if all(value is None for value in given.values()):
        return None
    from harness.errors import HarnessError

    try:
        return read_options(given, prefix="--mcp-chaos-")
    except HarnessError as exc:
        raise pytest.UsageError(_said(f"mcp-chaos: {exc.message}")) from None


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: they apply to the checks too
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    state = session.config.stash[_SESSION]
    if state.scenario is None:
        return
    suite = ContractSuite.from_parent(session, name=SUITE, nodeid=SUITE)
    checks = [ContractCheck.from_parent(suite, name=check) for check in state.checks]
    items.extend(checks)
    # Reported as collected, as a file's items are: "collected 11 items", and -k counts them.
    session.ihook.pytest_collectreport(report=pytest.CollectReport(SUITE, "passed", None, [*checks]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session stopped early (``-x``, Ctrl-C) stops the target its contract started."""
    state = session.config.stash.get(_SESSION, None)
    if state is not None and state.contract is not None:
        state.contract.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None or not any(path.exists() for path in state.made):
        return
    terminalreporter.write_sep("-", "mcp-chaos")
    for path in state.made:
        if path.exists():  # a contract whose target never came up wrote no report
            terminalreporter.write_line(_said(str(path)))


class ContractSuite(pytest.Collector):
    """The contract's checks, made by the plugin rather than collected from a file."""

    def collect(self) -> list[pytest.Item]:  # pragma: no cover - the items are made at collection's end
        return []


class ContractCheck(pytest.Item):
    """One contract check: passes, fails with its evidence, is skipped (does not apply), or errors."""

    def reportinfo(self) -> tuple[Path, int, str]:
        source = self.config.stash[_SESSION].source
        assert source is not None
        return source, 0, f"{SUITE}::{self.name}"

    def setup(self) -> None:
        from harness.contract import CheckVerdict
        from harness.errors import HarnessError

        stopped: HarnessError | None = None
        try:
            result = self._contract().result(self.name)
        except HarnessError as exc:  # the contract could not run (the target never came up): redacted
            stopped = exc
        if stopped is not None:  # failed outside the except: no "during handling" chain in the report
            details = f"\n{stopped.details}" if stopped.details else ""
            pytest.fail(_said(f"mcp-chaos: {stopped.message}{details}"), pytrace=False)
        if result.verdict is CheckVerdict.ERROR:
            pytest.fail(_said(f"{result.title}: could not finish: {result.why}"), pytrace=False)
        if result.verdict is CheckVerdict.NOT_APPLICABLE:
            # Located at the scenario (reportinfo), as a skip mark's skip is, not at this line.
            reason = _said(f"{self.name} does not apply: {result.why}")
            raise pytest.skip.Exception(reason, _use_item_location=True)

    def runtest(self) -> None:
        from harness.contract import CheckVerdict

        result = self._contract().result(self.name)
        if result.verdict is CheckVerdict.FAIL:
            pytest.fail(_said(failure_text(result)), pytrace=False)

    def _contract(self) -> SteppedContract:
        """The session's contract, started by the first of its items that runs."""
        state = self.config.stash[_SESSION]
        if state.contract is None:
            from harness import rundir

            assert state.scenario is not None
            checks = [item.name for item in self.session.items if isinstance(item, ContractCheck)]
            run_id = f"{rundir.new_run_id(state.scenario)}-contract"
            run_dir = rundir.prepare_run_dir(state.results, state.scenario, run_id)
            state.made.append(run_dir / "contract.md")
            state.contract = SteppedContract(
                state.scenario, run_dir, checks, crash_env=state.crash_env, explore=state.explore
            )
        return state.contract


class SteppedContract:
    """One contract run on one target, stepped by its callers: :meth:`result` runs the event loop
    until that check has concluded, then hands control back with the target still up.

    The loop is this object's own (pytest runs no loop); between two steps nothing of the
    contract runs. After the last check the target is stopped and contract.md and
    contract.json are written, as ``mcp-chaos contract`` writes them.
    """

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        checks: Sequence[str],
        *,
        crash_env: Mapping[str, str],
        explore: ExploreOptions | None = None,
    ) -> None:
        from harness.contract import run_contract

        self.scenario = scenario
        self.run_dir = run_dir
        self.checks = list(checks)
        self.results: dict[str, CheckResult] = {}
        self._started = time.monotonic()
        from harness import eventloop

        self._loop = eventloop.new_loop()
        self._arrived: asyncio.Future[None] | None = None
        crashing = dict(crash_env)
        checking = run_contract(
            scenario, run_dir, self.checks, crash_env=crashing, explore=explore, on_result=self._got
        )
        self._task: asyncio.Task[list[CheckResult]] = self._loop.create_task(checking)

    def _got(self, result: CheckResult, seconds: float) -> None:
        self.results[result.id] = result
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def _until(self, check: str) -> None:
        while check not in self.results and not self._task.done():
            self._arrived = asyncio.get_running_loop().create_future()
            waits: list[asyncio.Future[Any]] = [self._task, self._arrived]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)

    def result(self, check: str) -> CheckResult:
        """The check's result, running the contract until it concluded; the harness error (redacted)
        when the contract stopped before it (the target never came up)."""
        if check not in self.results and not self._loop.is_closed():
            with _libraries_quiet():
                self._loop.run_until_complete(self._until(check))
        if check not in self.results:
            exc = self._task.exception() if self._task.done() and not self._task.cancelled() else None
            raise exc or RuntimeError(f"the contract stopped before {check}")
        if len(self.results) == len(self.checks):
            self.close()
        return self.results[check]

    def all(self) -> list[CheckResult]:
        return [self.result(check) for check in self.checks]

    def close(self) -> None:
        """Stop the target (cancelling what is left), write the reports of the checks that concluded,
        close the loop. Idempotent."""
        if self._loop.is_closed():
            return
        from harness.contract.report import write_reports

        if not self._task.done():
            if len(self.results) < len(self.checks):
                self._task.cancel()
            with _libraries_quiet():
                self._loop.run_until_complete(asyncio.gather(self._task, return_exceptions=True))
        elif not self._task.cancelled():
            self._task.exception()  # retrieved: it is raised to the items, never "never retrieved"
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()
        if self.results:
            done = [self.results[c] for c in self.checks if c in self.results]
            seconds = time.monotonic() - self._started
            write_reports(self.run_dir, done, scenario=self.scenario.name, seconds=seconds)


class McpChaos:
    """The ``mcp_chaos`` fixture: whole runs and contract checks of scenarios, from users' tests.

    Harness errors (a bad scenario, a target that never comes up, a preflight whose effect the
    audit cannot see) are raised as :class:`harness.errors.HarnessError`; findings are data in
    what the methods return, for the test to assert on.
    """

    def __init__(
        self, results: Path, made: list[Path] | None = None, explore: ExploreOptions | None = None
    ) -> None:
        self.results = results
        """Where run and contract directories go (``--mcp-chaos-results``, default ``results``)."""
        self.explore = explore
        """How ``.contract()``'s crash_points explores unless told (``--mcp-chaos-repeat``, ...)."""
        self._made = made if made is not None else []
        self._checked: dict[str, dict[str, CheckResult]] = {}

    def run(self, scenario: ScenarioSource, *, preflight: bool = True, **overrides: Any) -> Summary:
        """Run the scenario, audit it, write its reports; the run's typed summary (``verdicts``,
        ``rates``, ``causes``, ``headline``, ``gate``). ``overrides`` set scenario fields, ``__``
        for a dot: ``workload__intents=200`` is ``--set workload.intents=200``. Like ``mcp-chaos
        run``, one real call first (``preflight=False`` skips it) proves the audit counts effects."""
        from harness import eventloop, rundir
        from harness.run import preflight as checked
        from harness.run.runner import run_and_audit

        loaded = _load(scenario, overrides)
        run_dir = rundir.prepare_run_dir(self.results, loaded)
        self._made.append(run_dir)
        with _libraries_quiet():
            if preflight:
                eventloop.run(checked.preflight(loaded, run_dir, run_dir.name))
            audit = eventloop.run(run_and_audit(loaded, run_dir, progress_interval_s=None))
        return audit.summary

    def contract(
        self,
        scenario: ScenarioSource,
        *,
        only: str | Sequence[str] | None = None,
        crash_env: Mapping[str, str] | None = None,
        explore: ExploreOptions | None = None,
        **overrides: Any,
    ) -> list[CheckResult]:
        """The contract checks' results (all, or ``only`` these ids), in suite order. Each check runs
        once per session for a scenario and its overrides: the checks not run yet for it run
        together on one target, started once, and the others come from the earlier call.
        ``crash_env`` is ``mcp-chaos contract --crash-env`` (for ``crash_window``); ``explore``, how
        crash_points explores (default: the session's ``--mcp-chaos-repeat``, ...)."""
        from harness import rundir
        from harness.arguments import ids
        from harness.contract import select

        checks = select(ids(only) if isinstance(only, str) else list(only or ()), [])
        explore = explore or self.explore
        told = {**overrides, "--crash-env": crash_env, "--explore": repr(explore)}
        known = self._checked.setdefault(_identity(scenario, told), {})
        missing = [check for check in checks if check not in known]
        if missing:
            loaded = _load(scenario, overrides)
            run_dir = rundir.prepare_run_dir(self.results, loaded, f"{rundir.new_run_id(loaded)}-contract")
            self._made.append(run_dir / "contract.md")
            contract = SteppedContract(loaded, run_dir, missing, crash_env=crash_env or {}, explore=explore)
            try:
                known.update((r.id, r) for r in contract.all())
            finally:
                contract.close()
        return [known[check] for check in checks]


@pytest.fixture(scope="session")
def mcp_chaos(pytestconfig: pytest.Config) -> McpChaos:
    """Runs and contract checks of scenarios (:class:`McpChaos`), once per session."""
    state = pytestconfig.stash[_SESSION]
    return McpChaos(state.results, state.made, state.explore)


def failure_text(result: CheckResult) -> str:
    """What a failed check's item says: its title and why, then its evidence as JSON."""
    from harness.sanitize import json_safe

    evidence = json.dumps(json_safe(result.evidence), indent=2, ensure_ascii=False, default=str)
    return f"{result.title}: {result.why}\nevidence:\n{evidence}"


@contextmanager
def _libraries_quiet() -> Iterator[None]:
    """The harness's libraries' deprecations are not findings about the user's server: under a
    project's ``filterwarnings = error`` one (bpe-openai's, when tiktoken loads it) turned the
    catalog check into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        yield


def _said(text: str) -> str:
    """Text for pytest to print: whatever a server put in it, no control sequence reaches a terminal."""
    from harness.sanitize import terminal

    return terminal(text)


def _sets(overrides: Mapping[str, Any]) -> list[str]:
    """Keyword overrides as ``--set`` assignments; values as JSON, which YAML reads as written."""
    return [f"{name.replace('__', '.')}={json.dumps(value)}" for name, value in overrides.items()]


def _load(scenario: ScenarioSource, overrides: Mapping[str, Any]) -> Scenario:
    from harness.run.runner import check_environment
    from harness.scenario import load_scenario, parse_scenario

    if isinstance(scenario, Mapping):
        loaded = parse_scenario(dict(scenario), scenario_dir=Path.cwd(), overrides=_sets(overrides))
    else:
        loaded = load_scenario(Path(scenario), _sets(overrides))
    check_environment(loaded)
    return loaded


def _identity(scenario: ScenarioSource, overrides: Mapping[str, Any]) -> str:
    """One key per scenario and overrides, for the contract's once-per-session results."""
    source = (
        json.dumps(scenario, sort_keys=True, default=str)
        if isinstance(scenario, Mapping)
        else str(Path(scenario).resolve())
    )
    return json.dumps([source, sorted(_sets(overrides))])
