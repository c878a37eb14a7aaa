"""The race plan, fed scripted points as the router places them (no process): which orderings a clean
call gives, what each try holds, whose stream it breaks, when it lets go, and what it says of each."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from harness.crashpoints.decisions import At, Decision, Reached, Site
from harness.crashpoints.emit import race_reproducer
from harness.crashpoints.points import Point, PointKind
from harness.crashpoints.races import Held, Made, Ordering, RacePlan, Second, client_timeout
from harness.crashpoints.racing import RaceRow, fix_of, racing_data
from harness.crashpoints.router import Router
from harness.errors import ScenarioError
from harness.scenario import parse_scenario
from tests.helpers.scenarios import invoice_scenario

REQUEST, RESPONSE = Point(PointKind.REQUEST), Point(PointKind.RESPONSE)
READ_KEY = Point(PointKind.DB_STATEMENT, 1, "SELECT idempotency_keys")
INSERT = Point(PointKind.DB_STATEMENT, 2, "INSERT invoices")
EFFECT = Point(PointKind.DB_COMMIT, 1, "INSERT invoices")
RECORD = Point(PointKind.DB_STATEMENT, 3, "INSERT idempotency_keys")
KEY = Point(PointKind.DB_COMMIT, 2, "INSERT idempotency_keys")
CLEAN = (REQUEST, READ_KEY, INSERT, EFFECT, RECORD, KEY, RESPONSE)
"""A keyed read-then-write call: read the key, insert the invoice and commit, then the key record."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Script:
    """Points fed to a plan as the router places them: each attempt's window grows, tickets count up."""

    def __init__(self, plan: RacePlan) -> None:
        self.plan = plan
        self.windows: dict[tuple[int, int], list[Point]] = {}
        self.tickets = itertools.count(1)

    def reach(self, intent: int, attempt: int, point: Point) -> tuple[Decision, int]:
        window = self.windows.setdefault((intent, attempt), [])
        window.append(point)
        at = At(intent, attempt, point, tuple(window), Site.POSTGRES, next(self.tickets))
        return self.plan.decide(at), at.ticket

    def call(self, intent: int, attempt: int, points: tuple[Point, ...] = CLEAN) -> None:
        """A whole call that is never held."""
        for point in points:
            assert self.reach(intent, attempt, point)[0] is Decision.PASS
        self.plan.ended(intent, attempt)


def learned(
    budget_s: float = 60.0, clock: Clock | None = None, second: Second = Second.RETRY
) -> tuple[RacePlan, Script]:
    plan = RacePlan(budget_s=budget_s, clock=clock or Clock(), second=second)
    script = Script(plan)
    assert not plan.exhausted()  # nothing learned yet: the clean call comes first
    script.call(0, 1)
    return plan, script


def to(plan: RacePlan, name: str) -> None:
    """Skip the tries before the ordering named, as made."""
    while plan.orderings[len(plan.tries)].name != name:
        intent = len(plan.tries) + 1
        plan.tries[intent] = plan._try_of(intent) or pytest.fail("no ordering left")
        plan.tries[intent].made = Made.MADE


def test_a_clean_call_gives_the_retry_sent_at_each_of_its_points_then_held_at_each() -> None:
    plan, _ = learned()
    assert plan.clean == CLEAN
    names = [o.name for o in plan.orderings]
    assert len(names) == 2 * len(CLEAN)
    assert names[3] == "retry sent at db_commit#1 (INSERT invoices) of the original"
    assert names[7] == "retry held at request while the original runs"
    assert names[9] == "retry held at db_statement#2 (INSERT invoices) while the original runs"


