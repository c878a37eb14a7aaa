"""Crash points for a server that keeps its state in files: the durability classes of file stores,
each found for what it is under a process kill and under a power loss.

``targets/notes`` saves its notes (``write_note``, an upsert by name: idempotent, so what is found
is durability, never a duplicate) in a JSON-lines file the way ``NOTES_SAVE`` says, or in SQLite
with ``NOTES_SQLITE_SYNC``. The file tracer holds the server before each of its file operations;
a power loss is the kill, then the data directory rolled back to what was fsynced. What a crash
loses of notes acknowledged before it is counted at the point that lost them (``wiped``).
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from harness.crashpoints.advice import advice
from harness.crashpoints.explore import REFUSED, Exploration, PointResult, explore, prepare
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.render import how_often, render_markdown, summary_line
from harness.scenario import parse_scenario
from tests.helpers.paths import ROOT
from tests.helpers.third_party import NEVER_BACK, REFUSER

pytestmark = pytest.mark.quality

NOTES = ROOT / "targets" / "notes" / "server.py"
R = 2


def notes_scenario(env: dict[str, str], *, sqlite: bool = False) -> dict[str, Any]:
    command = ["{python}", str(NOTES)]
    effects: dict[str, Any] = {"jsonl": {"path": "{data_dir}/notes.jsonl", "marker_field": "name"}}
    if sqlite:
        command += ["--db-path", "{data_dir}/notes.db"]
        query = "SELECT name AS marker, COUNT(*) AS effects FROM notes GROUP BY name"
        effects = {"sql": {"url": "sqlite:///{data_dir}/notes.db", "query": query}}
    else:
        env = {"NOTES_FILE": "{data_dir}/notes.jsonl", **env}
    return {
        "name": "notes-files",
        "seed": 5,
        "target": {"command": command, "env": {"NOTES_TRANSPORT": "http", **env}, "ready_timeout_s": 30},
        "workload": {
            "intents": 3,
            "tool": "write_note",
            "arguments": {"name": "{marker}", "content": "note {index}"},
        },
        "client": {"attempt_timeout_s": 10},
        "audit": {"effects": effects},
    }


BUDGET_S = 1800.0
"""Enough for every state of these calls on any machine: what is tried never depends on its speed."""


def crashpoints(
    data: dict[str, Any], tmp_path: Path, only: list[str] | None, *, repeat: int = R, power_loss: bool = True
) -> Exploration:
    only_these = tuple(only) if only else None
    options = ExploreOptions(repeat=repeat, budget_s=BUDGET_S, power_loss=power_loss, only=only_these)
    planned = prepare(parse_scenario(data), tmp_path, options)
    return asyncio.run(explore(planned, out=io.StringIO(), progress_interval_s=None))


def by_name(found: Exploration) -> dict[str, PointResult]:
    assert not found.inconclusive, found.inconclusive
    return {p.name: p for p in found.points}


def lost_everywhere(found: Exploration, names: list[str], *, at_least: int = R) -> None:
    """Each point lost acknowledged notes (``at_least``: one in each of its proven tries)."""
    points = by_name(found)
    for name in names:
        p = points[name]
        assert p.finding is not None, (name, p.verdicts, p.wiped)
        assert p.finding.value == "lost", (name, p.verdicts, p.wiped)
        assert len(p.proven) == R
        assert sum(map(len, p.wiped.values())) >= at_least, (name, p.wiped)


def clean(found: Exploration, names: list[str]) -> None:
    points = by_name(found)
    for name in names:
        assert points[name].finding is None, (name, points[name].verdicts, points[name].wiped)
        assert len(points[name].proven) == points[name].repeat


def test_a_file_rewritten_in_place_loses_at_a_write_under_a_kill(tmp_path: Path) -> None:
    found = crashpoints(notes_scenario({"NOTES_SAVE": "in_place"}), tmp_path, ["fs_truncate#1", "fs_write#1"])
    lost_everywhere(found, ["fs_write#1"])  # truncated, not yet written: read back as no notes at all
    clean(found, ["fs_truncate#1"])
    point = by_name(found)["fs_write#1"]
    assert point.path[0].label == "notes.jsonl"
    assert "rename it over the old one and fsync the directory" in advice(found, point)


def test_temp_and_rename_without_fsync_loses_only_under_a_power_loss(tmp_path: Path) -> None:
    only = ["fs_write#1", "fs_rename#1", "response", "fs_write#1@power_loss", "fs_rename#1@power_loss"]
    found = crashpoints(notes_scenario({"NOTES_SAVE": "rename"}), tmp_path, only)
    clean(found, ["fs_write#1", "fs_rename#1", "response"])
    lost_everywhere(found, ["fs_write#1@power_loss", "fs_rename#1@power_loss"])
    said = advice(found, by_name(found)["fs_rename#1@power_loss"])
    assert "never fsyncs what it writes" in said


def test_temp_fsync_rename_and_directory_fsync_loses_under_neither(tmp_path: Path) -> None:
    """Every point of the call, both ways (14 crash points), in its 6 distinct states, one try each:
    nothing is lost or repeated. A kill at the fsync leaves what one at the rename does; a power loss
    anywhere before the directory's fsync leaves the store as it was."""
    found = crashpoints(notes_scenario({"NOTES_SAVE": "durable"}), tmp_path, None, repeat=1)
    assert [p.name for p in found.clean if p.kind.value.startswith("fs_")] == [
        "fs_truncate#1",
        "fs_write#1",
        "fs_fsync#1",
        "fs_rename#1",
        "fs_fsync#2",
    ]
    assert (found.crash_points, found.states, len(found.points)) == (14, 6, 6)
    assert {p.name: p.same for p in found.points}["fs_fsync#1"] == ("fs_rename#1",)
    assert sum(1 + len(p.same) for p in found.points) == 14  # each point stood for by one try
    assert found.findings == []
    assert not found.inconclusive, found.inconclusive
    assert summary_line(found).startswith("crashpoints: 14 crash points in 6 distinct states, 6 tries in ")


