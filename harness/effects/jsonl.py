"""``audit.effects.jsonl``: a JSON-lines file the target writes, one effect per line, the marker in a
named field. The effect sink's record (:mod:`harness.effects.sink`) is read the same way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from harness.effects.base import Drafted, EffectSource, SeenStore, place
from harness.errors import AuditError, StoreNotMade
from harness.scenario import JsonlEffects


class JsonlSource(EffectSource, field="jsonl"):
    """Records per marker in a JSON-lines file."""

    section: JsonlEffects

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        path = Path(place(self.section.path, run_dir, "audit.effects"))
        where = f"audit.effects.jsonl.path {path}"
        return count_jsonl(path, self.section.marker_field, where, torn=torn)

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        jsonl = next((s for s in stores if s.kind == "jsonl"), None)
        if jsonl is not None:
            section = {"jsonl": {"path": jsonl.where, "marker_field": marker_field or "TODO"}}
            todo = None if marker_field else "name the field of each line that holds the marker"
            yield Drafted(section, todo, f"the server writes the JSON-lines file {jsonl.where}", rank=1)


def count_jsonl(
    path: Path, marker_field: str, where: str, *, skip: str | None = None, torn: list[int] | None = None
) -> Counter[str]:
    """One effect per JSON line, of the marker in ``marker_field``.

    A writer killed mid-line leaves a torn line; the next writer appends to it, so
    the line holds the torn start and then a whole record. The whole record is
    counted, the torn part is not (it never became an effect anyone could see).
    ``torn`` collects the numbers of such lines: a read of a file being rewritten.
    ``skip``: a field that, when true, says a line is no effect (the sink's replays).
    """
    if path.is_dir():
        raise AuditError(f"{where} is a directory; name the JSON-lines file the target writes")
    if not path.is_file():
        raise StoreNotMade(
            f"no effects file at {where} (the target never wrote it: no effects, or another path)"
        )
    counts: Counter[str] = Counter()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            record = _record(raw)
            if record is None:  # torn: count the whole record appended to it, if there is one
                if torn is not None:
                    torn.append(number)
                record = _appended_record(raw)
                if record is None:
                    continue
            if not isinstance(record, dict) or record.get(marker_field) is None:
                raise AuditError(f"{path}:{number}: a record without a {marker_field!r} field: {raw[:80]!r}")
            if skip is not None and record.get(skip) is True:
                continue
            counts[str(record[marker_field])] += 1
    return counts


def _record(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _appended_record(raw: bytes) -> Any:
    """The record after a torn write on the same line: the last '{' that starts valid JSON."""
    start = raw.rfind(b"{")
    while start > 0:
        record = _record(raw[start:])
        if record is not None:
            return record
        start = raw.rfind(b"{", 0, start)
    return None
