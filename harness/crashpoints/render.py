"""What ``crashpoints`` shows: the point × verdict table, one try's timeline per finding, and the fix.

The table is the same on the terminal and in ``crashpoints.md``; ``as_json`` is
its machine-readable twin. The timeline of a try is told here from the history
(:func:`timeline`), a small stand-in for the ``explain`` story the verdicts
will have; replace it when that exists. The fix is chosen by where the finding
is and what the call did there (the statements a commit wrote, whether a
downstream call carried a key), in the words of the source article.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.crashpoints.emit import reproducer_name, write_reproducers
from harness.crashpoints.explore import Exploration, PointResult, intent_events
from harness.crashpoints.points import Point, PointKind, path_name
from harness.history import EventType, Verdict
from harness.report.tables import markdown_table

CRASHPOINTS_MD = "crashpoints.md"
COLUMNS = [v.value for v in Verdict]


def _columns(exploration: Exploration) -> list[str]:
    seen = {v for p in exploration.points for v in p.verdicts} | set(exploration.clean_calls)
    return [c for c in COLUMNS if c in seen]


def render_table(exploration: Exploration) -> str:
    """One row per path held (in the order tried), and one for the calls held nowhere."""
    columns = _columns(exploration)
    rows: list[list[object]] = []
    for p in exploration.points:
        held = f"{p.held}/{p.tries}"
        mark = f"{p.finding.value.upper()}" if p.finding is not None else "-"
        rows.append([p.name, p.tries, held, *(p.verdicts[c] or "" for c in columns), mark])
    clean = exploration.clean_calls
    rows.append(["(none: clean calls)", sum(clean.values()), "-", *(clean[c] or "" for c in columns), "-"])
    return markdown_table(
        ["point", "tries", "held", *columns, "finding"], rows, align="lrr" + "r" * len(columns) + "l"
    )


def summary_line(exploration: Exploration) -> str:
    found = exploration.findings
    tries = sum(p.tries for p in exploration.points)
    what = (
        "no finding at any point"
        if not found
        else "findings at " + ", ".join(f"{p.name} ({p.finding.value if p.finding else ''})" for p in found)
    )
    if exploration.not_passed:
        what += f"; the call never passed {', '.join(exploration.not_passed)}"
    return (
        f"crashpoints: {len(exploration.points)} points, {tries} tries in {exploration.seconds:.1f}s; {what}"
    )


def _writes(exploration: Exploration, point: Point) -> str:
    writes = exploration.details.get(point.name, {}).get("writes") or []
    return "; ".join(f"`{w}`" for w in writes)


def fix(exploration: Exploration, result: PointResult) -> str:
    """What to change in the target, for the finding at ``result``'s point."""
    finding = result.finding
    point = result.path[-1]
    later = [p for p in exploration.clean if p.kind is point.kind and p.index > point.index]
    if finding is Verdict.DUPLICATE:
        if len(result.path) == 2:
            return (
                f"A crash during the recovery from a crash at {result.path[0].name} repeats the effect: the "
                f"retry's own work is not one atomic step either. Make the first call's work atomic (the fix "
                f"for {result.path[0].name}, if it has a finding) and the retry finds it done."
            )
        if point.kind is PointKind.DB_COMMIT and later:
            return (
                f"{point.name} committed the effect ({_writes(exploration, point) or 'a write'}), and what "
                f"tells a retry it was done committed later, on its own ({later[0].name}: "
                f"{_writes(exploration, later[0]) or 'a write'}). A crash between the two commits leaves the "
                "effect without its record, and the retry makes it again: read-then-write idempotency is not "
                "atomic. Put the business write and the idempotency record in one transaction (a unique key; "
                "a retry that finds it replays the stored result)."
            )
        if point.kind is PointKind.DB_COMMIT:
            return (
                f"{point.name} is the effect ({_writes(exploration, point) or 'a write'}), and nothing "
                "records the intent's key with it: every retry of a call that got this far makes it again. "
                "Store the key with the effect, in the same transaction, unique, and replay the stored "
                "result for a key seen before."
            )
        if point.kind is PointKind.DOWNSTREAM:
            key = exploration.details.get(point.name, {}).get("key")
            why = (
                "its call carried no idempotency key, so it could not tell the retry's call from a new one"
                if key is None
                else "it got the intent's key but does not deduplicate by it (model one that does with "
                "audit.effects.sink.dedupe_by_key: true)"
            )
            return (
                f"The downstream recorded the call at {point.name} and the retry called it again; {why}. "
                "Forward the intent's key downstream (an Idempotency-Key header) to a provider that "
                "deduplicates by it, or record the downstream call in your store before making it and look "
                "it up on a retry."
            )
        return (
            f"The call had finished at {point.name} and its retry did the work again: the server does not "
            "recognise a retry. Store the intent's key with the effect, in one transaction, and replay the "
            "stored result for a key seen before."
        )
    if finding is Verdict.LOST:
        if point.kind is PointKind.DB_COMMIT and later:
            return (
                f"{point.name} made the record that the intent is done durable "
                f"({_writes(exploration, point) or 'a write'}) before the effect itself committed "
                f"({later[0].name}: {_writes(exploration, later[0]) or 'a write'}). A crash between them "
                "leaves a key that replays a result nothing created: the client is told it succeeded. "
                "Write the key record in the same transaction as the effect."
            )
        return (
            f"After a crash at {point.name} the client was told the call succeeded, and no effect exists: "
            "something that marks the intent done was made durable before the effect. Make both durable "
            "together."
        )
    if finding is Verdict.APPLIED_DESPITE_ERROR:
        return (
            f"After a crash at {point.name} the retry was refused with an error though the effect exists. "
            "Replay the stored result for a key seen before, rather than refuse it."
        )
    return ""


