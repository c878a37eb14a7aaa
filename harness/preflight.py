"""Preflight: one real call before a run, proving the audit sees exactly one effect for it.

A scenario that gets the tool's arguments, the marker's field or the effect
query wrong costs a whole run and then reports every intent as lost. The
preflight runs the scenario itself, cut to one intent without faults, into a
small run directory of its own (``<run-id>.preflight/`` inside the run's, kept
as evidence), and audits it: the call must succeed and the effect source must
count exactly one effect under its marker. Anything else fails in seconds with
what was seen. It is a real call with a real effect; its marker carries a
namespace of its own, so it never mixes with the run's intents.

When the call succeeded and the source found nothing, either may be wrong: the
message quotes the reply (kept in the preflight's history, redacted and cut like
every server text) and says which is more likely to blame. A reply that reads
as a failure ("Database error: no such table") points at the server; one that
reads as a success points at the effect source.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness import rundir
from harness.auditing import audit_and_report
from harness.effects.registry import source_of
from harness.errors import AuditError, PreflightError
from harness.faults.pacing import advise
from harness.history import EventType, Outcome, excerpt, read_history
from harness.replies import reads_as_failure
from harness.runner import execute
from harness.scenario import Scenario

SUFFIX = rundir.PREFLIGHT_SUFFIX


@dataclass(frozen=True, slots=True)
class Preflight:
    """A preflight that passed: what it called and how long it took."""

    tool: str
    marker: str
    source: str
    run_dir: Path
    seconds: float
    timing: Timing | None = None
    """The server's measured speed, and what it means for the run's planned kills."""

    def describe(self) -> str:
        return (
            f"preflight: 1 call of {self.tool}, 1 effect under its marker ({self.source}), "
            f"{self.seconds:.1f}s; kept in {self.run_dir}"
        ) + (f"\n{self.timing.describe()}" if self.timing is not None else "")


@dataclass(frozen=True, slots=True)
class Timing:
    """How fast the server is, from the preflight's history: one call, one start."""

    call_s: float
    """The successful call's round trip (attempt_started to attempt_ended)."""
    startup_s: float
    """The pod's start-up: from its start to ready (``pod_ready``'s ``after_s``)."""
    pacing: str | None = None
    """How the scenario's planned kills fit that speed (:func:`harness.faults.pacing.advise`)."""

    def describe(self) -> str:
        return self.pacing or (
            f"timing: the call took {self.call_s * 1000:.1f} ms; the server started in {self.startup_s:.1f}s"
        )


def measure(scenario: Scenario, history: Path) -> Timing | None:
    """The call's and the start-up's times, as the preflight's history recorded them."""
    began: dict[object, float] = {}
    call_s = startup_s = None
    for event in read_history(history):
        if event["type"] == EventType.ATTEMPT_STARTED:
            began[event["id"]] = event["t"]
        elif event["type"] == EventType.ATTEMPT_ENDED and event["outcome"] == Outcome.OK:
            call_s = event["t"] - began.get(event["id"], event["t"])
        elif event["type"] == EventType.POD_READY and startup_s is None:
            startup_s = event.get("after_s")
    if call_s is None or startup_s is None:
        return None
    return Timing(call_s, startup_s, advise(scenario, call_s=call_s, startup_s=startup_s))


def preflight_scenario(scenario: Scenario) -> Scenario:
    """The scenario cut to one intent, one worker, no faults and no gate."""
    data = scenario.model_dump(mode="json")
    data["workload"].update(intents=1, concurrency=1)
    data["client"]["max_attempts"] = min(3, data["client"]["max_attempts"])
    data["faults"] = {}
    data["gate"] = {}
    return Scenario.model_validate(data)


def source_name(scenario: Scenario) -> str:
    return f"audit.effects.{scenario.audit.effects.chosen[0]}"


REPLY_LIMIT = 160
"""How much of the reply a preflight message quotes."""


