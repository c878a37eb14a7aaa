"""Effect sources: where the auditor finds the side effects of each intent, by marker.

A SQLite file and the effect sink's record are read here, any time after the
run. A PostgreSQL query and a read tool of the target need a live service: the
runner makes that final read once, at the end of the run (``audit.collect``),
into ``effects.json``, which is what the auditor reads for them.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from harness.errors import AuditError
from harness.scenario import Effects
from harness.sink import count_sink_effects

COLLECTED_FILE = "effects.json"


def resolve_url(url: str, run_dir: Path, postgres_url: str = "{postgres_url}") -> str:
    return url.format(
        data_dir=run_dir / "data", run_dir=run_dir, scenario_dir="{scenario_dir}", postgres_url=postgres_url
    )


def count_effects(effects: Effects, run_dir: Path) -> Counter[str]:
    """Effects per marker, as counted by the scenario's effect source."""
    if effects.sink is not None:
        return count_sink_effects(run_dir)
    if effects.collected_at_end:
        return read_collected(run_dir)
    assert effects.sql is not None
    return _sql_effects(resolve_url(effects.sql.url, run_dir), effects.sql.query)


def read_collected(run_dir: Path) -> Counter[str]:
    path = run_dir / COLLECTED_FILE
    if not path.is_file():
        raise AuditError(
            f"no {COLLECTED_FILE} in {run_dir}: this source is read once at the end of a run, and this run "
            "ended before that final read (its history can still be read; its effects cannot)"
        )
    data = orjson.loads(path.read_bytes())
    return Counter({str(k): int(v) for k, v in data["effects"].items()})


def _grouped(rows: list[tuple[Any, Any]]) -> Counter[str] | None:
    """The usual GROUP BY result (one row per marker) as a Counter, built in C; None if it is not that."""
    mapping = dict(rows)
    had_null = None in mapping
    mapping.pop(None, None)
    if len(mapping) + had_null != len(rows):
        return None  # a marker (or NULL) came twice: the general path adds them up
    if not all(type(k) is str for k in mapping) or not all(type(v) is int for v in mapping.values()):
        return None
    return Counter(mapping)


def _sql_effects(url: str, query: str) -> Counter[str]:
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        raise AuditError(
            f"effects store {path} does not exist (did the target write to audit.effects.sql.url?)"
        )
    try:
        db = sqlite3.connect(path)
    except sqlite3.Error as exc:
        raise AuditError(f"cannot open effects store {path}: {exc}") from None
    try:
        cur = db.execute(query)
        columns = [d[0].lower() for d in cur.description or ()]
        if "marker" not in columns:
            raise AuditError(
                f"audit query must return a 'marker' column (and optionally 'effects'); it returned {columns}"
            )
        if columns == ["marker", "effects"]:
            grouped = _grouped(cur.fetchall())
            if grouped is not None:
                return grouped
            cur = db.execute(query)
        mi = columns.index("marker")
        counts: Counter[str] = Counter()
        if "effects" in columns:
            ei = columns.index("effects")
            for row in cur:
                if row[mi] is not None:
                    counts[str(row[mi])] += int(row[ei])
        else:
            counts.update(str(row[mi]) for row in cur if row[mi] is not None)
        return counts
    except sqlite3.Error as exc:
        raise AuditError(f"audit query failed on {path}: {exc} (check audit.effects.sql.query)") from None
    finally:
        db.close()
