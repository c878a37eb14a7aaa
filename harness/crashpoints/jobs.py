"""``crashpoints --jobs N``: one exploration in N copies of the target side by side, one table.

A try is paid in a restart of the target, and one copy of it restarts one at a
time: the only way to make an exploration faster than its restarts is more copies.
Each copy is a run of its own (``<run-dir>/job-K``), so it has what a run has of
its own: its pod and data directory, its PostgreSQL cluster, its effect sink, its
proxies and ports, its history and audit. Nothing is shared but the plan's rule
(:mod:`harness.crashpoints.paths`): every copy makes the clean call, and copy K
tries the clean call's paths at places K, K+N, ... of the plan, with the paths of
two its retries lead to.

The table does not depend on which copy finished first: the merge puts each
state where an exploration in one copy plans it (the clean call's states in the
plan's order, then the paths of two by the point they follow). What can differ from one copy is
what a crash finds of earlier tries' notes in a store (a copy's store holds only
its own): the intents a crash wiped are counted in the copy that crashed. The
clean calls row counts every copy's clean call.

The copies run in one event loop (a task each in a task group): when one fails,
or on Ctrl-C, the others are cancelled, and every copy's run stops what it started
as any run does.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, cast

from harness import rundir
from harness.crashpoints.explore import Exploration, Planned, PointResult, explore, exploring_scenario
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.points import parse_path, path_name
from harness.errors import PreflightError
from harness.run.preflight import preflight as checked
from harness.scenario import Scenario

JOB_DIR = "job-{}"
"""A copy's run directory inside the exploration's."""


def default_jobs() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Jobs:
    """An exploration ready to run in one or more copies of the target."""

    run_dir: Path
    """The exploration's directory: the copy's run directory itself where there is one copy."""
    copies: list[Planned]

    @property
    def first(self) -> Planned:
        return self.copies[0]


def prepare(
    scenario: Scenario, results_dir: Path, options: ExploreOptions, *, run_id: str | None = None
) -> Jobs:
    """The exploration in ``options.jobs`` copies (default: the cores): one run directory for one copy;
    for more, a directory holding one run directory per copy (``job-1``, ...), each with its share of
    the plan."""
    options = options.checked()
    jobs = options.jobs if options.jobs is not None else default_jobs()
    if jobs == 1:
        from harness.crashpoints.explore import prepare as prepare_one

        one = prepare_one(scenario, results_dir, options, run_id=run_id)
        return Jobs(one.run_dir, [one])
    exploring = [
        exploring_scenario(scenario, options, share=(job, jobs)) for job in range(1, jobs + 1)
    ]  # all refused before any directory is made
    name = rundir.checked_run_id(run_id) or rundir.new_run_id(exploring[0])
    parent = rundir.make_dir(results_dir, name)
    copies = [
        Planned(scenario, one, rundir.prepare_run_dir(parent, one, JOB_DIR.format(job)), options)
        for job, one in enumerate(exploring, start=1)
    ]
    return Jobs(parent, copies)


async def explore_jobs(
    jobs: Jobs,
    *,
    out: TextIO = sys.stderr,
    progress_interval_s: float | None = 1.0,
    preflight: bool = True,
) -> Exploration:
    """Explore in every copy at once and merge what they found into one exploration (see the module's
    docstring); the first error of a copy (the others cancelled) is the exploration's. ``preflight``: two
    real calls first, as ``run`` makes them (:mod:`harness.run.preflight`), so that a scenario whose
    effect source cannot see the call's effect fails in seconds, not after the exploration."""
    if preflight:
        done = await checked(jobs.first.scenario, jobs.run_dir, jobs.run_dir.name)
        out.write(done.describe() + "\n")
    if len(jobs.copies) == 1:
        return await explore(jobs.first, out=out, progress_interval_s=progress_interval_s)
    started = time.monotonic()
    n = len(jobs.copies)
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    explore(
                        copy, out=prefixed(out, f"job {k}/{n}: "), progress_interval_s=progress_interval_s
                    )
                )
                for k, copy in enumerate(jobs.copies, start=1)
            ]
    except BaseExceptionGroup as failed:
        raise _first_error(failed) from None
    return merge(jobs, [t.result() for t in tasks], time.monotonic() - started)


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a person should see of a failed task group: its first that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]