def _blame(tool: str, reply: str | None, pf_dir: Path) -> tuple[str, str]:
    """What the call answered, quoted, and which side is more likely wrong, in words."""
    if reply is None:
        return f"{tool} answered OK", "check the effect source"
    quoted = f"{tool} answered OK: {excerpt(reply, REPLY_LIMIT)!r}"
    if reads_as_failure(reply):
        return quoted, (
            "the reply reads as a failure, so the server most likely stored nothing and reported the "
            "failure as a success: look at the server (and its log in "
            f"{pf_dir / rundir.PODS}) before the effect source"
        )
    return quoted, "the reply reads as a success, so the effect source is more likely wrong"


async def preflight(scenario: Scenario, parent: Path, run_id: str) -> Preflight:
    """Run the preflight into ``<parent>/<run_id>.preflight``; PreflightError says what went wrong.

    ``run`` puts it inside the run's directory; ``validate --preflight`` under ``--results``.
    """
    started = time.monotonic()
    single = preflight_scenario(scenario)
    pf_dir = rundir.prepare_run_dir(parent, single, f"{run_id}{SUFFIX}")
    await execute(single, pf_dir, out=io.StringIO(), progress_interval_s=None)
    source = source_name(scenario)
    tool = scenario.workload.tool
    attempts = [e for e in read_history(pf_dir / rundir.HISTORY) if e["type"] == EventType.ATTEMPT_ENDED]
    started_events = [
        e for e in read_history(pf_dir / rundir.HISTORY) if e["type"] == EventType.INTENT_STARTED
    ]
    marker = str(started_events[0]["marker"]) if started_events else "?"
    if not any(a["outcome"] == Outcome.OK for a in attempts):
        last = attempts[-1] if attempts else {}
        said = f": {excerpt(str(last['message']), 200)}" if last.get("message") else ""
        what = f"{last.get('outcome', 'no answer')} ({last.get('detail', '')})" if last else "no answer"
        check = "check workload.tool and workload.arguments"
        if "Mcp-Param-" in str(last.get("message", "")):
            # The headers come from the tool's listing (x-mcp-header): a listing that failed, or did
            # not list the tool, left the call without them, whatever its arguments.
            check = (
                f"the server wants {tool}'s x-mcp-header arguments as Mcp-Param-* headers, which a call "
                f"mirrors from tools/list: check that tools/list answers and lists {tool}"
            )
        raise PreflightError(
            f"preflight: the call of {tool} did not succeed: {what}{said} "
            f"({check}; the preflight run is in {pf_dir})"
        )
    reply = next((str(a["reply"]) for a in attempts if a["outcome"] == Outcome.OK and "reply" in a), None)
    answered, blame = _blame(tool, reply, pf_dir)
    try:
        audit_and_report(pf_dir)  # its report.md is the evidence a person reads
        counts: Counter[str] = source_of(single.audit.effects).count(pf_dir)
    except AuditError as exc:
        raise PreflightError(f"preflight: {answered}; but {source} failed: {exc.message}; {blame}") from None
    found = counts.get(marker, 0)
    if found == 1:
        timing = measure(scenario, pf_dir / rundir.HISTORY)
        return Preflight(tool, marker, source, pf_dir, time.monotonic() - started, timing)
    if found == 0:
        others = sorted(m for m in counts if counts[m])
        seen = (
            f"it counted effects only under other markers ({len(others)}, "
            f"e.g. {excerpt(repr(others[0]), 60)})"
            if others
            else "it counted no effects at all"
        )
        check = (
            ": check the query (or path, or field) and that the argument holding {marker} is what the "
            "store keeps"
            if reply is None or not reads_as_failure(reply)
            else ""
        )
        raise PreflightError(
            f"preflight: {answered}; but {source} found 0 effects for the preflight marker "
            f"{marker!r}; {seen}; {blame}{check}"
        )
    raise PreflightError(
        f"preflight: one call of {tool} made {found} effects under marker {marker!r} by {source}; "
        "it must count one effect per call (group by the marker, count rows of the business table)"
    )