def _when(t: float, t0: float) -> str:
    return f"{t - t0:8.3f}s"


def timeline(events: Sequence[dict[str, Any]], effects: int, verdict: str) -> list[str]:
    """One try as lines a person reads: its attempts, the points they passed, the kill and the restart.

    Attempts that failed while the pod was down are told as one line. (A stand-in for the
    verdicts' ``explain`` story: replace it when that exists.)
    """
    if not events:
        return []
    t0 = events[0]["t"]
    lines: list[str] = []
    quiet: list[dict[str, Any]] = []
    """Consecutive attempts that passed no point: the pod was down, or the request never got there."""
    started: dict[int, dict[str, Any]] = {}
    passed: set[int] = set()
    kill_line: str | None = None

    def flush() -> None:
        if not quiet:
            return
        first, last = quiet[0], quiet[-1]
        how = f"{first['outcome']}" + (f" ({first['detail']})" if first.get("detail") else "")
        span = (
            f"attempt {first['attempt']}"
            if len(quiet) == 1
            else f"attempts {first['attempt']}-{last['attempt']}"
        )
        lines.append(f"{_when(first['t'], t0)}  {span}: {how}, nothing reached the server")
        quiet.clear()

    for ev in events:
        kind = ev["type"]
        if kind == EventType.ATTEMPT_STARTED:
            started[ev["attempt"]] = ev
        elif kind == EventType.CRASH_POINT:
            if ev["attempt"] not in passed:
                flush()
                passed.add(ev["attempt"])
                begun = started.get(ev["attempt"], ev)
                lines.append(
                    f"{_when(begun['t'], t0)}  attempt {ev['attempt']} (request id {begun.get('id')})"
                )
            lines.append(f"{_when(ev['t'], t0)}    {_point_line(ev)}")
            if kill_line is not None and ev["held"]:
                lines.append(kill_line)
                kill_line = None
        elif kind == EventType.ATTEMPT_ENDED:
            if ev["attempt"] not in passed:
                quiet.append(ev)
                continue
            how = ev["outcome"] + (f" ({ev['detail']})" if ev.get("detail") else "")
            lines.append(f"{_when(ev['t'], t0)}    answer: {how}")
        elif kind == EventType.FAULT:
            flush()
            killed = f"{_when(ev['t'], t0)}  {ev.get('pod', 'pod')} SIGKILLed ({ev.get('trigger', 'kill')})"
            if "point" in ev:
                kill_line = killed  # told after the point it was held at, recorded just after the kill
            else:
                lines.append(killed)
        elif kind == EventType.POD_EXITED:
            flush()
            lines.append(f"{_when(ev['t'], t0)}  {ev['pod']} exited ({ev['returncode']})")
        elif kind == EventType.POD_READY:
            flush()
            lines.append(
                f"{_when(ev['t'], t0)}  {ev['pod']} ready again ({ev['after_s']:.2f}s after its start)"
            )
        elif kind == EventType.INTENT_ENDED:
            flush()
            lines.append(
                f"{_when(ev['t'], t0)}  the client is done: {ev['status']} after {ev['attempts']} attempts"
            )
    flush()
    lines.append(f"{'':9}  effects found: {effects} -> {verdict}")
    return lines


