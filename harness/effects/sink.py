"""``audit.effects.sink``: the harness's effect sink, an HTTP downstream the target calls (a payment or
mail provider's stand-in); each call it recorded is one effect of the marker in its body.

The sink itself is a service of the run (:mod:`harness.sink`); this reads its record,
``sink.jsonl``, any time after the run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness import rundir
from harness.effects.base import RecordSource
from harness.effects.jsonl import count_jsonl
from harness.scenario import SinkEffects


class SinkSource(RecordSource, field="sink"):
    """The calls the effect sink recorded; a call it answered as a replay of a key it had seen
    (``dedupe_by_key``) is recorded, not counted."""

    section: SinkEffects
    record = rundir.SINK
    writer = "effect sink"
    missing = "did the target call {sink_url}?"

    def tally(self, path: Path) -> Counter[str]:
        return count_jsonl(path, "marker", str(path), skip="replay")
