"""What ``crashpoints`` shows: the point × verdict table and, for each finding, what it says and one try.

The table is the same on the terminal and in ``crashpoints.md``; ``as_json`` is
its machine-readable twin. A finding is told in three parts: the advice for its
point (:mod:`harness.crashpoints.advice`: the statements the crash came after,
what to change there), the meaning and fix of its (verdict, cause) class
(:mod:`harness.audit.fixes`), and the story of one try as ``mcp-chaos explain``
tells any intent (:func:`harness.audit.auditor.story_of`), whose attempts list
the hold points they passed, the held one marked. One way to tell a try: a
reproducer's run or the exploration's own run dir explains the same.

The advice and the story quote the server (its statements, its replies), already
redacted in the history and cut to excerpts: the terminal gets them through the
CLI's ``terminal()``, ``crashpoints.md`` escaped (:func:`harness.sanitize.markdown`,
the story in a fenced block it cannot open a line of), the JSON through ``json_safe``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.audit.auditor import story_of
from harness.audit.causes import Cause, first_fault
from harness.audit.fixes import fix_for
from harness.audit.runfacts import keyed
from harness.audit.stories import Story
from harness.audit.summary import unavailable_fix
from harness.crashpoints.advice import advice
from harness.crashpoints.cost import medians
from harness.crashpoints.emit import reproducer_name, write_reproducers
from harness.crashpoints.explore import Exploration, PointResult
from harness.crashpoints.points import Crash, path_name
from harness.history import Verdict
from harness.report.stories import story_lines
from harness.report.tables import markdown_table
from harness.sanitize import bounded, json_safe, markdown

CRASHPOINTS_MD = "crashpoints.md"
COLUMNS = [v.value for v in Verdict]


def _columns(exploration: Exploration) -> list[str]:
    seen = {v for p in exploration.points for v in p.verdicts} | set(exploration.clean_calls)
    return [c for c in COLUMNS if c in seen]


def wiped_count(point: PointResult) -> int:
    """Intents acknowledged before the point's proven tries and lost to their crashes."""
    return sum(len(intents) for intents in point.wiped.values())


LABEL_LIMIT = 40
"""How much of what a point commits the table shows (``INSERT invoices``)."""
SAME_LIMIT = 60
"""How much of the points a state stands for the table shows (the report's JSON has them all)."""


def result_of(point: PointResult) -> str:
    """A row's result: UNAVAILABLE (the pod never answered again after a kill there), its finding,
    INCONCLUSIVE when too few of its tries are proven, or ``-``."""
    if point.unavailable is not None:
        return "UNAVAILABLE"
    if point.finding is not None:
        return point.finding.value.upper()
    return "INCONCLUSIVE" if point.inconclusive is not None else "-"


def render_table(exploration: Exploration) -> str:
    """One row per path planned (in the order tried), and one for the calls held nowhere. ``proven``:
    tries whose history shows the hold, the kill there and the answer withheld; only their verdicts are
    counted, the others are ``unproven`` (why: in the summary). Where points were crashed two ways, a
    ``crash`` column says which (a kill, or a power loss); ``same state``, where a try stands for other
    points that leave the same files, names them; ``wiped``, where a crash lost intents acknowledged
    before its try, counts them."""
    columns = _columns(exploration)
    crashes = any(pt.crash is Crash.POWER_LOSS for p in exploration.points for pt in p.path)
    same = any(p.same for p in exploration.points)
    wiped = any(p.wiped for p in exploration.points)
    rows: list[list[object]] = []
    for p in exploration.points:
        what = " → ".join(bounded(pt.label, LABEL_LIMIT) if pt.label else "" for pt in p.path).strip(" →")
        last = p.path[-1]
        rows.append(
            [
                path_name((*p.path[:-1], replace(last, crash=Crash.KILL))) if crashes else p.name,
                *([last.crash.value.replace("_", " ")] if crashes else []),
                what or "-",
                *([bounded(", ".join(p.same), SAME_LIMIT) or "-"] if same else []),
                f"{len(p.proven)}/{p.repeat}",
                *(p.verdicts[c] or "" for c in columns),
                *([wiped_count(p) or ""] if wiped else []),
                len(p.unproven) or "",
                result_of(p),
            ]
        )
    clean = exploration.clean_calls
    rows.append(
        [
            "(none: clean calls)",
            *(["-"] if crashes else []),
            "-",
            *(["-"] if same else []),
            sum(clean.values()),
            *(clean[c] or "" for c in columns),
            *([""] if wiped else []),
            "",
            "-",
        ]
    )
    head = ["point", *(["crash"] if crashes else []), "commits or writes", *(["same state"] if same else [])]
    head += ["proven", *columns, *(["wiped"] if wiped else []), "unproven", "result"]
    align = "l" + ("l" if crashes else "") + "l" + ("l" if same else "") + "r" + "r" * len(columns)
    align += ("r" if wiped else "") + "rl"
    return markdown_table(head, rows, align=align)


