"""Every run observes the points each attempt reaches (the decision router with a plan that always
passes), and a story says where an attempt was when a fault hit it; an order plan holds two attempts at
one statement and lets them go in the order it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import rundir
from harness.audit.auditor import audit_run, story_of
from harness.report.stories import story_lines
from tests.helpers.scenarios import invoices_on_postgres, pgclients_scenario, run_scenario

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / rundir.HISTORY).read_bytes().splitlines()]


def reached(run_dir: Path) -> dict[tuple[int, int], list[list[Any]]]:
    """(intent, attempt) -> the points it reached, as the history records them in a run whose only
    observing site is the PostgreSQL relay: placed after the run (``points_placed``, then ``point_late``),
    none in ``attempt_ended``; and the relay's spool gone once they are."""
    history = events(run_dir)
    assert history[0]["points_placed_after"] is True
    assert not (run_dir / rundir.RELAY_POINTS).exists()
    points: dict[tuple[int, int], list[list[Any]]] = {}
    for e in history:
        if e["type"] == "attempt_ended":
            assert "points" not in e, e
        elif e["type"] == "points_placed":
            for entry in e["attempts"]:
                points.setdefault((entry["intent"], entry["attempt"]), []).extend(entry["points"])
        elif e["type"] == "point_late":
            points.setdefault((e["intent"], e["attempt"]), []).append([e["point"], e["label"]])
    return points


def test_every_attempt_says_the_points_it_reached_and_a_story_where_the_crash_hit_it(
    tmp_path: Path, postgres_server: None
) -> None:
    """The naive design exits right after its third call's business commit (a failpoint, so the test is
    deterministic): that intent is a duplicate, and its story says its first attempt was hit after its
    commit, before its answer."""
    data = invoices_on_postgres("naive", INVOICES_FAILPOINT="after_business_commit@3")
    data["workload"]["intents"] = 4
    result = run_scenario(data, tmp_path)
    ended = [e for e in events(result.run_dir) if e["type"] == "attempt_ended"]
    answered = [e for e in ended if e["outcome"] == "ok"]
    assert len(answered) == 4
    points = reached(result.run_dir)
    for attempt in answered:  # every attempt the server answered committed its invoice, and says so
        assert ["db_commit#1", "INSERT invoices"] in points[(attempt["intent"], attempt["attempt"])], attempt
    assert not any(e["type"] == "crash_point" for e in events(result.run_dir))  # observing records no events
    (duplicate,) = result.intents.loc[result.intents["verdict"] == "duplicate", "intent"].tolist()
    first = next(e for e in ended if e["intent"] == duplicate and e["attempt"] == 1)
    assert first["outcome"] == "transport_error"
    # Its invoice committed, then the failpoint's own row (the target counts its hits in the database).
    assert points[(duplicate, 1)] == [
        ["db_commit#1", "INSERT invoices"],
        ["db_commit#2", "INSERT failpoint_hits"],
    ]
    told = "\n".join(story_lines(story_of(audit_run(result.run_dir), int(duplicate))))
    assert "after db_commit#2 (INSERT failpoint_hits), before its answer" in told, told
    assert "db_commit#1: reached (INSERT invoices)" in told


@pytest.mark.parametrize("order", [[1, 2], [2, 1]])
def test_two_attempts_of_one_intent_held_at_one_statement_go_in_the_order_asked(
    tmp_path: Path, postgres_server: None, order: list[int]
) -> None:
    """An original and its retry (a stall sends the retry beside it, the same key), both held before
    their INSERT reaches the database, released in the order named: the commits the PostgreSQL proxy
    saw say which the database ran first."""
    data = pgclients_scenario(PGCLIENTS_POOL="2")
    data["workload"].update(intents=1, concurrency=1)
    data["client"].update(attempt_timeout_s=1.0)
    data["faults"] = {
        "stream": [{"fault": "stall", "intent": 0, "attempt": 1, "hold": "response", "hold_s": 6}],
        "crash_points": {"order": {"at": "db_statement#1", "order": order, "hold_limit_s": 20}},
    }
    result = run_scenario(data, tmp_path)
    held = [(e["attempt"], e["released"]) for e in points_of(result.run_dir, "db_statement#1")]
    assert [attempt for attempt, _ in held] == order  # released in the order asked, by arrival
    assert all(released == "pass" for _, released in held)
    commits = [e["attempt"] for e in points_of(result.run_dir, "db_commit#1")]
    assert commits == order  # and the database committed them in that order
    assert result.intents["effects"].tolist() == [2]  # the naive design made the invoice twice: both ran


def points_of(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in events(run_dir) if e["type"] == "crash_point" and e["point"] == name]


def test_an_order_a_target_cannot_run_side_by_side_is_released_as_it_came_and_the_run_says_so(
    tmp_path: Path, postgres_server: None
) -> None:
    """One pooled connection: while the original is held before its INSERT, the retry cannot reach the
    database at all. The plan waits its limit, lets the original go, and the run is inconclusive: the
    order asked for was never made."""
    data = pgclients_scenario(PGCLIENTS_POOL="1")
    data["workload"].update(intents=1, concurrency=1)
    data["client"].update(attempt_timeout_s=0.5)
    data["faults"] = {
        "stream": [{"fault": "stall", "intent": 0, "attempt": 1, "hold": "response", "hold_s": 4}],
        "crash_points": {"order": {"at": "db_statement#1", "order": [2, 1], "hold_limit_s": 2}},
    }
    result = run_scenario(data, tmp_path)
    (missed,) = [e for e in events(result.run_dir) if e["type"] == "fault_missed"]
    assert (missed["fault"], missed["trigger"]) == ("hold", "order db_statement#1")
    assert "only 1 of 2 attempts reached db_statement#1 while the first was held" in missed["reason"]
    (why,) = result.summary.inconclusive
    assert why.startswith("order db_statement#1 was not made: only 1 of 2")


def test_a_random_run_with_kills_says_where_each_attempt_was_when_it_was_killed(
    tmp_path: Path, postgres_server: None
) -> None:
    """The naive design on PostgreSQL under six kills: every attempt the server answered names its
    commit, and the story of every duplicate names the commit its killed attempt had made before the kill
    broke it, before its answer (a kill lands after the commit in about one call in four, so six kills
    leave a duplicate all but always: 1 run in 2 million leaves none)."""
    data = invoices_on_postgres("naive", INVOICES_PRE_COMMIT_MS="20", INVOICES_POST_COMMIT_MS="20")
    data["workload"].update(intents=300, concurrency=8)
    data["faults"] = {"kill": {"count": 6, "min_uptime_s": 0.2}}
    result = run_scenario(data, tmp_path)
    ended = [e for e in events(result.run_dir) if e["type"] == "attempt_ended"]
    points = reached(result.run_dir)
    for attempt in (e for e in ended if e["outcome"] == "ok"):
        assert ["db_commit#1", "INSERT invoices"] in points[(attempt["intent"], attempt["attempt"])], attempt
    duplicates = result.intents.loc[result.intents["verdict"] == "duplicate", "intent"].tolist()
    assert duplicates, "no kill landed after a commit"
    audit = audit_run(result.run_dir)
    for intent in duplicates:
        told = "\n".join(story_lines(story_of(audit, int(intent))))
        assert "after db_commit#1 (INSERT invoices), before its answer" in told, told
