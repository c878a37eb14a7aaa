"""Findings in words: each (verdict, cause) class with its meaning, its fix and its stories.

A story is a few lines a person reads top to bottom: the intent (and its trace, in a
traced run), each attempt (request id, pod, the span its ``traceparent`` named, when,
outcome, the reply or error text), what landed on it,
the checkpoint reads that saw its effect and the one that did not, where it
vanished, the fix. The same lines go to the terminal (``mcp-chaos explain``) and,
in a fenced block, to report.md: server text is excerpted to one line without control
characters (:mod:`harness.sanitize`) and never opens a line, so it cannot break out of the block.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.audit.control import CONTROL
from harness.audit.stories import FindingClass, Passed, Step, Story, lost_to_another_call
from harness.audit.summary import Summary
from harness.crashpoints.points import phrase
from harness.faultkinds.registry import REPLAYED_BY_KILLS
from harness.sanitize import bounded, plain


def _seconds(t: float | None) -> str:
    return "never ended" if t is None else f"{t:.3f}s"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _said(step: Step) -> str:
    said = step.outcome or "no answer"
    if step.detail:
        said += f" {step.detail}"
    if step.code:
        said += f" code {plain(step.code)}"
    if step.text:
        said += f": {bounded(step.text)!r}"  # repr: no control character, quotes show where it ends
        if step.reads_as_failure:
            said += " (an ok reply that reads as a failure)"
    return said


def _passed(passed: Passed) -> str:
    """A hold point an attempt passed, on a line of its own under the attempt."""
    if passed.answer is not None:
        what = f"{bounded(passed.answer)}, no answer to the tool (not a point)"
    elif passed.statements:
        reads = " (reads only)" if passed.wrote == "no" else ""
        what = f"committed{reads} " + "; ".join(repr(bounded(w)) for w in passed.statements)
    elif passed.point.startswith("downstream"):
        what = f"{phrase(passed.point)} " + (
            f"with key {bounded(passed.key)!r}" if passed.key else "without a key"
        )
        what += ", deduplicated by it" if passed.replayed else ""
    elif passed.label is not None:
        what = f"reached ({bounded(passed.label)})"
    else:
        what = phrase(passed.point)
    if passed.ambiguous:
        what += ", or another attempt open then did (it could not be told whose)"
    held = ": HELD, the pod SIGKILLed here" if passed.held else ""
    return f"    {passed.point}: {what}{held}"


def _where(step: Step) -> str:
    """Where an attempt a fault hit had got to: its last point, and whether its answer came."""
    mine = [p for p in step.points if not p.ambiguous]
    if not mine or any(p.held for p in mine):  # a crash point's own line says where it was held
        return ""
    last = mine[-1]
    label = f" ({bounded(last.label)})" if last.label else ""
    after = "" if last.point == "response" or step.outcome == "ok" else ", before its answer"
    return f" after {last.point}{label}{after}"


def _attempt_lines(steps: Sequence[Step]) -> list[str]:
    """One line per attempt, then the hold points it passed; a run of alike attempts with nothing on
    them (refused while the pod was down) as one line."""
    lines = []
    k = 0
    while k < len(steps):
        step = steps[k]
        last = k
        while (
            last + 1 < len(steps)
            and not step.faults
            and not steps[last + 1].faults
            and not step.points
            and not steps[last + 1].points
            and (steps[last + 1].outcome, steps[last + 1].detail, steps[last + 1].text, steps[last + 1].pod)
            == (step.outcome, step.detail, step.text, step.pod)
        ):
            last += 1
        where = f", {step.pod}" if step.pod else ""
        if last > k:
            end = steps[last]
            spans = f", spans {step.span_id}…{end.span_id}" if step.span_id and end.span_id else ""
            lines.append(
                f"  attempts {step.attempt}–{end.attempt} "
                f"(requests {step.request_id}–{end.request_id}{where}{spans}) "
                f"{_seconds(step.start_t)} → {_seconds(end.end_t)}: {_said(step)}, {last - k + 1} times"
            )
        else:
            span = f", span {step.span_id}" if step.span_id else ""
            line = (
                f"  attempt {step.attempt} (request {step.request_id}{where}{span}) "
                f"{_seconds(step.start_t)} → {_seconds(step.end_t)}: {_said(step)}"
            )
            lines.append(line + (f"; hit by {', '.join(step.faults)}{_where(step)}" if step.faults else ""))
            lines += [_passed(p) for p in step.points]
        k = last + 1
    return lines


def story_lines(story: Story, *, fix: bool = True) -> list[str]:
    """The story of one intent, as plain lines (the first names it, the rest are indented)."""
    trace = f", trace {story.trace_id}" if story.trace_id else ""
    lines = [
        f"intent {story.intent} (marker {story.marker}, key {story.key}{trace}): "
        f"{story.verdict} ({story.cause}): "
        f"the client saw {story.client_status}, {_plural(story.effects, 'effect')} at the end",
        *_attempt_lines(story.steps),
    ]
    for read in story.reads:
        seen = f"failed ({plain(read.error)})" if read.error else f"saw {_plural(read.effects, 'effect')}"
        lines.append(f"  checkpoint read {read.when} {read.pod} @{read.t:.2f}s: {seen}")
    if not story.reads and story.reads_total:
        lines.append(f"  no checkpoint read saw an effect of it ({story.reads_total} reads)")
    if story.vanished_after:
        if story.cause == "lost_across_restart":
            lines.append(f"  lost across the restart after {story.vanished_after}, never seen stored")
        else:
            lines.append(f"  vanished after {story.vanished_after}")
    if story.later:
        lines.append(f"  at the end of the run: {story.later}")
    if fix and story.fix is not None:
        lines += [f"  what it means: {story.fix.meaning}", f"  fix: {story.fix.fix}"]
    return lines


def _code(text: str) -> str:
    """Text for an inline code span (a backtick would end it)."""
    return text.replace("`", "'")


def replay_command(found: FindingClass) -> str | None:
    """``mcp-chaos replay RUN_DIR INTENT`` for a class whose first intent a replay can make again (the run
    directory as the other hints name it: where the results went is the user's)."""
    replayable = found.verdict.value in ("duplicate", "lost", "applied_despite_error")
    if not found.stories or not replayable:
        return None
    if found.cause not in REPLAYED_BY_KILLS and not lost_to_another_call(found.stories[0]):
        return None
    return f"mcp-chaos replay RUN_DIR {found.stories[0].intent}"


def class_title(found: FindingClass) -> str:
    return f"{found.verdict.value} · {found.cause}: {_plural(found.count, 'intent')}"


def explain(summary: Summary) -> str:
    """``mcp-chaos explain RUN_DIR``: each class, its meaning and fix, and the story of its first intent."""
    if not summary.classes:
        return f"{summary.headline.sentence}\nnothing to explain: every intent took effect exactly once"
    lines = [summary.headline.sentence]
    for found in summary.classes:
        lines += ["", class_title(found)]
        if found.fix is not None:
            lines += [f"  what it means: {found.fix.meaning}", f"  fix: {found.fix.fix}"]
        if found.stories:
            first = found.stories[0]
            more = (
                f" (and {found.count - 1} more: mcp-chaos explain RUN_DIR INTENT)" if found.count > 1 else ""
            )
            lines += [f"  the first{more}:", *("  " + line for line in story_lines(first, fix=False))]
        if (command := replay_command(found)) is not None:
            lines.append(f"  reproduce with: {command}")
    return "\n".join(lines)


def findings_markdown(summary: Summary) -> list[str]:
    """The "Findings" section of report.md (empty for a run without any)."""
    if not summary.classes:
        return []
    lines = [
        "## Findings",
        "",
        "Each kind of finding (verdict · cause), what it means and how a server fixes it, and the first",
        "intents of it, attempt by attempt (times in seconds since the run started).",
    ]
    for found in summary.classes:
        lines += ["", f"### {class_title(found)}", ""]
        if found.fix is not None:
            lines += [f"- **What it means:** {found.fix.meaning}.", f"- **Fix:** {found.fix.fix}."]
        if (command := replay_command(found)) is not None:
            lines.append(f"- **Reproduce with:** `{command}` (the kill made again where it caught it)")
        if found.stories:
            lines += ["", "```text"]
            for story in found.stories:
                lines += [*story_lines(story, fix=False), ""]
            lines[-1] = "```"
    return lines


def replies_markdown(summary: Summary) -> list[str]:
    """The ok replies that read as failures, most common first (like the error table)."""
    if not summary.replies_as_failure:
        return []
    lines = [
        "## Replies that read as failures",
        "",
        f"{_plural(summary.replies_as_failure, 'ok reply')} read as a failure (isError false, the text says "
        "it failed); the most common:",
        "",
    ]
    lines += [f"- {r.count}× `{_code(plain(r.message))}`" for r in summary.failure_replies]
    return lines


def evidence_markdown(summary: Summary) -> list[str]:
    """Error-looking pod log lines around each pod fault."""
    if not summary.evidence:
        return []
    lines = ["## Pod logs around the faults", ""]
    for shown in summary.evidence:
        lines += [f"**{shown.fault}**", "", "```text"]
        if not shown.sections:
            lines.append("(the log has no start sections; its last error-looking lines)")
        lines += [f"before: {plain(line)}" for line in shown.before]
        lines += [f"after:  {plain(line)}" for line in shown.after]
        lines += ["```", ""]
    return lines[:-1]


def control_lines(summary: Summary) -> list[str]:
    """The control run's comparison, one sentence per verdict."""
    control = summary.control
    if control is None:
        return []
    if control.problem is not None:
        return [f"control run: {control.problem}"]
    named = "" if control.run_id == CONTROL else f" ({control.run_id})"
    return [f"control run{named}: {row.sentence}" for row in control.rows]
