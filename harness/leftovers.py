"""Temporary directories named for the harness that made them, so that a SIGKILLed one's are found.

A run's PostgreSQL cluster (41 MB) and init's throwaway run directory (the probed
server's log, not redacted) live in the system's temporary directory, outside any
run directory. The watchdog deletes them when the harness dies; should it die too
(a machine's OOM killer, ``kill -9`` of the whole session), ``mcp-chaos cleanup``
finds them by name: ``<prefix><pid>.<start time>-<random>[.<run tag>]``. The owner
is told apart from a later process with the same pid by its start time
(:func:`~harness.proctree.identify`); the run tag, a short hash of the run id
(short: PostgreSQL puts its socket inside the cluster's directory, and a socket's
path is limited to 107 bytes), lets ``cleanup --run X`` remove run X's and no other
run's. A directory whose owner still runs is never removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from harness.proctree import identify

TAG_CHARS = 10


def run_tag(run_id: str) -> str:
    """The run id as the few characters a directory name carries."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:TAG_CHARS]


def make(prefix: str, run_id: str | None = None) -> Path:
    """A new directory named for this process (and ``run_id``'s run, if it belongs to one)."""
    me = identify(os.getpid())
    owner = f"{os.getpid()}.{me[1] if me else 0}"
    suffix = "" if run_id is None else f".{run_tag(run_id)}"
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner}-", suffix=suffix))


def remove_stale(prefix: str, run_id: str | None = None) -> list[Path]:
    """Delete the directories of ``prefix`` whose owner is gone (only ``run_id``'s, if given).

    Names that do not parse (another tool's, an older version's) are left alone.
    """
    removed = []
    tag = None if run_id is None else run_tag(run_id)
    for path in sorted(Path(tempfile.gettempdir()).glob(f"{prefix}*")):
        owner, _, rest = path.name.removeprefix(prefix).partition("-")
        pid, _, started = owner.partition(".")
        if not (pid.isdigit() and started.isdigit()) or not path.is_dir():
            continue
        if tag is not None and rest.partition(".")[2] != tag:
            continue
        if identify(int(pid)) != (int(pid), int(started)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