def test_the_retry_sent_at_a_commit_runs_to_its_end_while_the_original_waits_there() -> None:
    plan, script = learned()
    to(plan, "retry sent at db_commit#1 (INSERT invoices) of the original")
    intent = len(plan.tries) + 1
    for point in CLEAN[:3]:
        assert script.reach(intent, 1, point)[0] is Decision.PASS
    decision, held = script.reach(intent, 1, EFFECT)
    assert decision is Decision.HOLD
    assert plan.severs() == [(intent, 1)]  # the client loses the original's stream: the retry comes
    assert plan.severs() == []
    for point in (REQUEST, READ_KEY, INSERT, EFFECT):  # the key is not there yet: it inserts
        assert script.reach(intent, 2, point)[0] is Decision.PASS
    assert plan.releases() == []  # its exchange is not over
    script.call(intent, 2, (RECORD, KEY, RESPONSE))
    assert plan.releases() == [(held, Decision.PASS)]
    one = plan.tries[intent]
    assert (one.made, one.meanwhile[:2]) == (Made.MADE, ["db_statement#1", "db_statement#2"])
    assert script.reach(intent, 1, RECORD)[0] is Decision.PASS  # the original goes on, never held again


def test_a_retry_that_reaches_nothing_while_the_original_is_held_is_blocked_the_server_serializes() -> None:
    plan, script = learned()
    to(plan, "retry sent at db_statement#1 (SELECT idempotency_keys) of the original")
    intent = len(plan.tries) + 1
    script.reach(intent, 1, REQUEST)
    decision, held = script.reach(intent, 1, READ_KEY)
    assert decision is Decision.HOLD
    assert script.reach(intent, 2, REQUEST)[0] is Decision.PASS  # at the door, and no further
    assert plan.releases() == []
    plan.blocked(held)  # the hold limit passed
    assert plan.releases() == [(held, Decision.PASS)]
    one = plan.tries[intent]
    assert one.made is Made.BLOCKED
    assert one.why == (
        "the retry reached nothing at the server while the original was held: the server serializes here"
    )


def test_a_retry_that_waits_on_the_original_after_a_statement_is_blocked_on_it() -> None:
    plan, script = learned()
    to(plan, "retry sent at db_commit#1 (INSERT invoices) of the original")
    intent = len(plan.tries) + 1
    for point in CLEAN[:3]:
        script.reach(intent, 1, point)
    _, held = script.reach(intent, 1, EFFECT)
    for point in (REQUEST, READ_KEY, INSERT):  # its INSERT waits on the original's row
        script.reach(intent, 2, point)
    plan.blocked(held)
    assert plan.releases() == [(held, Decision.PASS)]
    assert "the retry reached db_statement#2, then waited for the original past 2 s" in plan.tries[intent].why


def test_the_retry_held_at_its_point_while_the_original_runs_from_the_door() -> None:
    plan, script = learned()
    to(plan, "retry held at db_commit#1 (INSERT invoices) while the original runs")
    intent = len(plan.tries) + 1
    decision, door = script.reach(intent, 1, REQUEST)
    assert decision is Decision.HOLD  # the original waits at the door, its stream broken
    assert plan.severs() == [(intent, 1)]
    for point in CLEAN[:3]:
        assert script.reach(intent, 2, point)[0] is Decision.PASS
    assert plan.releases() == []  # the retry has not reached its point yet
    decision, held = script.reach(intent, 2, EFFECT)
    assert decision is Decision.HOLD
    assert plan.releases() == [(door, Decision.PASS)]  # now the original runs
    script.call(intent, 1, CLEAN[1:])
    assert plan.releases() == [(held, Decision.PASS)]
    one = plan.tries[intent]
    assert one.made is Made.MADE
    assert one.meanwhile == [p.name for p in CLEAN[1:]]


def test_an_ordering_its_call_never_reaches_is_said_not_reached_and_nothing_waits() -> None:
    plan, script = learned()
    to(plan, "retry held at db_commit#2 (INSERT idempotency_keys) while the original runs")
    intent = len(plan.tries) + 1
    _, door = script.reach(intent, 1, REQUEST)
    script.call(intent, 2, (REQUEST, READ_KEY, RESPONSE))  # the retry replayed: it never commits
    assert plan.releases() == [(door, Decision.PASS)]
    one = plan.tries[intent]
    assert one.made is Made.NOT_REACHED
    assert one.why == "the retry never reached db_commit#2 (INSERT idempotency_keys)"