@pytest.mark.parametrize(
    ("env", "window"),
    [
        ({"NOTES_FLAW": "torn_file"}, "fs_write#1"),  # the torn rewrite: the file cut, not yet written
        ({"NOTES_FLAW": "lost_update", "NOTES_SAVE": "in_place"}, "fs_write#1"),  # load, modify, save
        ({"NOTES_SAVE": "rename"}, "request@power_loss"),  # a rename never fsynced: nothing durable
    ],
    ids=["torn_rewrite", "load_modify_save", "rename_without_fsync"],
)
def test_every_state_of_a_file_store_is_tried_and_its_window_found(
    tmp_path: Path, env: dict[str, str], window: str
) -> None:
    """The options a user gets by default (one try per state, power losses on): every state of the call
    is tried, none left out, and the window that loses notes is among them (with the points it stands
    for, under a power loss every point of a call that never fsyncs)."""
    found = crashpoints(notes_scenario(env), tmp_path, None, repeat=1)
    assert not found.untried
    assert found.states == len(found.points) < found.crash_points
    assert sum(1 + len(p.same) for p in found.points) == found.crash_points
    lost = {p.name for p in found.findings if p.finding is not None and p.finding.value == "lost"}
    assert window in lost, (lost, summary_line(found))
    if window.endswith("@power_loss"):
        same = {p.name: p.same for p in found.points}[window]
        assert {"fs_rename#1@power_loss", "response@power_loss"} <= set(same)


def test_sqlite_with_its_defaults_explored_whole_shows_only_the_window_sqlite_documents(
    tmp_path: Path,
) -> None:
    """The default options on SQLite's defaults (a rollback journal, synchronous=FULL): 18 operations a
    call, 36 crash points in 17 distinct states, each tried. A kill loses nothing; the one finding is the
    power loss before the journal of the next call is durable, which brings the last commit's journal
    back (SQLite's EXTRA exists for it), found at the state every point up to that fsync stands for.
    Without power losses (``--no-power-loss``): no finding at all."""
    found = crashpoints(notes_scenario({}, sqlite=True), tmp_path, None, repeat=1)
    assert (found.crash_points, found.states, found.untried) == (36, 17, [])
    assert [p.name for p in found.findings] == ["request@power_loss"]
    same = {p.name: p.same for p in found.points}["request@power_loss"]
    assert len(same) == 10
    assert same[-1] == "fs_fsync#2@power_loss"  # the journal's directory made durable: a state after it
    kills = crashpoints(notes_scenario({}, sqlite=True), tmp_path / "kills", None, repeat=1, power_loss=False)
    assert (kills.crash_points, kills.states, kills.findings, kills.inconclusive) == (18, 13, [], [])


