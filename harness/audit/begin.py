"""An audit's first step, light on imports: the run's scenario read, its effect source being read.

``mcp-chaos audit`` takes this step before it imports the rest of the auditor
(pandas, the report modules: about half a second of one core), so that SQLite
reads the effects on the other core meanwhile. This module imports neither.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness import rundir
from harness.audit import scratch
from harness.audit.effects import EffectTable, load_effects
from harness.errors import AuditError, ScenarioError
from harness.scenario import Scenario, load_scenario


@dataclass(frozen=True)
class Begun:
    """A run's scenario as run, and its effect table being read on a thread of its own."""

    scenario: Scenario
    effects: Future[EffectTable]

    def discard(self) -> None:
        """Close the effect table an audit will not use (once its read has finished)."""
        with contextlib.suppress(Exception):  # its own error is not the one to report
            self.effects.result().close()


def begin(run_dir: Path) -> Begun:
    """Read the run's copy of its scenario and start reading its effect source (and remove what audits
    that were killed left behind: :mod:`harness.audit.scratch`)."""
    scratch.remove_stale()
    try:
        scenario = load_scenario(run_dir / rundir.SCENARIO)
    except ScenarioError as exc:
        raise AuditError(f"the run's copy of its scenario cannot be read: {exc.message}") from None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-chaos-effects")
    try:
        return Begun(scenario, pool.submit(load_effects, scenario.audit.effects, run_dir))
    finally:
        pool.shutdown(wait=False)  # the read goes on; its thread ends with it