def merge(jobs: Jobs, found: list[Exploration], seconds: float) -> Exploration:
    """One exploration of the copies' explorations, ordered as an exploration in one copy orders it."""
    first = found[0]
    for k, other in enumerate(found[1:], start=2):
        if [p.name for p in other.clean] != [p.name for p in first.clean]:
            raise PreflightError(
                f"crashpoints: the clean call passed {', '.join(p.name for p in first.clean)} in job 1 and "
                f"{', '.join(p.name for p in other.clean)} in job {k}: copies of this target do not "
                f"take the same path, so they cannot share one plan; explore it with --jobs 1 (see "
                f"{jobs.run_dir})"
            )
    n, only = len(found), jobs.first.only
    singles: dict[str, int] = {}  # a clean call's path: its place in one copy's plan
    for k, copy in enumerate(found):
        mine = [name for name in copy.planned if only is not None or len(parse_path(name)) == 1]
        singles.update({name: i * n + k for i, name in enumerate(mine)})
    ordered: list[tuple[tuple[int, int, int], PointResult]] = []
    for k, copy in enumerate(found):
        for i, result in enumerate(copy.points):
            result.explored_in = copy
            if result.name in singles:  # the clean call's paths first, then the paths of two
                ordered.append(((0, singles[result.name], 0), result))
            elif result.name in copy.planned:
                ordered.append(((1, singles.get(path_name(result.path[:1]), len(singles)), i), result))
            else:
                ordered.append(((2, k, i), result))  # a path the plan never had
    ordered.sort(key=lambda item: item[0])
    clean_calls: Counter[str] = Counter()
    for copy in found:
        clean_calls.update(copy.clean_calls)
    ended = [f"job {k}: {copy.ended}" for k, copy in enumerate(found, start=1) if copy.ended]
    return Exploration(
        scenario=first.scenario,
        run_dir=jobs.run_dir,
        repeat=first.repeat,
        clean=first.clean,
        details=first.details,
        points=[result for _, result in ordered],
        clean_calls=clean_calls,
        verdicts=first.verdicts,
        effects=first.effects,
        audit=first.audit,
        seconds=seconds,
        not_passed=[name for name in only or () if name not in {r.name for _, r in ordered}],
        untried=sorted((name for copy in found for name in copy.untried), key=lambda name: singles[name]),
        deferred=[name for copy in found for name in copy.deferred],
        bypassed=next((copy.bypassed for copy in found if copy.bypassed is not None), None),
        ended="; ".join(ended) or None,
        options=first.options,
        crash_points=first.crash_points,
        ran_out=any(copy.ran_out for copy in found),
        clean_intent=first.clean_intent,
        planned=[result.name for _, result in ordered],
        costs=[cost for copy in found for cost in copy.costs],
        jobs=found,
    )


class Prefixed(io.TextIOBase):
    """A copy's progress and messages, each line prefixed with its copy (``job 2/4: ``), so that N copies
    writing to one stream stay readable; never a terminal, so a live panel becomes a line now and then."""

    def __init__(self, out: TextIO, prefix: str) -> None:
        self._out = out
        self._prefix = prefix
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._out.write(self._prefix + line + "\n")
        if lines:
            self._out.flush()
        return len(text)

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        self._out.flush()


def prefixed(out: TextIO, prefix: str) -> TextIO:
    """``out`` with each line prefixed: a text stream as far as a run's output needs (it writes lines and
    flushes, and asks whether it is a terminal)."""
    return cast(TextIO, Prefixed(out, prefix))
