"""``audit.effects.sink``: the harness's effect sink, an HTTP downstream the target calls (a payment or
mail provider's stand-in); each call it recorded is one effect of the marker in its body.

The sink itself is a service of the run (:mod:`harness.sink`); this reads its record,
``sink.jsonl``, any time after the run.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from harness import rundir
from harness.effects.base import EffectSource
from harness.effects.jsonl import count_jsonl
from harness.errors import AuditError
from harness.scenario import SinkEffects


class SinkSource(EffectSource, field="sink"):
    """The calls the effect sink recorded; a call it answered as a replay of a key it had seen
    (``dedupe_by_key``) is recorded, not counted."""

    section: SinkEffects

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        path = run_dir / rundir.SINK
        if os.path.lexists(path) and not rundir.own_regular_file(path, run_dir):
            raise AuditError(
                f"{path} is not the record the effect sink wrote (a link, a FIFO or a directory is there)"
            )
        if not path.is_file():
            raise AuditError(f"no effect sink record at {path} (did the target call {{sink_url}}?)")
        return count_jsonl(path, "marker", str(path), skip="replay")