def test_sqlite_with_synchronous_off_loses_only_under_a_power_loss(tmp_path: Path) -> None:
    data = notes_scenario({"NOTES_SQLITE_SYNC": "off"}, sqlite=True)
    found = crashpoints(data, tmp_path, ["request", "response", "response@power_loss"])
    clean(found, ["request", "response"])
    lost_everywhere(found, ["response@power_loss"])  # nothing it committed was ever fsynced


def test_sqlite_defaults_lose_the_last_commit_to_a_power_loss_as_sqlite_documents(tmp_path: Path) -> None:
    """synchronous=FULL in rollback-journal mode deletes the journal to commit and does not fsync the
    directory after (SQLite: EXTRA "provides additional durability if the commit is followed closely
    by a power loss"): a power loss right after a commit brings the journal back, hot, and rolls that
    commit back. Kills lose nothing; EXTRA loses nothing under either."""
    # The power loss first: its first try follows the clean call, a first execution it rolls back (after
    # a try at response, the rollback takes the retry's commit, an upsert the first attempt made too).
    found = crashpoints(
        notes_scenario({}, sqlite=True), tmp_path, ["request@power_loss", "request", "response"]
    )
    clean(found, ["request", "response"])
    # The commit before the held call is rolled back, unless it repeated an upsert made durable before.
    lost_everywhere(found, ["request@power_loss"], at_least=1)
    assert "PRAGMA synchronous=EXTRA" in advice(found, by_name(found)["request@power_loss"])
    # The held call itself was exactly once: what the finding counts is what the crash took before it.
    wiped = len(by_name(found)["request@power_loss"].wiped["lost"])
    heading = (
        f"## request@power_loss: lost: {wiped} intent{'s' if wiped > 1 else ''} acknowledged before its tries"
    )
    assert heading in render_markdown(found)
    extra = notes_scenario({"NOTES_SQLITE_SYNC": "extra"}, sqlite=True)
    clean(crashpoints(extra, tmp_path / "extra", ["request@power_loss", "response@power_loss"]), [
        "request@power_loss",
        "response@power_loss",
    ])  # fmt: skip


def test_a_stdio_server_is_held_by_its_host(tmp_path: Path) -> None:
    """Over stdio there is no proxy: the harness, the server's host, holds its requests and answers."""
    data = notes_scenario({"NOTES_SAVE": "in_place", "NOTES_TRANSPORT": "stdio"})
    data["target"]["transport"] = "stdio"
    found = crashpoints(data, tmp_path, ["request", "response", "fs_write#1"])
    clean(found, ["request", "response"])
    lost_everywhere(found, ["fs_write#1"])


@pytest.mark.docker
def test_the_same_on_docker_a_container_s_data_mount_traced_from_the_host(
    tmp_path: Path, docker_image: str
) -> None:
    """The reference invoices image, its SQLite store on the data mount, in write-ahead-log mode with
    synchronous=NORMAL: the tracer seizes the container's processes from the host and maps the mount's
    paths; kills lose nothing, a power loss loses what was not yet checkpointed."""
    data = notes_scenario({})
    data["target"] = {
        "image": docker_image,
        "env": {"INVOICES_MODE": "atomic", "INVOICES_DB": "{data_dir}/invoices.db"},
        "ready_timeout_s": 30,
    }
    data["workload"] = {
        "intents": 3,
        "tool": "create_invoice",
        "arguments": {"customer_id": "c", "amount_cents": 1, "memo": "{marker}", "idempotency_key": "{key}"},
    }
    query = "SELECT memo AS marker, COUNT(*) AS effects FROM invoices GROUP BY memo"
    data["audit"] = {"effects": {"sql": {"url": "sqlite:///{data_dir}/invoices.db", "query": query}}}
    found = crashpoints(data, tmp_path, ["request", "response", "fs_write#1", "request@power_loss"])
    clean(found, ["request", "response", "fs_write#1"])
    lost_everywhere(found, ["request@power_loss"])
    point = by_name(found)["fs_write#1"]
    assert point.path[0].label == "invoices.db-wal"  # the mount's path, as the container names it
    assert "synchronous=FULL" in advice(found, by_name(found)["request@power_loss"])