def test_a_try_starts_only_once_the_last_ones_original_is_done_at_the_server() -> None:
    """The retry answered, so the client goes on to the next intent while the original released after it
    is still at work: the next try's original waits at the door for it."""
    plan, script = learned()
    script.reach(1, 1, REQUEST)  # retry sent at request: the original held at the door
    assert plan.severs() == [(1, 1)]
    script.call(1, 2)
    assert len(plan.releases()) == 1  # the original goes on
    decision, gate = script.reach(2, 1, REQUEST)
    assert decision is Decision.HOLD
    assert plan.releases() == []
    script.call(1, 1, ())  # the original's exchange ends
    assert plan.releases() == [(gate, Decision.PASS)]  # the next ordering holds later, not at the door
    assert plan.severs() == []


def test_the_budget_ends_the_tries_and_the_plan_says_which_orderings_were_left() -> None:
    clock = Clock()
    plan, script = learned(10.0, clock)
    script.reach(1, 1, REQUEST)
    clock.now += 11
    assert not plan.exhausted()  # its try is still at work
    script.call(1, 2)
    plan.releases()
    script.call(1, 1, CLEAN[1:])
    assert plan.exhausted()
    told = plan.told()
    assert told is not None
    assert told["ran_out"] is True
    assert len(told["orderings"]) == 14
    assert [r["ordering"] for r in told["races"]] == ["retry sent at request of the original"]
    assert plan.told() is None  # told once until something changes


def test_every_ordering_tried_ends_the_run_once_no_call_is_at_work() -> None:
    """The last try's retry answered while its original, released, is still at work: one more call, held
    at the door until the original is done, closes the run (so the final read sees the original's work)."""
    plan, script = learned()
    to(plan, plan.orderings[-1].name)
    last = len(plan.tries) + 1
    _, door = script.reach(last, 1, REQUEST)
    script.call(last, 2, CLEAN[:1])  # the retry, held nowhere it reaches: not reached; the original goes
    assert plan.releases() == [(door, Decision.PASS)]
    assert not plan.exhausted()
    decision, closing = script.reach(last + 1, 1, REQUEST)
    assert decision is Decision.HOLD
    assert plan.releases() == []
    script.call(last, 1, ())
    assert plan.releases() == [(closing, Decision.PASS)]
    script.call(last + 1, 1, CLEAN[1:])
    assert plan.exhausted()


def test_the_same_stream_of_points_gives_the_same_decisions() -> None:
    def run() -> list[Any]:
        plan, script = learned()
        out: list[Any] = []
        for intent, ordering in enumerate(plan.orderings[:4], 1):
            assert plan.tries.get(intent) is None
            out.append(script.reach(intent, 1, REQUEST)[0])
            out.append(plan.severs())
            script.call(intent, 2)
            out.append(plan.releases())
            script.call(intent, 1, ())
            out.append((ordering.name, plan.tries[intent].made))
        return out

    assert run() == run()


def test_the_router_breaks_the_originals_stream_and_lets_it_go_when_the_retry_ends() -> None:
    """The router with a race plan, driven as the fault proxy and the PostgreSQL proxy drive it: the
    original held at its first statement, its stream broken, the retry beside it to its end, then the
    original released."""

    async def race() -> list[str]:
        said: list[str] = []
        plan = RacePlan(budget_s=60.0)
        router = Router(plan)

        async def call(intent: int, attempt: int, statements: list[str]) -> None:
            router.opened(intent, attempt, sever=lambda: said.append(f"severed {intent}/{attempt}"))
            await router.reached(Reached(Site.PROXY, PointKind.REQUEST, attempt=(intent, attempt)))
            for label in statements:
                point = Reached(Site.POSTGRES, PointKind.DB_STATEMENT, attempt=(intent, attempt), label=label)
                await router.reached(point)
                said.append(f"{intent}/{attempt} {label}")
            router.closed(intent, attempt)

        await call(0, 1, ["SELECT k", "INSERT i"])  # the clean call
        plan.tries[1] = plan._try_of(1) or pytest.fail("no ordering")
        plan.tries[1].made = Made.MADE  # skip "retry sent at request"
        assert plan.orderings[1] == Ordering(Held.ORIGINAL, Point(PointKind.DB_STATEMENT, 1, "SELECT k"))
        original = asyncio.create_task(call(2, 1, ["SELECT k", "INSERT i"]))
        while not said or said[-1] != "severed 2/1":
            await asyncio.sleep(0)
        await call(2, 2, ["SELECT k", "INSERT i"])
        await original
        return said

    said = asyncio.run(race())
    assert said[2:] == ["severed 2/1", "2/2 SELECT k", "2/2 INSERT i", "2/1 SELECT k", "2/1 INSERT i"]


