"""The final read: effects of sources that need a live service, taken once when the run ends.

Jepsen ends a test with final reads that become part of its record; this is the
same. After the driver and the faults have stopped, while the pod (and the
harness's PostgreSQL) are still up, the runner asks the scenario's effect
source for the effects per marker and writes them to ``effects.json`` in the
run directory. The auditor reads that file, never the service, so a run can be
re-audited long after its services are gone. It is the one read of effects
that talks to the network, which is why it is not part of ``harness.audit``.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from harness import rundir
from harness.audit.effects import count_rows, resolve_url
from harness.client import McpHttpClient
from harness.errors import AuditError
from harness.history import Outcome
from harness.scenario import READ_TOOL_PLACEHOLDERS, Effects, SqlEffects, ToolEffects
from harness.template import render_text


async def final_read(
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
    (run_dir / rundir.COLLECTED).write_bytes(orjson.dumps(record))
    return len(counts)


async def _from_tool(tool: ToolEffects, url: str, namespace: str) -> Counter[str]:
    arguments = {
        k: render_text(
            v, {"namespace": namespace}, READ_TOOL_PLACEHOLDERS, f"audit.effects.tool.arguments.{k}"
        )
        if isinstance(v, str)
        else v
        for k, v in tool.arguments.items()
    }
    async with McpHttpClient(url) as client:
        res = await client.call_tool(tool.tool, arguments, request_id=1, timeout=60)
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
            await conn.set_read_only(True)  # the audit must never change the evidence it reads
            cur = await conn.execute(sql.query)
            columns = [d.name for d in cur.description or ()]
            rows = await cur.fetchall()
    except psycopg.Error as exc:
        raise AuditError(f"audit query failed on {url}: {exc}".splitlines()[0]) from None
    return count_rows(columns, rows, url)
