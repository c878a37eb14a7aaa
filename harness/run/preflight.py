"""Preflight: two real calls before a run, proving the audit sees exactly one effect for each.

A scenario that gets the tool's arguments, the marker's field or the effect
query wrong costs a whole run and then reports every intent as lost. The
preflight runs the scenario itself, cut to two intents one after the other and
without faults, into a small run directory of its own (``<run-id>.preflight/``
inside the run's, kept as evidence), and audits it: both calls must succeed and
the effect source must count exactly one effect under each marker. Anything else
fails in seconds with what was seen. They are real calls with real effects; their
markers carry a namespace of their own, so they never mix with the run's intents.

Two calls, not one: a source that counts an effect twice often does so only once
the store holds more than one (a git repository logs its first commit nowhere
else; a file that keeps the last write beside the records), and a workload whose
calls overwrite each other (a fixed file name) shows only on the second call.

When the call succeeded and the source found nothing, either may be wrong: the
message quotes the reply (kept in the preflight's history, redacted and cut like
every server text) and says which is more likely to blame. Nothing in the data
directory changed during the calls points at the server, whatever its reply says
and in whatever language (it stored nothing, or stores elsewhere: under ``$HOME``,
a config directory); so does a reply that reads as a failure ("Database error: no
such table"); a reply that reads as a success, with the store changed, points at
the effect source.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import rundir
from harness.auditing import audit_and_report
from harness.effects.registry import source_of
from harness.errors import AuditError, PreflightError
from harness.faults.pacing import advise
from harness.history import EventType, Outcome, excerpt, read_history
from harness.replies import reads_as_failure
from harness.run.runner import execute
from harness.scenario import Scenario

SUFFIX = rundir.PREFLIGHT_SUFFIX


@dataclass(frozen=True, slots=True)
class Preflight:
    """A preflight that passed: what it called and how long it took."""

    tool: str
    markers: tuple[str, ...]
    source: str
    run_dir: Path
    seconds: float
    timing: Timing | None = None
    """The server's measured speed, and what it means for the run's planned kills."""

    def describe(self) -> str:
        return (
            f"preflight: {len(self.markers)} calls of {self.tool}, 1 effect under each marker "
            f"({self.source}), "
            f"{self.seconds:.1f}s; kept in {self.run_dir}"
        ) + (f"\n{self.timing.describe()}" if self.timing is not None else "")


@dataclass(frozen=True, slots=True)
class Timing:
    """How fast the server is, from the preflight's history: one call, one start."""

    call_s: float
    """The second (warm) call's round trip (attempt_started to attempt_ended): a first call may be slower."""
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
    """The scenario cut to two intents, one worker, no faults and no gate."""
    data = scenario.model_dump(mode="json")
    data["workload"].update(intents=CALLS, concurrency=1)
    data["client"]["max_attempts"] = min(3, data["client"]["max_attempts"])
    data["faults"] = {}
    data["gate"] = {}
    return Scenario.model_validate(data)


def source_name(scenario: Scenario) -> str:
    return f"audit.effects.{scenario.audit.effects.chosen[0]}"


CALLS = 2
"""How many calls a preflight makes, one after the other (the module's docstring says why two)."""

REPLY_LIMIT = 160
"""How much of the reply a preflight message quotes."""


MTIME_SLACK_S = 0.05
"""How much earlier than the first call a file's time may read and still count as changed by the calls:
the kernel stamps files from a coarse clock, a few milliseconds behind the one the history reads."""


def data_unchanged(scenario: Scenario, pf_dir: Path, events: list[dict[str, Any]]) -> bool:
    """Whether nothing in the preflight's data directory (names or bytes) changed once its calls began,
    for a store the scenario reads there; False when that cannot be told (a server the harness does not
    start, a store in PostgreSQL, the sink's records)."""
    target = scenario.target
    if target.url is not None or target.kubernetes is not None or scenario.services.postgres is not None:
        return False
    if "{data_dir}" not in str(scenario.audit.effects.model_dump()):
        return False
    run = next((e for e in events if e["type"] == EventType.RUN_STARTED), None)
    first = next((e for e in events if e["type"] == EventType.ATTEMPT_STARTED), None)
    if run is None or first is None or not isinstance(run.get("epoch_s"), int | float):
        return False
    since_ns = (run["epoch_s"] + first["t"] - MTIME_SLACK_S) * 1e9
    data = pf_dir / rundir.DATA
    try:
        return all(path.lstat().st_mtime_ns < since_ns for path in (data, *data.rglob("*")))
    except OSError:
        return False