def conclusion(exploration: Exploration) -> str:
    """``finding``, ``inconclusive`` (no finding, and something it planned it could not prove) or
    ``no_finding``: what the exit code and the contract check follow."""
    if exploration.findings or exploration.unavailable:
        return "finding"
    return "inconclusive" if exploration.inconclusive else "no_finding"


def how_often(result: PointResult) -> str:
    """A finding's count: in how many of the point's tries, and how many intents acknowledged before them
    the crashes lost (``wiped``); a point may have only the latter."""
    assert result.finding is not None
    verdict = result.finding.value
    own, wiped = result.verdicts[verdict], len(result.wiped.get(verdict, []))
    said = [f"{verdict} in {own} of {result.tries} tries"] if own or not wiped else [verdict]
    if wiped:
        intents = "intent" if wiped == 1 else "intents"
        said.append(f"{wiped} {intents} acknowledged before its tries, lost to their crashes")
    return ": ".join(said) if not own else ", and ".join(said)


def summary_line(exploration: Exploration) -> str:
    """One line, the worst first: a pod that never answered again, then findings, then what it could
    not prove."""
    found = exploration.findings
    tries = sum(p.tries for p in exploration.points)
    stuck = [f"UNAVAILABLE after a kill at {p.name}: {p.unavailable}" for p in exploration.unavailable]
    if found or stuck:
        at = ", ".join(f"{p.name} ({p.finding.value if p.finding else ''})" for p in found)
        what = "; ".join([*stuck, *(["findings at " + at] if found else [])])
        # What is left unproven, counted as a person reads it: the states never tried are many states
        # (not one "thing"), the rest one reason each.
        untried = exploration.untried
        others = [r for r in exploration.inconclusive if not (untried and r.startswith("not tried:"))]
        if others:
            n = len(others)
            names = [reason.split(":", 1)[0] for reason in others]
            shown = ", ".join(names[:5]) + (", ..." if n > 5 else "")
            things = "thing" if n == 1 else "things"
            what += f"; and {n} {things} it could not prove ({shown}: see the report)"
        if untried:
            why = (
                f"the budget of {exploration.options.budget_s:g} s ran out: raise --budget to try them all"
                if exploration.ran_out
                else "the run stopped before them"
            )
            what += f"; and {len(untried)} of its {exploration.states} crash states not tried ({why})"
    elif exploration.inconclusive:
        what = "INCONCLUSIVE, no finding among what it proved: " + "; ".join(exploration.inconclusive)
    else:
        what = "no finding at any point, every try proven"
    return f"crashpoints: {coverage(exploration)}, {tries} tries in {exploration.seconds:.1f}s; {what}"


