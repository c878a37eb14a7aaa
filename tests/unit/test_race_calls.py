"""The race of two calls (``races --second call``), fed scripted points as the router places them: a
second intent, sent fresh, placed at each point of the first (file operations too), or held at its own;
and the router placing a file store's save by the markers its text names while both are at work."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from harness.crashpoints.decisions import At, Decision, Site
from harness.crashpoints.fsholds import file_point
from harness.crashpoints.plans import ObservePlan
from harness.crashpoints.points import Point, PointKind
from harness.crashpoints.races import Made, RacePlan, Second
from harness.crashpoints.racing import worse_of
from harness.crashpoints.router import Router
from harness.errors import ScenarioError
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario

REQUEST, RESPONSE = Point(PointKind.REQUEST), Point(PointKind.RESPONSE)
TRUNCATE = Point(PointKind.FS_TRUNCATE, 1, "notes.jsonl.tmp")
WRITE = Point(PointKind.FS_WRITE, 1, "notes.jsonl.tmp")
RENAME = Point(PointKind.FS_RENAME, 1, "notes.jsonl.tmp -> notes.jsonl")
CLEAN = (REQUEST, TRUNCATE, WRITE, RENAME, RESPONSE)
"""A file store's call: it loads the file (no point: a read), then saves it whole through a temporary
file renamed over it."""


class Script:
    """Points fed to the plan as the router places them: each attempt's window grows, tickets count up."""

    def __init__(self, plan: RacePlan) -> None:
        self.plan = plan
        self.windows: dict[int, list[Point]] = {}
        self.tickets = itertools.count(1)

    def reach(self, intent: int, point: Point) -> tuple[Decision, int]:
        window = self.windows.setdefault(intent, [])
        window.append(point)
        at = At(intent, 1, point, tuple(window), Site.FILES, next(self.tickets))
        return self.plan.decide(at), at.ticket

    def call(self, intent: int, points: tuple[Point, ...] = CLEAN) -> None:
        """A call that is never held, to its end."""
        for point in points:
            assert self.reach(intent, point)[0] is Decision.PASS
        self.plan.ended(intent, 1)


def learned(only: tuple[str, ...] = ()) -> tuple[RacePlan, Script]:
    plan = RacePlan(budget_s=60.0, clock=lambda: 100.0, second=Second.CALL, only=only)
    script = Script(plan)
    script.call(0)
    return plan, script


def test_a_clean_call_gives_the_second_call_sent_at_each_of_its_points_file_operations_too() -> None:
    plan, _ = learned()
    assert PointKind.FS_RENAME in plan.kinds
    assert [o.id for o in plan.orderings][:3] == ["first:request", "first:fs_truncate#1", "first:fs_write#1"]
    assert (
        plan.orderings[3].name
        == "second call sent at fs_rename#1 (notes.jsonl.tmp -> notes.jsonl) of the first"
    )
    assert plan.orderings[5].name == "second call held at request while the first runs"
    assert len(plan.orderings) == 2 * len(CLEAN)


def test_the_second_sent_at_the_firsts_request_goes_in_first_and_both_run_as_the_server_schedules() -> None:
    """The lost update's ordering: both calls at the server at once, nothing held there, no stream broken."""
    plan, script = learned()
    decision, first = script.reach(1, REQUEST)
    assert decision is Decision.HOLD  # the first at the door
    decision, second = script.reach(2, REQUEST)
    assert decision is Decision.HOLD  # the second at the door until the first is where it should be
    assert plan.releases() == [
        (second, Decision.PASS),
        (first, Decision.PASS),
    ]  # the second in, then the first
    assert plan.severs() == []  # two calls: nobody's stream is broken
    one = plan.tries[1]
    assert (one.partner, one.made) == (2, Made.MADE)


def test_the_second_sent_at_a_file_operation_of_the_first_that_stops_the_server_is_blocked() -> None:
    """One event loop, synchronous file I/O: the first stopped at its save stops every call."""
    plan, script = learned(("first:fs_write#1",))
    assert script.reach(1, REQUEST)[0] is Decision.PASS
    decision, second = script.reach(2, REQUEST)
    assert decision is Decision.HOLD
    assert plan.releases() == []  # the first has not reached its write yet
    assert script.reach(1, TRUNCATE)[0] is Decision.PASS
    decision, held = script.reach(1, WRITE)
    assert decision is Decision.HOLD
    assert plan.releases() == [(second, Decision.PASS)]  # the second is sent now
    assert plan.releases() == []  # and reaches nothing at the server
    plan.blocked(held)
    assert plan.releases() == [(held, Decision.PASS)]
    one = plan.tries[1]
    assert one.made is Made.BLOCKED
    assert one.why == (
        "the second reached nothing at the server while the first was held: the server serializes here"
    )


