"""An audit's first step, light on imports: the history being parsed, the run's scenario read, its
effect source being read.

``mcp-chaos audit`` takes this step before it imports the rest of the auditor
(pandas, the report modules: about a quarter of a second of one core), so that the
other core has work meanwhile. The history's parse goes first: it needs neither
the scenario nor its models (pydantic, 0.13-0.16 s), which are imported
once DuckDB is parsing; the effect source's read needs the scenario (unless
:mod:`harness.audit.store` started it even earlier). This module imports none of
them at its top.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.audit import parse, scratch
from harness.audit.store import EarlyRead
from harness.errors import AuditError, ScenarioError

if TYPE_CHECKING:
    from harness.audit.effects import EffectTable
    from harness.scenario import Scenario


@dataclass(frozen=True)
class Begun:
    """A run's scenario as run, its history being parsed and its effect table being read, each on
    threads of their own."""

    scenario: Scenario
    effects: Future[EffectTable]
    history: parse.Parse | None
    """None when there is no history, or one the columnar fold declines unread (the Python fold's)."""

    def discard(self) -> None:
        """Stop the parse, and close the effect table (once its read has finished), of an audit that
        will not use them."""
        if self.history is not None:
            self.history.discard()
        with contextlib.suppress(Exception):  # its own error is not the one to report
            self.effects.result().close()


def begin(run_dir: Path, early: EarlyRead | None = None) -> Begun:
    """Start parsing the run's history, read its copy of its scenario, start reading its effect source
    (``early``: already started, see :func:`harness.audit.store.read_early`), and remove what audits
    that were killed left behind (:mod:`harness.audit.scratch`)."""
    history: parse.Parse | None = None
    try:
        scratch.remove_stale()
        history = parse.start(run_dir / rundir.HISTORY)
        # Imported once DuckDB is parsing (see the module's docstring).
        from harness.audit.effects import load_effects
        from harness.scenario import load_scenario

        try:
            scenario = load_scenario(run_dir / rundir.SCENARIO)
        except ScenarioError as exc:
            raise AuditError(f"the run's copy of its scenario cannot be read: {exc.message}") from None
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-chaos-effects")
        try:
            read = pool.submit(load_effects, scenario.audit.effects, run_dir, early)
            early = None  # load_effects takes it, or cancels it
            return Begun(scenario, read, history)
        finally:
            pool.shutdown(wait=False)  # the read goes on; its thread ends with it
    except BaseException:
        if history is not None:
            history.discard()
        if early is not None:
            early.cancel()
        raise