def coverage(exploration: Exploration) -> str:
    """How many points the exploration stands for and how many tries that took: ``14 crash points in 6
    distinct states``, or the paths tried where it was told which (``--only``)."""
    singles = [p for p in exploration.points if len(p.path) == 1]
    total = exploration.crash_points
    if not total or exploration.options.only is not None:
        return f"{len(exploration.points)} points"
    alike = sum(1 + len(p.same) for p in singles)
    later = len(exploration.points) - len(singles)
    more = f", and {later} in a retry's recovery" if later else ""
    untried = f" ({len(exploration.untried)} not tried)" if exploration.untried else ""
    if alike == len(singles) and not exploration.untried:
        return f"{total} crash points, each a state of its own{more}"
    return f"{total} crash points in {exploration.states} distinct states{untried}{more}"


def deferred_line(exploration: Exploration) -> str | None:
    """The recovery paths (a crash in a retry of a crash) found and left when the budget ran out: not a
    gap in what the call's own states proved, but what a longer exploration would try."""
    if not exploration.deferred:
        return None
    return (
        f"Not explored: {', '.join(exploration.deferred)} (crashes in a retry's recovery; the budget of "
        f"{exploration.options.budget_s:g} s ran out before them: raise --budget to try them)."
    )


def unavailable_fix_of(exploration: Exploration, result: PointResult) -> str:
    """The fix for the pod found unavailable after the kill at ``result``'s point, from what its log and
    data directory showed (``(its log shows a lock file: "..."): remove stale locks ...``)."""
    summary = exploration.run_of(result).audit.summary
    return unavailable_fix(summary.unavailable, [u.path for u in summary.unreadable])


def story(exploration: Exploration, result: PointResult) -> Story:
    """The auditor's story of the try a finding is told by: its attempts, the points each passed (the
    held one marked), the kill, the answers, the effects; with its class's meaning and fix, as the point
    reads it (:func:`as_the_point_reads`)."""
    run = exploration.run_of(result)
    intent = result.example(run.verdicts)
    return as_the_point_reads(story_of(run.audit, intent), run.verdicts.get(intent), run)


def as_the_point_reads(told: Story, verdict: str | None, run: Exploration) -> Story:
    """The story under the verdict its point counted, so that it never contradicts its heading.

    An intent a later try's crash took effects of is judged on what the reads saw
    before (a duplicate seen twice is its point's duplicate), while the auditor
    reads the end of the run (lost, vanished): its cause and fix are then the
    point's verdict's, from the faults that hit its own attempts, and what the
    end of the run shows is said after.
    """
    if verdict is None or verdict == told.verdict:
        return told
    rows = run.audit.judged.rows_of([told.intent])
    faults = str(rows.column("faults")[0].as_py() or "") if "faults" in rows.column_names else ""
    cause = first_fault(faults) or Cause.NO_FAULT.value
    later = f"{told.verdict} ({told.cause}): a later try's crash took what the reads before it saw stored"
    fix = fix_for(verdict, cause, keyed=keyed(run.scenario))
    return replace(told, verdict=verdict, cause=cause, fix=fix, later=later)


def told(exploration: Exploration, result: PointResult) -> list[str]:
    """What a finding says, as plain lines: the point's advice, the class's fix, one try's story."""
    one = story(exploration, result)
    lines = [*meaning(exploration, result, one), "one try:"]
    return lines + ["  " + line for line in story_lines(one, fix=False)]


def meaning(exploration: Exploration, result: PointResult, one: Story) -> list[str]:
    """The point's advice, then its class's meaning and fix (what ``explain`` says of the class)."""
    lines = [f"at this point: {advice(exploration, result)}"]
    if one.fix is not None:
        lines += [f"{one.verdict} · {one.cause}: {one.fix.meaning}", f"fix: {one.fix.fix}"]
    return lines


