"""The control run: the same workload and seed with no faults, beside the faulted run.

``mcp-chaos run --control`` runs the scenario once without any fault into
``<run>/control/`` (a run directory of its own, audited like any) before the
faulted run. A server that loses or repeats writes with no fault at all does so
in the control run too; one whose findings come from the faults does not. The
comparison is Fisher's exact test on the lost and duplicate counts, read from the
control run's ``summary.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from harness import rundir
from harness.audit.stats import Rate, fisher_exact
from harness.history import Verdict

CONTROL = "control"
"""The control run's directory inside the faulted run's."""
COMPARED = (Verdict.LOST, Verdict.DUPLICATE)
SIGNIFICANT = 0.05


@dataclass(frozen=True, slots=True)
class ControlRow:
    """One verdict in both runs."""

    verdict: Verdict
    control: Rate
    faulted: Rate
    p: float
    """Fisher's exact test, two-sided."""
    sentence: str


@dataclass(frozen=True, slots=True)
class ControlComparison:
    run_id: str
    rows: list[ControlRow]
    problem: str | None = None
    """Why the control run could not be compared (not audited, damaged); rows are empty then."""


def _sentence(verdict: Verdict, control: Rate, faulted: Rate, p: float) -> str:
    noun = "lost" if verdict is Verdict.LOST else "duplicated"
    what = "loses writes" if verdict is Verdict.LOST else "repeats writes"
    if control.count:
        return (
            f"the server {what} without any fault: {control.count} of {control.n} {noun} in the control "
            f"run too (against {faulted.count} of {faulted.n} with faults, Fisher p = {p:.3g})"
        )
    if faulted.count and p < SIGNIFICANT:
        return (
            f"the faults cause it: 0 of {control.n} {noun} without faults against {faulted.count} of "
            f"{faulted.n} with them (Fisher p = {p:.3g})"
        )
    if faulted.count:
        return (
            f"0 of {control.n} {noun} without faults against {faulted.count} of {faulted.n} with them: "
            f"too few to tell whether the faults cause it (Fisher p = {p:.3g}); run more intents"
        )
    return f"none {noun} in either run"


def compare_control(run_dir: Path, verdicts: dict[Verdict, int], started: int) -> ControlComparison | None:
    """The control run beside this one, or None when the run had none."""
    control_dir = run_dir / CONTROL
    if not control_dir.is_dir():
        return None
    path = control_dir / rundir.SUMMARY_JSON
    try:
        data = orjson.loads(path.read_bytes())
        counts = {v: int(data["verdicts"].get(v.value, 0)) for v in COMPARED}
        n = int(data["intents"]["started"])
        run_id = str(data.get("run_id", CONTROL))
    except FileNotFoundError:
        return ControlComparison(
            CONTROL, [], f"{path} is missing: audit it with mcp-chaos audit {control_dir}"
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        return ControlComparison(CONTROL, [], f"{path} cannot be read ({type(exc).__name__})")
    rows = []
    for verdict in COMPARED:
        control, faulted = Rate(min(counts[verdict], n), n), Rate(verdicts.get(verdict, 0), started)
        p = fisher_exact(control.count, control.n, faulted.count, faulted.n)
        rows.append(ControlRow(verdict, control, faulted, p, _sentence(verdict, control, faulted, p)))
    return ControlComparison(run_id, rows)