def test_the_scenario_refuses_a_race_it_cannot_place() -> None:
    data = invoice_scenario(concurrency=2)
    data["faults"] = {"crash_points": {"race": {}}}
    with pytest.raises(ScenarioError, match="one intent at a time"):
        parse_scenario(data)
    data = invoice_scenario()
    data["faults"] = {"crash_points": {"race": {}}, "stream": [{"fault": "stall", "probability": 0.5}]}
    with pytest.raises(ScenarioError, match="makes its own retries"):
        parse_scenario(data)
    data["faults"] = {"crash_points": {"race": {"hold_limit_s": 3}}}
    crash = parse_scenario(data).faults.crash_points
    assert crash is not None
    assert not crash.kills()
    assert not crash.traces_files()


def test_a_duplicates_fix_names_the_read_and_the_insert_its_clean_call_made() -> None:
    clean = [
        "request",
        "db_statement#1 (SELECT idempotency_keys)",
        "db_commit#1 (SELECT idempotency_keys)",
        "db_statement#2 (INSERT invoices)",
        "db_commit#2 (INSERT invoices)",
        "response",
    ]
    assert fix_of(clean) == (
        "reads the key (SELECT idempotency_keys), then inserts (INSERT invoices), with neither a unique key "
        "nor a lock: take a unique key on the key column and on conflict return the stored result, or lock "
        "the key in the transaction"
    )
    assert fix_of(["request", "downstream#1", "response"]).startswith("the retry made the effect again")


def test_a_call_waiting_for_the_last_tries_calls_waits_longer_than_a_race_holds() -> None:
    plan, script = learned()
    _, door = script.reach(1, 1, REQUEST)  # retry sent at request: held at the door
    race = At(1, 1, REQUEST, (REQUEST,), Site.PROXY, door)
    assert plan.limit(race) == 2.0
    script.call(1, 2)
    plan.releases()
    _, gate = script.reach(2, 1, REQUEST)  # the original of intent 1 is still at work
    assert plan.limit(At(2, 1, REQUEST, (REQUEST,), Site.PROXY, gate)) == 30.0


def test_a_timeout_retrys_original_that_gave_up_at_the_door_is_no_race() -> None:
    """``second: timeout`` and a slow server: the next try's original waits at the door for the last try's
    calls past its own client timeout, and the client's retry comes. That retry is not the race's (the
    try never began): the try is not reached, and both go on."""
    plan, script = learned(second=Second.TIMEOUT)
    script.reach(1, 1, REQUEST)  # the first try: retry sent at request, the original at the door
    script.call(1, 2)
    plan.releases()
    _, gate = script.reach(2, 1, REQUEST)  # the original of intent 1 is still at work at the server
    assert plan.releases() == []
    decision, _ = script.reach(2, 2, REQUEST)  # its client gave up: the retry, before the try began
    assert decision is Decision.PASS
    assert plan.releases() == [(gate, Decision.PASS)]
    assert plan.tries[2].made is Made.NOT_REACHED


def test_only_the_orderings_named_are_tried_in_that_order_each_repeated_at_the_clean_calls_point() -> None:
    only = ("retry:db_commit#1", "original:db_statement#1")
    plan = RacePlan(budget_s=60.0, only=only, repeat=2, clock=Clock())
    Script(plan).call(0, 1)
    assert [o.id for o in plan.orderings] == [
        "retry:db_commit#1",
        "retry:db_commit#1",
        "original:db_statement#1",
        "original:db_statement#1",
    ]
    assert plan.orderings[0].at == EFFECT  # the clean call's own point, with its label
    assert plan.orderings[2].name == "retry sent at db_statement#1 (SELECT idempotency_keys) of the original"