def _blame(tool: str, reply: str | None, pf_dir: Path, *, unchanged: bool = False) -> tuple[str, str]:
    """What the call answered, quoted, and which side is more likely wrong, in words: the server when
    its reply reads as a failure or nothing in the data directory changed, else the effect source."""
    quoted = f"{tool} answered OK" + ("" if reply is None else f": {excerpt(reply, REPLY_LIMIT)!r}")
    if reply is not None and reads_as_failure(reply):
        return quoted, (
            "the reply reads as a failure, so the server most likely stored nothing and reported the "
            "failure as a success: look at the server (and its log in "
            f"{pf_dir / rundir.PODS}) before the effect source"
        )
    if unchanged:
        return quoted, (
            f"nothing in {{data_dir}} changed during the calls, so {tool} is the first suspect: the server "
            "stored nothing there, whatever its reply says (in any language), or keeps its store "
            "elsewhere (under $HOME or a config directory: point it into {data_dir} with its option "
            f"or environment variable); its log is in {pf_dir / rundir.PODS}"
        )
    if reply is None:
        return quoted, "check the effect source"
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
    events = list(read_history(pf_dir / rundir.HISTORY))
    markers = {e["intent"]: str(e["marker"]) for e in events if e["type"] == EventType.INTENT_STARTED}
    attempts = [e for e in events if e["type"] == EventType.ATTEMPT_ENDED]
    for intent in range(CALLS):
        _succeeded(tool, [a for a in attempts if a["intent"] == intent], pf_dir, intent)
    reply = next((str(a["reply"]) for a in attempts if a["outcome"] == Outcome.OK and "reply" in a), None)
    unchanged = data_unchanged(scenario, pf_dir, events)
    answered, blame = _blame(tool, reply, pf_dir, unchanged=unchanged)
    try:
        audit_and_report(pf_dir)  # its report.md is the evidence a person reads
        counts: Counter[str] = source_of(single.audit.effects).count(pf_dir)
    except AuditError as exc:
        raise PreflightError(f"preflight: {answered}; but {source} failed: {exc.message}; {blame}") from None
    ordered = tuple(markers.get(i, "?") for i in range(CALLS))
    for nth, marker in enumerate(ordered, 1):
        found = counts.get(marker, 0)
        if found == 0:
            seen = _seen(counts, ordered)
            check = (
                ": check the query (or path, or field) and that the argument holding {marker} is what the "
                "store keeps"
                if not unchanged and (reply is None or not reads_as_failure(reply))
                else ""
            )
            raise PreflightError(
                f"preflight: {answered}; but {source} found 0 effects for the preflight marker "
                f"{marker!r} (call {nth} of {CALLS}); {seen}; {blame}{check}"
            )
        if found != 1:
            raise PreflightError(
                f"preflight: call {nth} of {CALLS} of {tool} made {found} effects under marker {marker!r} by "
                f"{source}; it must count one effect per call (group by the marker, count rows of the "
                "business table; a files source must not read a copy of the record, as a log or a "
                "journal beside the store keeps)"
            )
    timing = measure(scenario, pf_dir / rundir.HISTORY)
    return Preflight(tool, ordered, source, pf_dir, time.monotonic() - started, timing)


def _succeeded(tool: str, attempts: list[dict[str, Any]], pf_dir: Path, intent: int) -> None:
    """PreflightError unless one of an intent's attempts was answered OK, naming the last answer."""
    if any(a["outcome"] == Outcome.OK for a in attempts):
        return
    last = attempts[-1] if attempts else {}
    said = f": {excerpt(str(last['message']), 200)}" if last.get("message") else ""
    what = f"{last.get('outcome', 'no answer')} ({last.get('detail', '')})" if last else "no answer"
    check = "check workload.tool and workload.arguments"
    if last.get("outcome") in (Outcome.TRANSPORT_ERROR, Outcome.TIMEOUT):
        # Not an answer to the arguments: the server went down, closed the call or never answered.
        check = f"the server did not answer the call: look at its log in {pf_dir / rundir.PODS}"
    elif "Mcp-Param-" in str(last.get("message", "")):
        # The headers come from the tool's listing (x-mcp-header): a listing that failed, or did
        # not list the tool, left the call without them, whatever its arguments.
        check = (
            f"the server wants {tool}'s x-mcp-header arguments as Mcp-Param-* headers, which a call "
            f"mirrors from tools/list: check that tools/list answers and lists {tool}"
        )
    which = "" if intent == 0 else f" (call {intent + 1} of {CALLS}, after the first succeeded)"
    raise PreflightError(
        f"preflight: the call of {tool} did not succeed{which}: {what}{said} "
        f"({check}; the preflight run is in {pf_dir})"
    )


def _seen(counts: Counter[str], ordered: tuple[str, ...]) -> str:
    """What the source counted instead, when a call's marker has no effect."""
    others = sorted(m for m in counts if counts[m] and m not in ordered)
    if others:
        example = excerpt(repr(others[0]), 60)
        return f"it counted effects only under other markers ({len(others)}, e.g. {example})"
    if any(counts.get(m) for m in ordered):
        return (
            "it counted the other call's effect but not this one's (does one call overwrite another: a "
            "fixed file name or record id in workload.arguments?)"
        )
    return "it counted no effects at all"
