"""``crash_points``: a crash at every distinct crash state of a call, held by the harness (no failpoint).

The exploration of ``mcp-chaos crashpoints``, with its options and defaults (``--repeat``, ``--budget``,
``--power-loss``, ``--jobs``), preflight included: a scenario whose effect source cannot see the call's
effect is an error in seconds, before anything is explored."""

from __future__ import annotations

import io
from typing import Any

from harness.contract.framework import Check, CheckResult, CheckVerdict, Options, Seen, check
from harness.contract.session import ContractSession
from harness.crashpoints import explore as crash_explore
from harness.crashpoints import jobs as crash_jobs
from harness.crashpoints import render as crash_render
from harness.crashpoints.advice import advice
from harness.errors import PreflightError


@check(
    "crash_points",
    "a crash at every distinct crash state of a call (no failpoint): each retry takes effect exactly once",
)
async def crash_points(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    if (why := crash_explore.unexplorable(s.scenario)) is not None:
        return c.not_applicable(why)
    planned = crash_jobs.prepare(s.scenario, s.run_dir, o.explore, run_id=c.id)
    try:
        found = await crash_jobs.explore_jobs(planned, out=io.StringIO(), progress_interval_s=None)
    except PreflightError as exc:  # the scenario cannot see the call's effect: nothing to explore
        return CheckResult(c.id, c.title, CheckVerdict.ERROR, exc.message)
    report = crash_render.write_reports(found)
    evidence: dict[str, Any] = {
        "report": str(report),
        "clean call": [p.name for p in found.clean],
        "points": {p.name: {v: n for v, n in p.verdicts.items() if n} for p in found.points},
        "proven tries": {p.name: f"{len(p.proven)}/{p.repeat}" for p in found.points},
        "tries per point": found.repeat,
        "coverage": crash_render.coverage(found),
        "seconds": round(found.seconds, 1),
    }
    seen.repeated[c.id] = max((found.run_of(p).effects[i] for p in found.points for i in p.proven), default=0)
    if found.unavailable:
        stuck = found.unavailable[0]
        return c.failed(
            f"killed at {stuck.name}, the pod never answered again: {stuck.unavailable} (see {report})",
            evidence,
        )
    if found.findings:
        first = found.findings[0]
        assert first.finding is not None
        more = f" (and {len(found.findings) - 1} more points)" if len(found.findings) > 1 else ""
        evidence["advice"] = advice(found, first)
        return c.failed(
            f"a crash at {first.name} gave {first.finding.value} in {first.verdicts[first.finding.value]} of "
            f"{len(first.proven)} proven tries{more}: {advice(found, first)} (one try's story and a "
            f"reproducer: {report})",
            evidence,
        )
    if found.inconclusive:
        evidence["not proven"] = found.inconclusive
        return CheckResult(
            c.id,
            c.title,
            CheckVerdict.ERROR,
            f"inconclusive, no finding among what was proven: {found.inconclusive[0]}"
            + (
                f" (and {len(found.inconclusive) - 1} more; see {report})"
                if len(found.inconclusive) > 1
                else ""
            ),
            evidence,
        )
    shared = f" ({crash_render.coverage(found)})" if any(p.same for p in found.points) else ""
    return c.passed(
        f"held and killed at {len(found.points)} points ({', '.join(p.name for p in found.points)}), "
        f"{found.repeat} proven {'try' if found.repeat == 1 else 'tries'} each: every retry took effect "
        f"exactly once{shared}",
        evidence,
    )
