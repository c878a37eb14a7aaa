"""The audit's temporary directories, named for the process that made them.

An audit keeps what it must not hold in memory on disk: the fold's intents
(130 MB at a million intents), the effect table's digests until they are sorted,
the judged rows. Each directory goes when its object does, or at exit; a SIGKILLed
audit leaves them. Named ``mcp-chaos-audit-<pid>.<start time>-<random>``
(:mod:`harness.leftovers`), those of an audit that is gone are removed by the
next audit's first step and by ``mcp-chaos cleanup``; a running audit's never.
"""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path

from harness import leftovers

PREFIX = "mcp-chaos-audit-"


class Scratch:
    """A temporary directory of this audit: removed by :meth:`cleanup`, or when it is collected."""

    def __init__(self) -> None:
        self.path = leftovers.make(PREFIX)
        self._remove = weakref.finalize(self, shutil.rmtree, self.path, True)

    def cleanup(self) -> None:
        self._remove()


def remove_stale() -> list[Path]:
    """Remove the directories of audits that are gone."""
    return leftovers.remove_stale(PREFIX)
