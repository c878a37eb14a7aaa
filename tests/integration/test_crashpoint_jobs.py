"""``crashpoints --jobs``: an exploration in two copies of a real target gives the table of one copy.

Each comparison explores the same scenario twice, in one copy and in two (each with its own run,
PostgreSQL cluster or data directory), and compares what a user reads: the states in their order,
each one's verdicts and proven tries and the points it stands for, what was not tried. The keyed
design has paths of two (a crash in a retry's recovery): the copies find them apart, the merge must
put them in the same order. Speed is not asserted here (``bench``'s ``crashpoints_jobs`` measures it).
"""

from __future__ import annotations

import asyncio
import io
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from harness.crashpoints import jobs as crash_jobs
from harness.crashpoints.cost import PHASES
from harness.crashpoints.explore import Exploration
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.render import as_json, render_markdown, summary_line
from harness.scenario import parse_scenario
from tests.helpers.cli import mcp_chaos
from tests.helpers.processes import alive
from tests.integration.test_crashpoints import cli, clusters_of, gone, history_pids, on_postgres, started_pids
from tests.quality.test_file_crash_points import notes_scenario

pytestmark = pytest.mark.integration


def explored(
    data: dict[str, Any], results: Path, jobs: int, *, repeat: int, budget_s: float = 120
) -> Exploration:
    options = ExploreOptions(repeat=repeat, budget_s=budget_s, jobs=jobs)
    prepared = crash_jobs.prepare(parse_scenario(data), results, options, run_id=f"jobs-{jobs}")
    return asyncio.run(crash_jobs.explore_jobs(prepared, out=io.StringIO(), progress_interval_s=None))


def seen(found: Exploration) -> dict[str, Any]:
    """What a user compares: each point in its row's order with its verdicts and proven tries, and
    what the exploration did not try."""
    rows = [
        (
            p.name,
            p.path[-1].label,
            {v: n for v, n in p.verdicts.items() if n},
            len(p.proven),
            p.repeat,
            p.same,
        )
        for p in found.points
    ]
    return {"rows": rows, "untried": found.untried, "deferred": found.deferred, "clean": found.clean}


@pytest.mark.postgres
def test_two_copies_of_keyed_on_postgres_give_the_table_of_one(tmp_path: Path, postgres_server: None) -> None:
    """5 points of the clean call, each its own state (a database's commits), and the retries' paths of
    two after them."""
    one = explored(on_postgres("keyed"), tmp_path, 1, repeat=2)
    two = explored(on_postgres("keyed"), tmp_path, 2, repeat=2)
    assert [len(p.path) for p in one.points][:5] == [1, 1, 1, 1, 1]
    assert len(one.points) > 5  # the merge has paths of two to order
    assert seen(two) == seen(one)
    assert [f.name for f in two.findings] == [f.name for f in one.findings]
    assert two.findings[0].name == "db_commit#2"  # keyed read-then-write: a duplicate at its insert
    assert [job.run_dir.name for job in two.jobs] == ["job-1", "job-2"]
    assert {p.explored_in.run_dir.name for p in two.points if p.explored_in} == {"job-1", "job-2"}
    markdown = render_markdown(two)
    assert f"mcp-chaos explain {two.run_of(two.findings[0]).run_dir} " in markdown  # the copy that ran it
    assert "## What a try cost" in markdown
    costs = as_json(two)["try_cost"]
    assert costs["tries"] == sum(len(p.proven) for p in two.points)
    assert set(costs["median_s"]) == {*PHASES, "total"}
    assert costs["median_s"]["restart"] > 0
    for job in two.jobs:  # each copy stopped its pods and its own cluster
        for pid in started_pids(job):
            assert not alive(pid)


def test_two_copies_of_a_file_store_give_the_table_of_one(tmp_path: Path) -> None:
    """The notes server rewriting its JSON-lines file in place: a kill at its write loses the notes."""
    data = notes_scenario({"NOTES_SAVE": "in_place"})
    one = explored(data, tmp_path, 1, repeat=1)
    two = explored(data, tmp_path, 2, repeat=1)
    assert seen(two) == seen(one)
    assert [f.name for f in two.findings] == [f.name for f in one.findings]
    assert [f.finding for f in two.findings] == [f.finding for f in one.findings]
    # A power loss before the call takes back the notes acknowledged before it (nothing is fsynced);
    # a kill at the write finds the file cut, not yet written: no notes.
    assert [f.name for f in two.findings] == ["request@power_loss", "fs_write#1"]
    assert not one.untried


def test_two_copies_with_no_budget_leave_the_same_states_untried(tmp_path: Path) -> None:
    """``--budget 0``: the clean call, its states planned and none tried, in either; the states left out
    are counted as states, not as one thing it could not prove."""
    data = notes_scenario({"NOTES_SAVE": "in_place"})
    one = explored(data, tmp_path, 1, repeat=1, budget_s=0)
    two = explored(data, tmp_path, 2, repeat=1, budget_s=0)
    assert seen(two) == seen(one)
    assert one.points == []
    assert one.ran_out
    assert one.untried[:2] == ["request", "request@power_loss"]
    assert one.states == len(one.untried) == 4
    line = summary_line(one)
    assert "INCONCLUSIVE, no finding among what it proved: not tried: 4 crash states (request," in line, line
    assert "the budget of 0 s ran out: 0 of 4 crash states tried" in line


@pytest.mark.postgres
def test_ctrl_c_with_two_copies_leaves_nothing_of_either(tmp_path: Path, postgres_server: None) -> None:
    proc = cli(tmp_path, on_postgres("keyed"), "--repeat", "3", "--jobs", "2")
    runs = [tmp_path / "r" / "cp" / f"job-{k}" for k in (1, 2)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(len(history_pids(run)) >= 3 for run in runs):
        time.sleep(0.05)  # in the middle: in each copy, PostgreSQL, the pod, the pod again after a kill
    clusters = clusters_of(proc.pid)
    assert len(clusters) == 2  # a cluster per copy
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    pids = [pid for run in runs for pid in history_pids(run)]
    assert len(pids) >= 6
    assert gone(pids, clusters), f"left: {[p for p in pids if alive(p)]}, {clusters}"


@pytest.mark.parametrize("given", ["0", "-1", "two", "1.5", ""])
def test_jobs_that_is_no_count_of_copies_is_refused_in_one_line(tmp_path: Path, given: str) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\n")  # never read: --jobs is refused first
    done = mcp_chaos("crashpoints", scenario, "--jobs", given, "--results", tmp_path / "r")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"--jobs {given!r}: give the number of copies of the target to explore in" in line
    assert not (tmp_path / "r").exists()
