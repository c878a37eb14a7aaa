"""The final read: effects of sources that need a live service, taken once when the run ends.

Jepsen ends a test with final reads that become part of its record; this is the
same. After the driver and the faults have stopped, while the pod (and the
harness's PostgreSQL) are still up, the runner asks the scenario's effect
source for the effects per marker and writes them to ``effects.json`` in the
run directory. The auditor reads that file, never the service, so a run can be
re-audited long after its services are gone. This is the only part of the
audit package that talks to a target.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from harness.audit.effects import COLLECTED_FILE, resolve_url
from harness.client import McpHttpClient, Outcome
from harness.errors import AuditError
from harness.scenario import Effects, SqlEffects, ToolEffects


async def collect(
    effects: Effects, run_dir: Path, *, pod_url: str, postgres_url: str | None, namespace: str
) -> int:
    """Take the final read into effects.json; returns the number of markers found."""
    if effects.tool is not None:
        counts = await _from_tool(effects.tool, pod_url, namespace)
        source = f"tool {effects.tool.tool}"
    else:
        assert effects.sql is not None
        counts = await _from_postgres(effects.sql, run_dir, postgres_url)
        source = "sql"
    record = {
        "source": source,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "effects": dict(counts),
    }
    (run_dir / COLLECTED_FILE).write_bytes(orjson.dumps(record))
    return len(counts)


async def _from_tool(tool: ToolEffects, url: str, namespace: str) -> Counter[str]:
    arguments = {
        k: v.format(namespace=namespace) if isinstance(v, str) else v for k, v in tool.arguments.items()
    }
    async with McpHttpClient(url) as client:
        res = await client.call_tool(tool.tool, arguments, request_id=0, timeout=60)
    if res.outcome is not Outcome.OK or res.result is None:
        raise AuditError(f"read tool {tool.tool!r} failed: {res.outcome.value} {res.detail}")
    return _effects_of(tool.tool, res.result.get("structuredContent"))


def _effects_of(name: str, structured: Any) -> Counter[str]:
    effects = structured.get("effects") if isinstance(structured, dict) else None
    if isinstance(effects, dict):
        return Counter({str(k): int(v) for k, v in effects.items()})
    if isinstance(effects, list) and all(isinstance(e, dict) and "marker" in e for e in effects):
        counts: Counter[str] = Counter()
        for e in effects:
            counts[str(e["marker"])] += int(e.get("effects", 1))
        return counts
    raise AuditError(
        f"read tool {name!r} must return structured content with 'effects': "
        "an object marker -> count, or a list of {marker, effects}"
    )


async def _from_postgres(sql: SqlEffects, run_dir: Path, postgres_url: str | None) -> Counter[str]:
    import psycopg

    url = resolve_url(sql.url, run_dir, postgres_url or "{postgres_url}")
    try:
        async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn:
            cur = await conn.execute(sql.query)
            columns = [d.name.lower() for d in cur.description or ()]
            rows = await cur.fetchall()
    except psycopg.Error as exc:
        raise AuditError(f"audit query failed on {url}: {exc}".splitlines()[0]) from None
    if "marker" not in columns:
        raise AuditError(
            f"audit query must return a 'marker' column (and optionally 'effects'); got {columns}"
        )
    mi = columns.index("marker")
    ei = columns.index("effects") if "effects" in columns else None
    counts: Counter[str] = Counter()
    for row in rows:
        if row[mi] is not None:
            counts[str(row[mi])] += 1 if ei is None else int(row[ei])
    return counts
