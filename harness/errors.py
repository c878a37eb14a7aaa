"""Every exception the harness raises on purpose, in one tree.

Exceptions are for things that stop a run from being what the user asked for:
a bad scenario, a target that never came up, a run directory that cannot be
audited. What the harness *finds* (a duplicate invoice, a lost effect) is data
in the history and the audit, never an exception: a run full of duplicates is a
successful run.

    HarnessError                  base; ``exit_code`` tells the CLI what to return
    ├── UsageError                a command line that cannot be acted on        (2)
    ├── ScenarioError             a scenario file missing, unparsable, invalid  (2)
    │   └── PreflightError        valid, but one real call shows it does not fit the target
    ├── TargetError               the system under test could not be run        (3)
    │   ├── TargetStartError      the pod's command could not be started
    │   ├── TargetNotReady        the pod never answered ``server/discover`` (in a run, only at
    │   │                         its first start: a restart that never does is a finding)
    │   └── FaultUnfinished       a kill begun that did not finish (a url target's kill command
    │                             failed, timed out, or still ran when the run ended)
    ├── HistoryError              a history file that is not a valid history   (4)
    ├── AuditError                effects could not be read for a run          (4)
    │   └── StoreNotMade          the store is not there yet (no file, no table)
    └── ExportError               a run's spans were not taken by a collector  (5)

Every message is one line that says what is wrong and, where it can, how to
fix it; multi-line context (a log tail) lives in ``details``.
"""

from __future__ import annotations

_ONE_LINE = {c: repr(chr(c))[1:-1] for c in (*range(32), 127) if c != 32}
"""Control characters as the escapes a person can read (a newline in a YAML key becomes ``\\n``)."""


class HarnessError(Exception):
    """Base class; carries the process exit code the CLI should use.

    The message is always one line: what users wrote (field names, values) ends up
    in it, and may hold newlines or control bytes; those are shown escaped. Longer
    text (a server's log, a traceback of the target) belongs in ``details``.
    """

    exit_code = 1

    def __init__(self, message: str, *, details: str | None = None) -> None:
        message = message.translate(_ONE_LINE)
        super().__init__(message)
        self.message = message
        self.details = details


class UsageError(HarnessError):
    """The command line names something that does not exist or cannot be combined."""

    exit_code = 2


class ScenarioError(HarnessError):
    """The scenario file is missing, is not YAML, or fails validation."""

    exit_code = 2


class PreflightError(ScenarioError):
    """A preflight call failed, or its effect was not counted exactly once."""


class TargetError(HarnessError):
    """The target (system under test) could not be started or reached."""

    exit_code = 3


class TargetStartError(TargetError):
    """The pod's process or container could not be created at all."""


class TargetNotReady(TargetError):
    """The pod started but never answered a readiness probe in time."""


class FaultUnfinished(TargetError):
    """A kill was begun and did not finish: whether the server died is not known. Raised by the pod's
    ``wait``; the supervisor records it (``fault_unfinished``), and a run that ends with one is
    inconclusive."""


class HistoryError(HarnessError):
    """A history file is malformed: bad JSON, or a completion without its start."""

    exit_code = 4


class AuditError(HarnessError):
    """The effects of a run could not be read (missing store, failing query)."""

    exit_code = 4


class StoreNotMade(AuditError):
    """The effect source's store is not there (no file, directory, database or table): a target that has
    not written yet, or audit.effects naming another place. A read during a run or a contract check
    takes it as no effects so far; any other AuditError is a read that failed, and proves nothing."""


class ExportError(HarnessError):
    """``export``: the file could not be written, or (``--format otlp``) the collector was not there or
    did not take the spans."""

    exit_code = 5


class ConformanceFailure(HarnessError):
    """``conformance-client``: the client could not do what a suite scenario asked (the suite reports
    the checks it made); ``make conformance``: the suite found failures not expected."""

    exit_code = 1