def _point_line(ev: dict[str, Any]) -> str:
    point = ev["point"]
    held = ": HELD, the pod is killed here" if ev["held"] else ""
    if ev.get("writes"):
        how = "autocommit" if ev.get("autocommit") else "COMMIT"
        return f"{point}: committed ({how}) {'; '.join(ev['writes'])}{held}"
    if point.startswith("downstream"):
        key = ev.get("key")
        said = f"with key {key}" if key else "without a key"
        replay = ", a replay" if ev.get("replayed") else ""
        return f"{point}: the sink recorded a call {said}{replay}{held}"
    what = {"request": "the request reached the server", "response": "the server's answer reached the proxy"}
    return f"{point}: {what.get(point, point)}{held}"


def story(exploration: Exploration, result: PointResult) -> list[str]:
    """The timeline of the try a finding is told by."""
    intent = result.example(exploration.verdicts)
    events = intent_events(exploration.run_dir, intent)
    return timeline(events, exploration.effects.get(intent, 0), exploration.verdicts[intent])


def as_json(exploration: Exploration) -> dict[str, Any]:
    points = []
    for p in exploration.points:
        last = p.path[-1]
        entry: dict[str, Any] = {
            "point": p.name,
            "kind": last.kind.value,
            "index": last.index,
            "depth": len(p.path),
            "tries": p.tries,
            "held": p.held,
            "verdicts": {k: v for k, v in p.verdicts.items() if v},
            "finding": None if p.finding is None else p.finding.value,
        }
        if len(p.path) > 1:
            entry["after"] = path_name(p.path[:-1])
        if p.finding is not None:
            entry["fix"] = fix(exploration, p)
            entry["reproducer"] = reproducer_name(p)
        points.append(entry)
    return {
        "scenario": exploration.scenario.name,
        "run_dir": str(exploration.run_dir),
        "repeat": exploration.repeat,
        "seconds": round(exploration.seconds, 3),
        "clean_call": [p.name for p in exploration.clean],
        "points": points,
        "clean_calls": {k: v for k, v in exploration.clean_calls.items() if v},
    }


def render_markdown(exploration: Exploration) -> str:
    parts = [
        f"# Crash points: {exploration.scenario.name}\n",
        f"**{summary_line(exploration)}**\n",
        f"The clean call passed: {', '.join(p.name for p in exploration.clean)}. Each point was held in "
        f"{exploration.repeat} tries: the pod SIGKILLed there, restarted, and the call retried with the "
        f"same key and a new request id. Run: `{exploration.run_dir}`.\n",
        render_table(exploration),
        "",
    ]
    for result in exploration.findings:
        assert result.finding is not None
        parts += [
            f"## {result.name}: {result.finding.value} in {result.verdicts[result.finding.value]} of "
            f"{result.tries} tries\n",
            "One try:\n",
            "```",
            *story(exploration, result),
            "```\n",
            f"**Fix.** {fix(exploration, result)}\n",
            f"Reproduce it: `mcp-chaos run {exploration.run_dir / reproducer_name(result)}`\n",
        ]
    return "\n".join(parts)


def render_terminal(exploration: Exploration) -> str:
    """The table, then for each finding its fix, one try's timeline and its reproducer, then the summary."""
    lines = [render_table(exploration)]
    for result in exploration.findings:
        lines.append(f"\n{result.name}: {fix(exploration, result)}")
        lines += ["  " + line for line in story(exploration, result)]
        lines.append(f"  reproduce: mcp-chaos run {exploration.run_dir / reproducer_name(result)}")
    lines.append(f"\n{summary_line(exploration)}")
    return "\n".join(lines)


def json_text(exploration: Exploration) -> str:
    """:func:`as_json` as the text of a file (``--json``)."""
    return json.dumps(as_json(exploration), indent=2, ensure_ascii=False) + "\n"


def write_reports(exploration: Exploration) -> Path:
    """``crashpoints.md`` and a reproducer per finding, into the run directory; the report's path."""
    write_reproducers(exploration, exploration.run_dir)
    path = exploration.run_dir / CRASHPOINTS_MD
    path.write_text(render_markdown(exploration), encoding="utf-8")
    return path
