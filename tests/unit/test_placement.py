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
    tmp_path: Path,
    windows: list[tuple[float, str, int, int]],
    reports: list[dict[str, Any]],
    cut: bytes = b"",
) -> list[Any]:
    """A history with these attempt windows ((t, "start" | "end", intent, attempt), in time order), the
    reports spooled (then ``cut``, a line cut short), placed: the events the placement added."""
    clock = Clock()
    path, spool = tmp_path / "history.jsonl", tmp_path / "spool.jsonl"
    spool.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in reports) + cut)
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


LATE = (
    [(1.0, "start", 1, 1), (1.5, "end", 1, 1), (2.0, "start", 2, 1), (2.5, "end", 2, 1)],
    [commit(1, 1.1, 1), commit(2, 2.1, 2), commit(3, 1.2, 1)],
)
"""A dying pod's last commit: asked for inside attempt (1, 1), its report spooled after a later call's
(the relay read its reply after the kill), once that attempt's window had closed."""


def test_a_report_spooled_after_its_attempt_ended_joins_its_points_in_order(tmp_path: Path) -> None:
    """The attempt's points are not written yet: the late one is listed after its others, in its event."""
    added = run(tmp_path, *LATE)
    assert placed(added) == {
        (1, 1): [["db_commit#1", "INSERT invoices"], ["db_commit#2", "INSERT invoices"]],
        (2, 1): [["db_commit#1", "INSERT invoices"]],
    }
    assert not [e for e in added if e["type"] == "point_late"]


def test_a_report_for_an_attempt_already_written_is_a_late_point_after_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Its attempt's event is written (one attempt to an event here): a ``point_late`` of it, after that
    event, as in a run that reads the relay as it goes, so a story lists it last."""
    monkeypatch.setattr(placement, "PER_EVENT", 1)
    added = run(tmp_path, *LATE)
    kinds = [(e["type"], e.get("intent")) for e in added]
    assert kinds == [("points_placed", None), ("point_late", 1), ("points_placed", None)], kinds
    assert (added[1]["attempt"], added[1]["point"]) == (1, "db_commit#2")
    assert placed(added)[(1, 1)] == [["db_commit#1", "INSERT invoices"]]


def test_a_last_report_cut_short_is_left_out_and_the_rest_placed(tmp_path: Path) -> None:
    """The relay killed as it wrote: its last line has no end; the complete ones are placed."""
    windows = [(1.0, "start", 1, 1), (1.5, "end", 1, 1)]
    added = run(tmp_path, windows, [commit(1, 1.1, 1)], cut=orjson.dumps(commit(1, 1.2, 1))[:20])
    assert placed(added) == {(1, 1): [["db_commit#1", "INSERT invoices"]]}


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
