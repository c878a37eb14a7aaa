"""Observed points placed after the run (:mod:`harness.crashpoints.placement`): the relay's spooled
reports against the attempts' windows the history replays, by the router's own rules, on a scripted
clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.crashpoints import placement
from harness.crashpoints.placement import place_after_run
from harness.events import AttemptEnded, AttemptStarted
from harness.history import HistoryWriter, Outcome

T0 = 1000.0
"""The history's clock when the run started (the relay stamps its reports on the same clock)."""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def marker(intent: int) -> str:
    return f"run-m{intent:07d}"


def commit(conn: int, at: float, intent: int | None, *, idle: bool = True) -> dict[str, Any]:
    """A relay's report of a commit asked for at ``at`` seconds into the run."""
    return {
        "point": "db_commit",
        "conn": conn,
        "at": T0 + at,
        "label": "INSERT invoices",
        "reads": False,
        "markers": "" if intent is None else marker(intent),
        **({"idle": True} if idle else {}),
    }


def run(
    tmp_path: Path, windows: list[tuple[float, str, int, int]], reports: list[dict[str, Any]]
) -> list[Any]:
    """A history with these attempt windows ((t, "start" | "end", intent, attempt), in time order), the
    reports spooled, placed: the events the placement added."""
    clock = Clock()
    path, spool = tmp_path / "history.jsonl", tmp_path / "spool.jsonl"
    spool.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reports))
    with HistoryWriter(path, clock=clock) as history:
        for t, what, intent, attempt in windows:
            clock.now = T0 + t
            if what == "start":
                history.emit(
                    AttemptStarted(intent=intent, attempt=attempt, id=intent * 10 + attempt, key=None)
                )
            else:
                history.emit(
                    AttemptEnded(intent=intent, attempt=attempt, id=intent * 10 + attempt, outcome=Outcome.OK)
                )
        before = history.next_seq
        clock.now = T0 + 100
        place_after_run(spool, history)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()][before:]


def placed(added: list[Any]) -> dict[tuple[int, int], list[list[Any]]]:
    return {
        (a["intent"], a["attempt"]): a["points"]
        for e in added
        if e["type"] == "points_placed"
        for a in e["attempts"]
    }


def test_each_commit_lands_in_the_attempt_at_work_when_it_was_asked_for(tmp_path: Path) -> None:
    """Two calls side by side, each commit naming its intent; a third alone, naming none: each in its
    own attempt, counted per attempt, and the one outside every window (a start-up's) in none."""
    windows = [
        (1.0, "start", 1, 1),
        (1.1, "start", 2, 1),
        (1.5, "end", 1, 1),
        (1.6, "end", 2, 1),
        (2.0, "start", 3, 1),
        (2.5, "end", 3, 1),
    ]
    reports = [
        commit(7, 0.5, None),  # before any call
        commit(1, 1.2, 2),
        commit(2, 1.3, 1),
        commit(1, 1.4, 2),
        commit(3, 2.1, None),
    ]
    assert placed(run(tmp_path, windows, reports)) == {
        (1, 1): [["db_commit#1", "INSERT invoices"]],
        (2, 1): [["db_commit#1", "INSERT invoices"], ["db_commit#2", "INSERT invoices"]],
        (3, 1): [["db_commit#1", "INSERT invoices"]],
    }


def test_a_commit_that_names_no_intent_among_two_calls_is_told_to_both_as_ambiguous(tmp_path: Path) -> None:
    """Two calls open, a commit with no marker on a connection neither is known to serve: never guessed."""
    windows = [(1.0, "start", 1, 1), (1.1, "start", 2, 1), (1.5, "end", 1, 1), (1.6, "end", 2, 1)]
    added = placed(run(tmp_path, windows, [commit(1, 1.2, None)]))
    assert added == {
        (1, 1): [["db_commit", "INSERT invoices", "ambiguous"]],
        (2, 1): [["db_commit", "INSERT invoices", "ambiguous"]],
    }


def test_a_report_spooled_after_its_attempt_was_written_is_a_late_point(tmp_path: Path) -> None:
    """A dying pod's last commit: asked for inside its attempt, its report spooled after a later call's
    (the relay read its reply after the kill). The attempt's points were written as it ended; the late
    one is a ``point_late`` event of it, as in a run that reads the relay as it goes."""
    windows = [(1.0, "start", 1, 1), (1.5, "end", 1, 1), (2.0, "start", 2, 1), (2.5, "end", 2, 1)]
    reports = [commit(1, 1.1, 1), commit(2, 2.1, 2), commit(3, 1.2, 1)]
    added = run(tmp_path, windows, reports)
    assert placed(added) == {
        (1, 1): [["db_commit#1", "INSERT invoices"]],
        (2, 1): [["db_commit#1", "INSERT invoices"]],
    }
    (late,) = [e for e in added if e["type"] == "point_late"]
    assert (late["intent"], late["attempt"], late["point"]) == (1, 1, "db_commit#2")


def test_many_attempts_share_an_event(tmp_path: Path, monkeypatch: Any) -> None:
    """A run of a million calls adds a few thousand lines: ``PER_EVENT`` attempts to an event."""
    monkeypatch.setattr(placement, "PER_EVENT", 2)
    windows: list[tuple[float, str, int, int]] = []
    reports = []
    for i in range(5):
        windows += [(1.0 + i, "start", i, 1), (1.5 + i, "end", i, 1)]
        reports.append(commit(1, 1.2 + i, i))
    added = run(tmp_path, windows, reports)
    assert [len(e["attempts"]) for e in added if e["type"] == "points_placed"] == [2, 2, 1]
    assert sorted(placed(added)) == [(i, 1) for i in range(5)]
