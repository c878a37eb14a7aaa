"""The run directory: one directory per run holds everything written about it.

Its layout is a contract like the history's: the runner, the pods, the effect
sink and the final read write these files, and the auditor and the reports read
them, long after the run (see ``results/README.md``). The names live here so
that writers and readers cannot disagree.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:  # the audit's first step imports this module, and needs the history parsing first
    from harness.scenario import Scenario

SCENARIO = "scenario.yaml"
"""The scenario as run (after overrides); what ``mcp-chaos audit`` reads."""
HISTORY = "history.jsonl"
DATA = "data"
"""The target's data (a process pod's store; an image gets it at ``target.data_mount``)."""
PODS = "pods"
"""One log per pod, across its restarts."""
SINK = "sink.jsonl"
"""The effect sink's record: one line per call of the target's downstream."""
DOWNSTREAM = "downstream.jsonl"
"""The downstream proxy's record: one line per call the target made to the API behind it."""
DOWNSTREAM_CA = "downstream-ca.pem"
"""The downstream proxy's CA (then the system's roots): what the target trusts (``{downstream_ca}``)."""
COLLECTED = "effects.json"
"""The final read of a live effect source."""
POSTGRES_LOG = "postgres.log"
RELAY_POINTS = "relay-points.jsonl"
"""The PostgreSQL relay's reports of a run whose observed points are placed after it (decision 0092):
removed once they are placed in the history; left where the run ended before they could be."""
BALANCER = "balancer"
"""The load balancer's configuration and logs (``services.balancer``)."""
CONTROL = "control"
"""``run --control``: the same workload with no faults, a run directory of its own inside the run's."""
PREFLIGHT_SUFFIX = ".preflight"
"""A run's preflight directory, beside it: ``<run id>.preflight``."""
INTENTS_CSV = "intents.csv"
INTENTS_PARQUET = "intents.parquet"
SUMMARY_JSON = "summary.json"
REPORT_MD = "report.md"
RECORDS = (SCENARIO, HISTORY, SINK, DOWNSTREAM, COLLECTED, SUMMARY_JSON, INTENTS_CSV, INTENTS_PARQUET)
"""What a run directory records (its inputs for audit, explain, export): no output flag writes over one."""


_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def new_run_id(scenario: Scenario) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{secrets.token_hex(2)}"


def prepare_run_dir(results_dir: Path, scenario: Scenario, run_id: str | None = None) -> Path:
    """Create ``results_dir/<run-id>/`` with the scenario as run; refuses to reuse a directory."""
    run_dir = make_dir(results_dir, checked_run_id(run_id) or new_run_id(scenario))
    (run_dir / DATA).mkdir()
    (run_dir / PODS).mkdir()
    (run_dir / SCENARIO).write_text(scenario.dump_yaml(), encoding="utf-8")
    return run_dir


def checked_run_id(run_id: str | None) -> str | None:
    """``run_id`` (``--run-id``) if it is a plain directory name; UsageError otherwise."""
    if run_id is not None and not _SAFE_RUN_ID.fullmatch(run_id):
        raise UsageError(
            f"--run-id {run_id!r} is not a plain directory name: use letters, digits, '.', '_' and '-' "
            "(at most 128, not starting with '.' or '-'); it is created inside --results"
        )
    return run_id


def make_dir(results_dir: Path, name: str) -> Path:
    """Create ``results_dir/<name>/``, empty (a run's, or one that holds several runs); UsageError for a
    directory that exists or cannot be made."""
    run_dir = results_dir / name
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise UsageError(f"run directory {run_dir} already exists; pick another --run-id") from None
    except OSError as exc:
        raise UsageError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    return run_dir


def is_run_dir(path: Path) -> bool:
    return (path / HISTORY).is_file() and (path / SCENARIO).is_file()


def require_run_dir(path: Path) -> None:
    """UsageError unless ``path`` is a run directory; for a run that stopped at its preflight or in its
    control run, before the run began, the error names that directory, which can be audited.

    A run directory is data: its history and scenario must be the files the run wrote. A link, a FIFO,
    a device or a directory in their place is named and refused (reading one would read a file outside
    the run, block, or never end), and so is a run with one of the two missing."""
    records = [path / HISTORY, path / SCENARIO]
    present = [record for record in records if os.path.lexists(record)]
    for record in present:
        if not own_regular_file(record):
            raise UsageError(
                f"{record} is {_kind(record)}, not the file the run wrote: a run directory is data, and "
                f"no link, FIFO, device or directory in it is read (put back the {record.name} it wrote)"
            )
    if len(present) == len(records):
        return
    if present:
        (missing,) = [record for record in records if record not in present]
        raise UsageError(
            f"{path} has no {missing.name}: a run directory needs both {HISTORY} and {SCENARIO} "
            f"(put back the {missing.name} the run wrote)"
        )
    if is_run_dir(path / CONTROL):
        raise UsageError(
            f"{path} stopped in its control run (run --control), before the faulted run began; "
            f"audit that: mcp-chaos audit {path / CONTROL}"
        )
    preflights = sorted(p for p in path.glob(f"*{PREFLIGHT_SUFFIX}") if is_run_dir(p))
    if preflights:
        raise UsageError(
            f"{path} stopped at its preflight, before the run began; audit that: "
            f"mcp-chaos audit {preflights[0]}"
        )
    raise UsageError(f"{path} is not a run directory (it needs {HISTORY} and {SCENARIO})")


def _kind(path: Path) -> str:
    """What a path that is not a regular file is, in words."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def own_file(path: Path) -> str | None:
    """What ``path`` is, when it is (or links to) one of a run directory's records (``the history of
    results/run-1``), else None: an output flag that names one would destroy the run."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):
        return None
    run = target.parent
    if target.name in RECORDS and (run / HISTORY).is_file():
        return f"{target.name} of the run {run}"
    return None


def own_regular_file(path: Path, within: Path | None = None) -> bool:
    """Whether ``path`` is a regular file itself, not a link: what the harness writes into a run
    directory. A run directory is data; a link in it (to a file outside, a device, a FIFO) is never
    followed by what reads it for a report. With ``within`` (the run directory), the file must also
    be inside it: a folder of the run linked elsewhere (``pods/``), or a name from the history that
    climbs out (``../``), does not make the harness read a file outside the run."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
        return within is None or path.resolve().is_relative_to(within.resolve())
    except (OSError, RuntimeError):
        return False