def as_json(exploration: Exploration) -> dict[str, Any]:
    points = []
    for p in exploration.points:
        last = p.path[-1]
        entry: dict[str, Any] = {
            "point": p.name,
            "kind": last.kind.value,
            "index": last.index,
            "depth": len(p.path),
            "label": last.label,
            "crash": last.crash.value,
            "same_state": list(p.same),
            "tries": p.tries,
            "proven": len(p.proven),
            "repeat": p.repeat,
            "verdicts": {k: v for k, v in p.verdicts.items() if v},
            "wiped": {k: len(v) for k, v in p.wiped.items() if v},
            "unproven": {str(i): why for i, why in sorted(p.unproven.items())},
            "unproven_verdicts": {k: v for k, v in p.unproven_verdicts.items() if v},
            "finding": None if p.finding is None else p.finding.value,
            "inconclusive": p.inconclusive,
            "unavailable": p.unavailable,
        }
        if len(p.path) > 1:
            entry["after"] = path_name(p.path[:-1])
        if p.finding is not None:
            one = story(exploration, p)
            entry["intent"] = one.intent
            entry["cause"] = one.cause
            entry["advice"] = advice(exploration, p)
            if one.fix is not None:
                entry["meaning"], entry["fix"] = one.fix.meaning, one.fix.fix
            entry["reproducer"] = reproducer_name(p)
        points.append(entry)
    return {
        "scenario": exploration.scenario.name,
        "run_dir": str(exploration.run_dir),
        "job_runs": [str(job.run_dir) for job in exploration.jobs],
        "repeat": exploration.repeat,
        "budget_s": exploration.options.budget_s,
        "crash_points": exploration.crash_points,
        "states": exploration.states,
        "ran_out": exploration.ran_out,
        "seconds": round(exploration.seconds, 3),
        "try_cost": {
            "tries": len(exploration.costs),
            "median_s": {k: round(v, 3) for k, v in medians(exploration.costs).items()},
        },
        "conclusion": conclusion(exploration),
        "inconclusive": exploration.inconclusive,
        "unavailable": [p.name for p in exploration.unavailable],
        "clean_call": [p.name for p in exploration.clean],
        "clean_call_labels": [p.label for p in exploration.clean],
        "untried": exploration.untried,
        "deferred": exploration.deferred,
        "points": points,
        "clean_calls": {k: v for k, v in exploration.clean_calls.items() if v},
    }


def render_markdown(exploration: Exploration) -> str:
    parts = [
        f"# Crash points: {exploration.scenario.name}\n",
        f"**{summary_line(exploration)}**\n",
        f"The clean call passed: {', '.join(p.name for p in exploration.clean)}. {states_said(exploration)}"
        f"Each was held in {exploration.repeat} {'try' if exploration.repeat == 1 else 'tries'}: the pod "
        "SIGKILLed there, restarted, and the call retried with the same key and a new request id. A try "
        "is counted (proven) only where the history shows the hold at the planned point, the kill while "
        f"held and the answer withheld from the client. {runs(exploration)}\n",
        render_table(exploration),
        "",
    ]
    if (cost := cost_section(exploration)) is not None:
        parts += [cost, ""]
    if (later := deferred_line(exploration)) is not None:
        parts += [markdown(later), ""]
    for result in exploration.unavailable:
        parts += [
            f"## {result.name}: unavailable\n",
            f"Killed at this point and restarted, the pod answered no call again, so the exploration "
            f"stopped: {markdown(result.unavailable or '')}.\n",
            f"**Fix** {markdown(unavailable_fix_of(exploration, result))}.\n",
        ]
    if exploration.inconclusive:
        parts += ["## Not proven\n", *(f"- {markdown(r)}" for r in exploration.inconclusive), ""]
    for result in exploration.findings:
        assert result.finding is not None
        one = story(exploration, result)
        parts += [
            f"## {result.name}: {how_often(result)}\n",
            f"**At this point.** {markdown(advice(exploration, result))}\n",
            *(
                [
                    f"**{one.verdict} · {markdown(one.cause)}.** {markdown(one.fix.meaning)}.\n",
                    f"**Fix.** {markdown(one.fix.fix)}.\n",
                ]
                if one.fix is not None
                else []
            ),
            f"One try (`mcp-chaos explain {exploration.run_of(result).run_dir} {one.intent}`; times in "
            "seconds since the "
            "run started):\n",
            "```text",
            *story_lines(one, fix=False),
            "```\n",
            f"Reproduce it: `mcp-chaos run {exploration.run_dir / reproducer_name(result)}`\n",
        ]
    return "\n".join(parts)