def test_an_ordering_at_a_point_the_clean_call_never_passed_is_tried_and_never_reached() -> None:
    plan = RacePlan(budget_s=60.0, only=("original:db_commit#9",), clock=Clock())
    script = Script(plan)
    script.call(0, 1)
    assert [o.id for o in plan.orderings] == ["original:db_commit#9"]
    assert script.reach(1, 1, REQUEST)[0] is Decision.PASS  # not the point: the original runs on
    script.call(1, 1, CLEAN[1:])
    one = plan.tries[1]
    assert (one.made, one.why) == (Made.NOT_REACHED, "the original never reached db_commit#9")


def test_every_ordering_has_an_id_that_names_it_again() -> None:
    plan, _ = learned()
    ids = [o.id for o in plan.orderings]
    assert ids[3] == "original:db_commit#1"
    assert ids[len(CLEAN) + 3] == "retry:db_commit#1"
    again = RacePlan(budget_s=60.0, only=tuple(ids), clock=Clock())
    Script(again).call(0, 1)
    assert again.orderings == plan.orderings


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("db_commit#1", "is not an ordering"),
        ("both:db_commit#1", "is not an ordering"),
        ("original:commit#1", "is not a hold point"),
        ("retry:db_commit#1@power_loss", "crashes nothing"),
    ],
)
def test_a_race_scenario_refuses_an_ordering_it_cannot_name(text: str, said: str) -> None:
    data = invoice_scenario()
    data["faults"] = {"crash_points": {"race": {"only": [text]}}}
    with pytest.raises(ScenarioError, match=said):
        parse_scenario(data)
    data["faults"] = {"crash_points": {"race": {"only": ["original:db_commit#1"], "repeat": 3}}}
    race = parse_scenario(data).faults.crash_points.race  # type: ignore[union-attr]
    assert race is not None
    assert (race.only, race.repeat) == (["original:db_commit#1"], 3)


@pytest.mark.parametrize("looks", [True, False])
def test_the_original_waits_at_its_next_point_until_the_store_was_read_at_the_retrys_answer(
    looks: bool,
) -> None:
    """With reads at the answer (``looks``), the retry answered while the original is at work holds the
    original at its next point until the run says it read the store; without them, nothing waits."""
    plan = RacePlan(budget_s=60.0, clock=Clock(), looks=looks)
    script = Script(plan)
    script.call(0, 1)
    to(plan, "retry sent at db_commit#2 (INSERT idempotency_keys) of the original")
    intent = len(plan.tries) + 1
    for point in CLEAN[:5]:
        assert script.reach(intent, 1, point)[0] is Decision.PASS
    decision, held = script.reach(intent, 1, KEY)
    assert decision is Decision.HOLD
    assert script.reach(intent, 2, REQUEST)[0] is Decision.PASS
    plan.blocked(held)  # the server serializes: the retry waits for the original's commit
    assert plan.releases() == [(held, Decision.PASS)]
    assert script.reach(intent, 2, READ_KEY)[0] is Decision.PASS  # finds the key record: answers at once
    assert script.reach(intent, 2, RESPONSE)[0] is Decision.PASS
    plan.ended(intent, 2)
    decision, next_one = script.reach(intent, 1, RESPONSE)
    if not looks:
        assert decision is Decision.PASS
        return
    assert decision is Decision.HOLD
    assert plan.releases() == []  # the read at the answer is not done
    plan.looked(intent)
    assert plan.releases() == [(next_one, Decision.PASS)]
    assert plan.releases() == []
    plan.ended(intent, 1)
    assert plan.tries[intent].made is Made.BLOCKED


