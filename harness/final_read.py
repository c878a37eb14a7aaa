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

import asyncio
import contextlib
import csv
import datetime as dt
import io
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import rundir
from harness.audit.effects import count_rows, resolve_url
from harness.client.http import McpHttpClient
from harness.client.messages import ToolCall
from harness.errors import AuditError
from harness.history import Outcome, excerpt
from harness.scenario import (
    AUDIT_PLACEHOLDERS,
    READ_TOOL_PLACEHOLDERS,
    CommandEffects,
    Effects,
    SqlEffects,
    ToolEffects,
)
from harness.template import render_text


@dataclass(frozen=True, slots=True)
class Reach:
    """Where a live effect source is read: the pod a read tool is called on (its URL, protocol and
    headers), the harness's PostgreSQL, and the run's namespace (the read tool's ``{namespace}``)."""

    pod_url: str
    protocol: str
    headers: Mapping[str, str]
    postgres_url: str | None
    namespace: str


async def final_read(effects: Effects, run_dir: Path, reach: Reach) -> int:
    """Take the final read into effects.json; returns the number of markers found."""
    counts, source = await read_live(effects, run_dir, reach)
    record = {
        "source": source,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "effects": dict(counts),
    }
    (run_dir / rundir.COLLECTED).write_bytes(orjson.dumps(record))
    return len(counts)


async def read_live(effects: Effects, run_dir: Path, reach: Reach) -> tuple[Counter[str], str]:
    """Effects per marker of a live source now, and the source's name; AuditError if it cannot be read.

    The final read's, and the checkpoint reads' (:mod:`harness.checkpoints`) during the run.
    """
    if effects.tool is not None:
        counts = await _from_tool(effects.tool, reach)
        return counts, f"tool {effects.tool.tool}"
    if effects.command is not None:
        counts = await _from_command(effects.command, run_dir, reach.postgres_url)
        return counts, "command " + " ".join(effects.command.command)
    assert effects.sql is not None
    return await _from_postgres(effects.sql, run_dir, reach.postgres_url), "sql"


async def _from_tool(tool: ToolEffects, reach: Reach) -> Counter[str]:
    arguments = {
        k: render_text(
            v, {"namespace": reach.namespace}, READ_TOOL_PLACEHOLDERS, f"audit.effects.tool.arguments.{k}"
        )
        if isinstance(v, str)
        else v
        for k, v in tool.arguments.items()
    }
    async with McpHttpClient(reach.pod_url, protocol=reach.protocol, headers=reach.headers) as client:
        res = await client.call_tool(ToolCall(tool.tool, arguments, 1), timeout=60)
        await client.end_session()
    if res.outcome is not Outcome.OK or res.result is None:
        said = f": {res.message}" if res.message else ""
        raise AuditError(f"read tool {tool.tool!r} failed: {res.outcome.value} {res.detail}{said}")
    return _effects_of(tool.tool, res.result.get("structuredContent"))


def _count(value: Any) -> int:
    """A count of effects as a read tool gives it; ValueError for anything but a whole number >= 0."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{excerpt(repr(value), 60)} is not a count of effects (a whole number >= 0)")
    return value


def _effects_of(name: str, structured: Any) -> Counter[str]:
    effects = structured.get("effects") if isinstance(structured, dict) else None
    try:
        if isinstance(effects, dict):
            return Counter({str(k): _count(v) for k, v in effects.items()})
        if isinstance(effects, list) and all(isinstance(e, dict) and "marker" in e for e in effects):
            counts: Counter[str] = Counter()
            for e in effects:
                counts[str(e["marker"])] += _count(e.get("effects", 1))
            return counts
    except ValueError as exc:
        raise AuditError(f"read tool {name!r} answered {exc}") from None
    raise AuditError(
        f"read tool {name!r} must return structured content with 'effects': "
        "an object marker -> count, or a list of {marker, effects}"
    )


async def _from_postgres(sql: SqlEffects, run_dir: Path, postgres_url: str | None) -> Counter[str]:
    """The query, on a connection of its own in a thread: a read abandoned (a checkpoint read when the
    run ends, one past its timeout) is cancelled for the run, while its thread still closes the
    connection it opened. Cancelled inside an async connect, psycopg left the connection open."""
    url = resolve_url(sql.url, run_dir, postgres_url or "{postgres_url}")
    return await asyncio.to_thread(_query_postgres, url, sql.query)


def _query_postgres(url: str, query: str) -> Counter[str]:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.read_only = True  # the audit must never change the evidence it reads
            cur = conn.execute(query)
            columns = [d.name for d in cur.description or ()]
            rows = cur.fetchall()
    except psycopg.Error as exc:
        raise AuditError(f"audit query failed on {url}: {exc}".splitlines()[0]) from None
    return count_rows(columns, rows, url)


async def _from_command(spec: CommandEffects, run_dir: Path, postgres_url: str | None) -> Counter[str]:
    """Run the scenario's command; its stdout is CSV lines ``marker,effects`` (a header is allowed)."""
    values = {
        "python": sys.executable,
        "data_dir": run_dir.resolve() / rundir.DATA,
        "run_dir": run_dir.resolve(),
        "scenario_dir": "{scenario_dir}",
        "postgres_url": postgres_url or "{postgres_url}",
    }
    argv = [
        render_text(part, values, AUDIT_PLACEHOLDERS | {"python"}, "audit.effects.command")
        for part in spec.command
    ]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise AuditError(f"cannot run the effects command {argv[0]!r}: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), spec.timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AuditError(
            f"the effects command ran longer than {spec.timeout_s:g}s (audit.effects.command.timeout_s)"
        ) from None
    except asyncio.CancelledError:  # a checkpoint read abandoned: the command must not outlive it
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise AuditError(f"the effects command exited with {proc.returncode}: {tail[0]}")
    try:
        rows = list(csv.reader(io.StringIO(out.decode("utf-8", "replace"))))
    except csv.Error as exc:
        raise AuditError(f"the effects command's output is not CSV lines 'marker,effects': {exc}") from None
    if rows and [c.strip().lower() for c in rows[0]] == ["marker", "effects"]:
        rows = rows[1:]
    counts: Counter[str] = Counter()
    for number, row in enumerate(rows, 1):
        if not row:
            continue
        try:
            marker, effects = row[0].strip(), int(row[1]) if len(row) > 1 else 1
        except ValueError:
            effects = -1
        if effects < 0:
            shown = excerpt(",".join(row), 80)
            raise AuditError(
                f"the effects command's line {number} is not 'marker,effects' (a count >= 0): {shown}"
            )
        counts[marker] += effects
    return counts