def states_said(exploration: Exploration) -> str:
    """What the states are, where some stand for more than one point."""
    if not any(p.same for p in exploration.points):
        return ""
    return (
        f"Its {coverage(exploration)}: points that leave the same files and bytes after the crash (and "
        "after a power loss's rollback) are one state, tried at its first point (the table's `same "
        "state` names the others). "
    )


def runs(exploration: Exploration) -> str:
    """Where the exploration's runs are: one, or one per copy of the target (``--jobs``)."""
    if not exploration.jobs:
        return f"Run: `{exploration.run_dir}`."
    names = ", ".join(f"`{job.run_dir.name}`" for job in exploration.jobs)
    return (
        f"Explored in {len(exploration.jobs)} copies of the target side by side (`--jobs`), each a run of "
        f"its own in `{exploration.run_dir}`: {names}; each point's tries were made in one of them."
    )


def cost_section(exploration: Exploration) -> str | None:
    """ "What a try cost": the median seconds of each phase of a try (:mod:`harness.crashpoints.cost`),
    so that a user sees what a slow restart, ``--repeat`` or ``--jobs`` is worth."""
    found = medians(exploration.costs)
    if not found:
        return None
    rows = [[phase, meaning, f"{found[phase]:.3f}"] for phase, meaning in PHASE_MEANINGS.items()]
    rows.append(["total", "a try, all of it", f"{found['total']:.3f}"])
    copies = f" in {len(exploration.jobs)} copies side by side" if exploration.jobs else ""
    return "\n".join(
        [
            "## What a try cost\n",
            f"Medians over {len(exploration.costs)} tries, in seconds; the exploration took "
            f"{exploration.seconds:.1f} s{copies}.\n",
            markdown_table(["phase", "from, to", "median s"], rows, align="llr"),
        ]
    )


PHASE_MEANINGS = {
    "kill": "the kill while held, to the pod's exit",
    "restart": "the exit, to the pod ready again",
    "retry": "ready, to the call answered (the client's retries)",
    "audit": "the store read around the try, and its share of the run's audit",
}
"""What each phase of :data:`harness.crashpoints.cost.PHASES` measures, as the report says it."""


def render_terminal(exploration: Exploration) -> str:
    """The table, then for each finding what it says, one try's story and its reproducer, then the
    summary (the CLI prints it through ``terminal()``)."""
    lines = [render_table(exploration)]
    if (later := deferred_line(exploration)) is not None:
        lines.append(later)
    for result in exploration.unavailable:
        lines += [
            "",
            f"{result.name}: unavailable after the kill: {result.unavailable}",
            f"  fix {unavailable_fix_of(exploration, result)}",
        ]
    for result in exploration.findings:
        lines += ["", f"{result.name}:", *("  " + line for line in told(exploration, result))]
        lines.append(f"  reproduce: mcp-chaos run {exploration.run_dir / reproducer_name(result)}")
    lines.append(f"\n{summary_line(exploration)}")
    return "\n".join(lines)


def json_text(exploration: Exploration) -> str:
    """:func:`as_json` as the text of a file (``--json``): strings that can be written as UTF-8."""
    return json.dumps(json_safe(as_json(exploration)), indent=2, ensure_ascii=False) + "\n"


def write_reports(exploration: Exploration) -> Path:
    """``crashpoints.md`` and a reproducer per finding, into the run directory; the report's path."""
    write_reproducers(exploration, exploration.run_dir)
    path = exploration.run_dir / CRASHPOINTS_MD
    path.write_text(render_markdown(exploration), encoding="utf-8")
    return path
