"""Audit a run directory and write its reports: the one call the CLI, the runner, preflight,
``reproduce`` and crash point explorations share.

It sits above both :mod:`harness.audit` (which judges and knows no file format of the reports)
and :mod:`harness.report` (which renders and writes, and starts no audit): the judged rows go
to intents.csv as they are judged, through the audit's ``sink``.
"""

from __future__ import annotations

from pathlib import Path

from harness.audit.auditor import AuditResult, audit_run
from harness.audit.begin import Begun
from harness.report import pages
from harness.report.files import IntentFiles, write_audit


def audit_and_report(
    run_dir: Path, *, html: bool = True, begun: Begun | None = None, keep_rows: bool = True
) -> AuditResult:
    """Audit a run directory and write its reports (intents.csv, summary.json, report.md, report.html).
    ``begun``: the audit's first step, already taken (:mod:`harness.audit.begin`); ``keep_rows``
    False: the result keeps no judged row beyond its files (see :func:`audit_run`)."""
    if html:
        pages.import_plotting()  # meanwhile
    intents = IntentFiles(run_dir)  # written while the audit judges
    try:
        audit = audit_run(run_dir, sink=intents.write, begun=begun, keep_rows=keep_rows)
    except BaseException:
        intents.discard()
        raise
    write_audit(audit, html=html, intents=intents)
    return audit
