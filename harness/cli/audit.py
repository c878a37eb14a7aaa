"""``mcp-chaos audit``: (re-)audit a run directory, complete or partial; it starts reading the
effects before it imports the audit's libraries."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import EXIT_GATE_FAILED, say

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    audit = sub.add_parser("audit", help="(re-)audit a run directory, complete or partial")
    audit.add_argument("run_dir")
    audit.add_argument("--no-html", action="store_true", help="skip report.html (its plots)")
    audit.set_defaults(func=command)


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


def command(args: argparse.Namespace) -> int:
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
    say(render_text(audit.summary))
    say(f"\nreport: {run_dir / rundir.REPORT_MD}")
    return 0 if audit.gate_passed else EXIT_GATE_FAILED
