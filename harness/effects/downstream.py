"""``audit.effects.downstream``: the calls the downstream proxy recorded (``services.downstream``); each
call the upstream accepted is one effect of every marker it carried.

The proxy is a service of the run (:mod:`harness.downstream`); this reads its record,
``downstream.jsonl``, any time after the run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import orjson

from harness import rundir
from harness.effects.base import Drafted, RecordSource, SeenStore
from harness.errors import AuditError
from harness.scenario import DownstreamEffects


class DownstreamSource(RecordSource, field="downstream"):
    """Calls of the chosen methods (and path) that the upstream answered with a 2xx, not as a replay."""

    section: DownstreamEffects
    record = rundir.DOWNSTREAM
    writer = "downstream proxy"
    missing = "the run ended before the proxy started"

    def tally(self, path: Path) -> Counter[str]:
        methods = set(self.section.methods)
        only = None if self.section.path is None else re.compile(self.section.path)
        counts: Counter[str] = Counter()
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    call = orjson.loads(raw)
                    method, status, markers = call["method"], call["status"], call["markers"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    raise AuditError(
                        f"{path}:{number}: not a line the downstream proxy writes: {raw[:80]!r}"
                    ) from None
                if (
                    method in methods
                    and 200 <= status < 300
                    and call.get("replay") is not True
                    and (only is None or only.search(call.get("path", "")))
                ):
                    counts.update(str(m) for m in markers)
        return counts

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        """The calls to an API whose base URL the server is given (``init`` puts the proxy in its place):
        the last choice, after any store of the server's own."""
        api = next((s for s in stores if s.kind == "api"), None)
        if api is not None:
            why = f"the server calls the API at {api.where}; the downstream proxy records each call"
            yield Drafted({"downstream": {}}, None, why, rank=5)