def test_a_duplicate_a_later_crash_wipes_is_still_a_duplicate_at_its_own_point(tmp_path: Path) -> None:
    """``add_note`` has no key: a kill at ``response`` makes its retry a second note. The notes rewritten
    in place, the later tries at ``fs_write#1`` (truncated, not yet written) wipe the file, and those
    duplicates with it. The reads before each call saw them twice: the duplicate is ``response``'s, not
    exactly once because a later crash left nothing of it (which the exploration once said)."""
    data = notes_scenario({"NOTES_SAVE": "in_place"})
    data["workload"].update(tool="add_note", arguments={"title": "{marker}", "body": "note {index}"})
    data["audit"]["effects"]["jsonl"]["marker_field"] = "title"
    found = crashpoints(data, tmp_path, ["response", "fs_write#1"])
    points = by_name(found)
    response = points["response"]
    assert response.finding is not None, response.verdicts
    assert response.finding.value == "duplicate", response.verdicts
    assert response.verdicts["duplicate"] == R, response.verdicts
    # ... and what the rewrite in place took is still fs_write#1's finding.
    lost_everywhere(found, ["fs_write#1"])
    assert set(found.audit.intents.set_index("intent").loc[response.proven, "verdict"]) == {"lost"}
    report = render_markdown(found)
    assert "DUPLICATE" in report
    # Its story is told under its heading's verdict, not the end of the run's (it once read "lost
    # (vanished)" with fsync advice under "duplicate in 2 of 2").
    section = report.split(f"## response: {how_often(response)}\n", 1)[1].split("\n## ", 1)[0]
    assert "**duplicate · kill.**" in section, section
    assert "fsync" not in section, section
    (first,) = [line for line in section.splitlines() if line.startswith("intent ")]
    assert ": duplicate (kill): the client saw ok, 0 effects at the end" in first, first
    assert "  at the end of the run: lost (vanished): a later try's crash took what the reads" in section


def test_a_try_whose_every_retry_is_refused_proves_nothing(tmp_path: Path) -> None:
    """A server that refuses every call once it has restarted: each try ends ``rejected``, nothing
    stored. The client was told, so nothing is wrong with that intent, but no retry after a crash was
    ever judged: the points are unproven and the exploration inconclusive, never clean (which it once
    said of ``request`` and ``response``)."""
    server = tmp_path / "refuser.py"
    server.write_text(REFUSER)
    data = {
        "name": "refuser",
        "seed": 5,
        "target": {"command": ["{python}", str(server)], "transport": "stdio", "env": {"DATA": "{data_dir}"}},
        "workload": {"intents": 3, "tool": "add_entry", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/entries.jsonl", "marker_field": "text"}}},
    }
    found = crashpoints(data, tmp_path / "runs", ["request", "response"])
    assert found.inconclusive
    for point in found.points:
        if point.name in ("request", "response"):
            assert not point.proven, (point.name, point.verdicts)
            assert point.finding is None, (point.name, point.verdicts)
            assert set(point.unproven.values()) == {REFUSED}
            assert point.inconclusive is not None
            assert "refused the retry" in point.inconclusive


def test_a_pod_that_never_comes_back_is_unavailable_at_its_point_and_the_rest_named(tmp_path: Path) -> None:
    """The server exits as it starts again after the first kill: UNAVAILABLE at that point (it was a
    run error, exit 3, with no table), and the one line says what was left untried."""
    server = tmp_path / "items.py"
    server.write_text(NEVER_BACK)
    data = {
        "name": "never-back",
        "seed": 5,
        "target": {
            "command": ["{python}", str(server)],
            "env": {"ITEMS_FILE": "{data_dir}/items.jsonl", "NEVER_BACK": "exit"},
            "ready_timeout_s": 10,
        },
        "workload": {"intents": 3, "tool": "add", "arguments": {"text": "{marker}"}},
        "audit": {"effects": {"jsonl": {"path": "{data_dir}/items.jsonl", "marker_field": "text"}}},
    }
    found = crashpoints(data, tmp_path / "runs", ["request", "response"])
    (stuck,) = found.unavailable
    assert stuck.name == "request"
    assert stuck.unavailable is not None
    assert "did not come back after kill#1" in stuck.unavailable
    line = summary_line(found)
    assert line.split("; ")[1].startswith("UNAVAILABLE after a kill at request: pod-0 did not come back"), (
        line
    )
    assert line.endswith("; and 1 of its 2 crash states not tried (the run stopped before them)"), line
    assert found.untried == ["response"]