def test_the_second_sent_at_the_firsts_answer_goes_on_once_it_is_at_work() -> None:
    plan, script = learned(("first:response",))
    for point in CLEAN[:-1]:  # the first saves, and its answer is still to come
        assert script.reach(1, point)[0] is Decision.PASS
    decision, second = script.reach(2, REQUEST)
    assert decision is Decision.HOLD
    decision, held = script.reach(1, RESPONSE)
    assert decision is Decision.HOLD
    assert plan.releases() == [(second, Decision.PASS)]
    assert script.reach(2, TRUNCATE)[0] is Decision.PASS  # at the server, while the first's answer waits
    assert plan.releases() == [(held, Decision.PASS)]
    assert plan.tries[1].made is Made.MADE


def test_the_second_held_at_its_point_while_the_first_runs_from_the_door() -> None:
    plan, script = learned(("second:fs_rename#1",))
    decision, door = script.reach(1, REQUEST)
    assert decision is Decision.HOLD  # the first waits at the door
    decision, second = script.reach(2, REQUEST)
    assert decision is Decision.HOLD
    assert plan.releases() == [(second, Decision.PASS)]  # the second goes in alone
    for point in (TRUNCATE, WRITE):
        assert script.reach(2, point)[0] is Decision.PASS
    decision, held = script.reach(2, RENAME)
    assert decision is Decision.HOLD
    assert plan.releases() == [(door, Decision.PASS)]  # now the first
    script.call(1, CLEAN[1:])
    assert plan.releases() == [(held, Decision.PASS)]
    assert plan.tries[1].made is Made.MADE


def test_every_ordering_tried_ends_the_run_while_the_other_worker_is_at_work() -> None:
    """Two at a time, a call is always at work beside the one asking: one call past the last ordering,
    held at the door until the tries' calls are done, is the last."""
    plan, script = learned(("second:request",))
    _, door = script.reach(1, REQUEST)
    _, second = script.reach(2, REQUEST)
    assert plan.releases() == [(door, Decision.PASS)]  # the second held at its own door: the first runs
    assert not plan.exhausted()
    decision, closing = script.reach(3, REQUEST)
    assert decision is Decision.HOLD
    assert plan.exhausted()  # no call after this one
    script.call(1, CLEAN[1:])
    assert plan.releases() == [(second, Decision.PASS)]
    script.call(2, CLEAN[1:])
    assert plan.releases() == [(closing, Decision.PASS)]


def test_a_race_of_two_calls_names_its_orderings_first_and_second_and_runs_two_at_a_time() -> None:
    data = invoice_scenario()
    data["workload"]["concurrency"] = 2
    data["faults"] = {"crash_points": {"race": {"second": "call", "only": ["first:request"]}}}
    assert parse_scenario(data).faults.crash_points is not None
    data["faults"]["crash_points"]["race"]["only"] = ["original:request"]
    with pytest.raises(ScenarioError, match="with second: call an ordering is first:POINT or second:POINT"):
        parse_scenario(data)
    data["faults"]["crash_points"]["race"]["only"] = []
    data["workload"]["concurrency"] = 1
    with pytest.raises(
        ScenarioError, match=r"second: call, two at a time\): it needs workload.concurrency 1 \(2\)"
    ):
        parse_scenario(data)


def test_a_save_is_placed_by_the_markers_its_text_names_else_said_ambiguous() -> None:
    """Two calls at work: the save that names one call's note only is that call's; one naming both, or an
    operation with no text (a rename), may be either's, and is never guessed."""
    router = Router(ObservePlan())
    router.started(2, 1)
    router.started(3, 1)
    mine = file_point("write", ["notes.jsonl.tmp"], text='{"title":"abc123-m0000003"}\n')
    both = file_point(
        "write", ["notes.jsonl.tmp"], text='{"title":"abc123-m0000002"}\n{"title":"abc123-m0000003"}\n'
    )
    asyncio.run(router.reached(mine))
    asyncio.run(router.reached(both))
    asyncio.run(router.reached(file_point("rename", ["notes.jsonl.tmp", "notes.jsonl"])))
    assert router.ended(3, 1)["points"] == [
        ["fs_write#1", "notes.jsonl.tmp"],
        ["fs_write", "notes.jsonl.tmp", "ambiguous"],
        ["fs_rename", "notes.jsonl.tmp -> notes.jsonl", "ambiguous"],
    ]
    assert router.ended(2, 1)["points"] == [
        ["fs_write", "notes.jsonl.tmp", "ambiguous"],
        ["fs_rename", "notes.jsonl.tmp -> notes.jsonl", "ambiguous"],
    ]


def test_a_row_of_two_calls_is_judged_by_the_worse_of_their_verdicts() -> None:
    """The first call duplicated and the second lost: the row is lost (the lost update's fix), whichever
    call came first; with no finding, the first call's verdict."""
    assert worse_of([4, 5], {4: "duplicate", 5: "lost"}) == 5
    assert worse_of([4, 5], {4: "lost", 5: "duplicate"}) == 4
    assert worse_of([4, 5], {4: "exactly_once", 5: "applied_despite_error"}) == 5
    assert worse_of([4, 5], {4: "exactly_once", 5: "exactly_once"}) == 4
    assert worse_of([4], {}) == 4