def test_a_timeout_retry_breaks_no_stream_and_lets_the_original_go_once_the_retry_ends() -> None:
    """``second: timeout``: the same orderings and ids as a retry's, the original held at its point and its
    stream left whole (the client gives up on it by its own timeout); the retry sent then runs to its end,
    and the original goes on."""
    plan, script = learned(second=Second.TIMEOUT)
    assert [o.id for o in plan.orderings][:2] == ["original:request", "original:db_statement#1"]
    to(plan, "retry sent at db_commit#1 (INSERT invoices) of the original")
    intent = len(plan.tries) + 1
    for point in CLEAN[:3]:
        script.reach(intent, 1, point)
    decision, held = script.reach(intent, 1, EFFECT)
    assert decision is Decision.HOLD
    assert plan.severs() == []  # no stream broken: the client's timeout makes the retry
    assert plan.limit(At(intent, 1, EFFECT, CLEAN[:4], Site.POSTGRES, held)) == 2.0
    script.call(intent, 2)
    assert plan.releases() == [(held, Decision.PASS)]
    assert plan.tries[intent].made is Made.MADE
    told = plan.told()
    assert told is not None
    assert told["second"] == "timeout"


def test_a_timeout_retry_held_at_its_point_waits_a_third_of_the_hold_limit_inside_its_own_timeout() -> None:
    """The retry held at its point while the original runs: the original waits at the door unbroken until
    the retry (sent at its timeout) is held; the retry's hold is shorter than the client's timeout, so a
    blocked ordering lets it go before the client gives up on it too (a third attempt would make three)."""
    plan, script = learned(second=Second.TIMEOUT)
    to(plan, "retry held at db_commit#1 (INSERT invoices) while the original runs")
    intent = len(plan.tries) + 1
    decision, door = script.reach(intent, 1, REQUEST)
    assert decision is Decision.HOLD
    assert plan.severs() == []
    for point in CLEAN[:3]:
        script.reach(intent, 2, point)
    decision, held = script.reach(intent, 2, EFFECT)
    assert decision is Decision.HOLD
    assert plan.releases() == [(door, Decision.PASS)]
    limit = plan.limit(At(intent, 2, EFFECT, CLEAN[:4], Site.POSTGRES, held))
    assert limit == pytest.approx(2.0 / 3)
    assert client_timeout(2.0) == pytest.approx(4.0 / 3)
    plan.blocked(held)  # the original waits on the retry's row
    assert plan.releases() == [(held, Decision.PASS)]
    assert plan.tries[intent].made is Made.BLOCKED


def test_a_timeout_races_scenario_sets_the_clients_timeout_below_the_hold_limit() -> None:
    """What ``races --second timeout`` runs: the client's attempt timeout two thirds of the hold limit (the
    user's own, however long, is not kept), the ordinary retry policy, no stream fault."""
    scenario = parse_scenario(invoice_scenario())
    data = racing_data(scenario, 30.0, 3.0, second=Second.TIMEOUT)
    assert data["client"]["attempt_timeout_s"] == pytest.approx(2.0)
    assert data["faults"]["crash_points"]["race"]["second"] == "timeout"
    assert not data["faults"]["crash_points"]["files"]
    retry = racing_data(scenario, 30.0, 3.0)
    assert retry["client"]["attempt_timeout_s"] == 14.0
    assert "second" not in retry["faults"]["crash_points"]["race"]
    assert parse_scenario(data).faults.crash_points.race.second == "timeout"  # type: ignore[union-attr]


def test_a_timeout_retrys_reproducer_races_by_the_timeout_again() -> None:
    """A finding of ``races --second timeout`` has a retry's id (``original:db_commit#2``): its reproducer
    takes the kind of race from the races that found it, not from the id, so it times out again."""
    row = RaceRow(
        ordering="retry sent at db_commit#2 (INSERT invoices) of the original",
        intent=7,
        id="original:db_commit#2",
        held="original",
        point="db_commit#2",
        label="INSERT invoices",
        made="blocked",
        why="",
        verdict="duplicate",
        effects=2,
    )
    scenario = parse_scenario(invoice_scenario())
    again = race_reproducer(scenario, row, 2.0, second=Second.TIMEOUT)
    race = again.faults.crash_points.race  # type: ignore[union-attr]
    assert race is not None
    assert (race.second, race.only, race.repeat) == ("timeout", ["original:db_commit#2"], 3)
    assert again.client.attempt_timeout_s == pytest.approx(4.0 / 3)
    broken = race_reproducer(scenario, row, 2.0).faults.crash_points.race  # type: ignore[union-attr]
    assert broken is not None
    assert broken.second == "retry"
