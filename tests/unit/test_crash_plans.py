"""Hold points by name, the plans that choose them, and the controller that counts and holds them.

The controller is driven here as the fault proxy, the PostgreSQL proxy and the sink drive it in a
run, with a real history file and a kill that only counts: what it records and when it kills.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.crashpoints.decisions import At, Decision, Reached, Site
from harness.crashpoints.fsholds import file_point
from harness.crashpoints.options import ExploreOptions
from harness.crashpoints.paths import ExplorePlan, FixedPlan
from harness.crashpoints.pgproxy import commit_point
from harness.crashpoints.pgwire import Commit, Statement
from harness.crashpoints.plans import ObservePlan, OrderPlan, PathPlan, Plan, plan_for
from harness.crashpoints.points import (
    Crash,
    FileOp,
    Point,
    PointKind,
    file_label,
    parse_path,
    parse_point,
    path_name,
    reached,
)
from harness.crashpoints.router import KEPT_RECENT, Router
from harness.errors import ScenarioError
from harness.history import HistoryWriter
from harness.scenario import CrashPoints, parse_scenario
from tests.helpers.scenarios import invoice_scenario

REQUEST, RESPONSE = Point(PointKind.REQUEST), Point(PointKind.RESPONSE)
DB1, DB2 = Point(PointKind.DB_COMMIT, 1), Point(PointKind.DB_COMMIT, 2)
DOWN1 = Point(PointKind.DOWNSTREAM, 1)
CLEAN = (REQUEST, DB1, DB2, RESPONSE)


def test_point_names_round_trip() -> None:
    for name in ("request", "response", "db_commit#1", "downstream#12"):
        assert parse_point(name).name == name
    assert parse_path("db_commit#1/db_commit#2") == (DB1, DB2)
    assert path_name((DB1, DB2)) == "db_commit#1/db_commit#2"


@pytest.mark.parametrize("bad", ["commit#1", "db_commit", "db_commit#0", "request#1", "a/b/c", ""])
def test_bad_point_names_say_what_a_point_is(bad: str) -> None:
    with pytest.raises(ValueError, match=r"hold point|at most 2"):
        parse_path(bad)


def test_a_fixed_plan_gives_each_intent_the_first_hold_that_names_it() -> None:
    plan = FixedPlan([("db_commit#2", [1, 2], None), ("response", None, None)])
    assert plan.path_of(1) == (DB2,)
    assert plan.path_of(0) == (RESPONSE,)
    assert FixedPlan([("request", [3], None)]).path_of(0) == ()
    (labelled,) = FixedPlan([("db_commit#2", None, ["INSERT invoices"])]).path_of(0)
    assert labelled.label == "INSERT invoices"


def test_exploring_starts_clean_then_holds_every_point_repeat_times_each_first_try_first() -> None:
    plan = ExplorePlan(repeat=2)
    assert plan.path_of(0) == ()
    plan.answered(0, CLEAN, 0)
    # Every point's first try before any point's second: a budget spent early has tried each once.
    assert [plan.path_of(i) for i in range(1, 9)] == [(p,) for _ in range(2) for p in CLEAN]
    assert plan.path_of(9) == ()  # nothing more to explore: a clean call


def test_a_retry_after_a_hold_adds_its_own_commits_as_paths_of_two() -> None:
    plan = ExplorePlan(repeat=1)
    plan.path_of(0)
    plan.answered(0, CLEAN, 0)
    assert plan.path_of(1) == (REQUEST,)
    plan.answered(1, CLEAN, 1)  # after the control point: a first execution again, not explored
    assert plan.path_of(2) == (DB1,)
    plan.answered(2, (REQUEST, DB1, DB2, RESPONSE), 1)
    plan.answered(2, (REQUEST, DB1, DB2, RESPONSE), 1)  # seen twice: planned once
    assert [plan.path_of(i) for i in range(3, 7)] == [(DB2,), (RESPONSE,), (DB1, DB1), (DB1, DB2)]


class Clock:
    """The time a plan reads, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_try_begins_once_the_budget_is_spent_and_the_plan_says_so() -> None:
    """The plan has no cap on points: its budget, on the clock it is given, stops it. A try begun before
    the deadline runs to its end; none begins after it, and the crash_plan event says the budget ran out."""
    clock = Clock()
    plan = ExplorePlan(repeat=1, budget_s=30, clock=clock)
    plan.answered(0, CLEAN, 0)
    clock.now += 29.9
    assert not plan.exhausted()
    assert plan.path_of(1) == (REQUEST,)
    clock.now += 0.1
    assert plan.exhausted()
    assert plan.ran_out
    assert plan.planned == [(p,) for p in CLEAN]  # planned whole: what is untried is known and named
    told = PathPlan(plan).told()
    assert told is not None
    assert told["ran_out"] is True
    assert [p["path"] for p in told["planned"]] == ["request", "db_commit#1", "db_commit#2", "response"]


def test_a_plan_with_every_try_made_is_done_before_its_budget() -> None:
    plan = ExplorePlan(repeat=1, budget_s=30, clock=Clock())
    plan.answered(0, (REQUEST, RESPONSE), 0)
    for intent in (1, 2):
        assert not plan.exhausted()
        plan.path_of(intent)
    assert plan.exhausted()
    assert not plan.ran_out


def test_a_budget_of_nothing_plans_the_states_and_tries_none() -> None:
    plan = ExplorePlan(repeat=1, budget_s=0, clock=Clock())
    assert not plan.exhausted()  # the clean call first, whatever the budget: it is what is planned from
    plan.answered(0, CLEAN, 0)
    assert plan.exhausted()
    assert plan.ran_out
    assert len(plan.planned) == 4


def test_a_try_its_call_did_not_take_is_tried_again_at_most_repeat_times() -> None:
    plan = ExplorePlan(repeat=2)
    plan.path_of(0)
    plan.answered(0, (REQUEST, DB1, RESPONSE), 0)
    assert plan.path_of(1) == (REQUEST,)
    plan.unheld(1)
    plan.unheld(1)
    plan.unheld(1)  # bounded: the third miss is not tried again
    assert [plan.path_of(i) for i in range(2, 9)] == [(REQUEST,)] * 2 + [(DB1,), (RESPONSE,)] + [
        (REQUEST,),
        (DB1,),
        (RESPONSE,),
    ]


def test_only_plans_the_named_points_and_paths() -> None:
    plan = ExplorePlan(repeat=1, only=["db_commit#2", "db_commit#1/db_commit#1", "downstream#1"])
    plan.path_of(0)
    plan.answered(0, CLEAN, 0)
    assert plan.planned == [(DB2,), (DB1, DB1)]  # the clean call never reached downstream#1


class Kills:
    def __init__(self, works: bool = True) -> None:
        self.points: list[str] = []
        self.works = works

    def __call__(self, *, trigger: str, point: str) -> bool:
        self.points.append(point)
        return self.works


class Sites:
    """The router driven as the hold sites drive it in a run: the fault proxy's request and response, a
    commit of the PostgreSQL proxy, a call of the sink, a file operation of the tracer. Each returns
    whether the pod was killed there."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def _reach(self, point: Reached) -> bool:
        return asyncio.run(self.router.reached(point)) is not Decision.PASS

    def request(self, intent: int, attempt: int) -> bool:
        self.router.opened(intent, attempt)
        return self._reach(Reached(Site.PROXY, PointKind.REQUEST, attempt=(intent, attempt)))

    def response(self, intent: int, attempt: int, answer: str | None = None) -> bool:
        back = Reached(Site.PROXY, PointKind.RESPONSE, attempt=(intent, attempt), answer=answer)
        return self._reach(back)

    def ended(self, intent: int, attempt: int) -> None:
        self.router.closed(intent, attempt)

    def db_commit(self, commit: Commit) -> bool:
        return self._reach(commit_point(commit, None))

    def downstream(self, key: str, replayed: bool) -> bool:
        detail = {"key": key, "replayed": replayed}
        return self._reach(Reached(Site.SINK, PointKind.DOWNSTREAM, detail=detail))

    def fs_op(self, op: str, paths: list[str]) -> bool:
        return self._reach(file_point(op, paths))


Controller = Callable[[dict[str, Any], Kills], Sites]


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    """A router with the crash points' plan, writing to a real history (closed at the end), killing with
    ``kills``."""
    history = HistoryWriter(tmp_path / "history.jsonl")

    def make(crash: dict[str, Any], kills: Kills) -> Sites:
        router = Router(plan_for(CrashPoints.model_validate(crash)))
        router.attach(history, kills, lambda: True)
        return Sites(router)

    yield make
    history.close()


def events(tmp_path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (tmp_path / "history.jsonl").read_bytes().splitlines()]


COMMIT = Commit((Statement("INSERT 0 1", "INSERT INTO invoices (memo) VALUES ($1)"),), autocommit=False)
READ = Commit(
    (Statement("SELECT 1", "SELECT response FROM idempotency_keys WHERE key = $1"),), autocommit=True
)
AUDIT = Commit((Statement("INSERT 0 1", "INSERT INTO audit (what) VALUES ($1)"),), autocommit=True)


def test_points_are_counted_per_attempt_and_the_planned_one_kills(
    tmp_path: Path, controller: Controller
) -> None:
    kills = Kills()
    holds = controller({"holds": [{"at": "db_commit#2", "intents": [0]}]}, kills)
    assert holds.db_commit(COMMIT) is False  # no call in flight (the pod's start-up): not a point
    assert holds.request(0, 1) is False
    assert holds.db_commit(COMMIT) is False
    generation = holds.router.generation
    assert holds.db_commit(COMMIT) is True
    assert kills.points == ["db_commit#2"]
    assert holds.router.generation == generation + 1  # the pod's connections are cut off
    assert holds.downstream("k", False) is False  # the window closed with the kill
    holds.ended(0, 1)
    holds.request(0, 2)  # the retry counts from 1 again, and is not held a second time
    assert [holds.db_commit(COMMIT), holds.db_commit(COMMIT), holds.response(0, 2)] == [False] * 3
    recorded = [(e["attempt"], e["point"], e["held"]) for e in events(tmp_path) if e["type"] == "crash_point"]
    assert recorded == [
        (1, "request", False),
        (1, "db_commit#1", False),
        (1, "db_commit#2", True),
        (2, "request", False),
        (2, "db_commit#1", False),
        (2, "db_commit#2", False),
        (2, "response", False),
    ]
    held = next(e for e in events(tmp_path) if e.get("held"))
    assert held["statements"] == ["INSERT INTO invoices (memo) VALUES ($1)"]
    assert (held["wrote"], held["label"], held["nth"]) == ("yes", "INSERT invoices", 2)
    assert held["path"] == "db_commit#2"


def test_every_commit_is_a_point_and_a_planned_one_is_found_by_what_it_commits(
    tmp_path: Path, controller: Controller
) -> None:
    """The clean call read, then wrote the invoice; a later call writes an audit row first: db_commit#2
    is then the audit row by index, and the hold still falls on the invoice's commit."""
    kills = Kills()
    holds = controller({"explore": {"repeat": 1}}, kills)
    holds.request(0, 1)
    assert [holds.db_commit(READ), holds.db_commit(COMMIT), holds.response(0, 1)] == [False] * 3
    holds.ended(0, 1)
    assert holds.request(1, 1) is True  # the plan's first path: the control point
    holds.ended(1, 1)
    holds.request(1, 2)
    holds.response(1, 2)
    holds.ended(1, 2)
    holds.request(2, 1)  # db_commit#1: the read (reads are points too: a label, never a filter)
    assert holds.db_commit(READ) is True
    holds.ended(2, 1)
    holds.request(2, 2)
    holds.response(2, 2)
    holds.ended(2, 2)
    holds.request(3, 1)  # db_commit#2, planned as 'INSERT invoices'
    assert holds.db_commit(AUDIT) is False
    assert holds.db_commit(READ) is False
    assert holds.db_commit(COMMIT) is True
    assert kills.points == ["request", "db_commit#1", "db_commit#3"]
    plans = [e for e in events(tmp_path) if e["type"] == "crash_plan"]
    assert plans[-1]["planned"] == [
        {"path": "request", "labels": [None]},
        {"path": "db_commit#1", "labels": ["SELECT idempotency_keys"]},
        {"path": "db_commit#2", "labels": ["INSERT invoices"]},
        {"path": "response", "labels": [None]},
    ]


def test_an_answer_that_is_no_answer_to_the_tool_is_never_a_point(
    tmp_path: Path, controller: Controller
) -> None:
    kills = Kills()
    holds = controller({"holds": [{"at": "response"}]}, kills)
    holds.request(0, 1)
    assert holds.response(0, 1, "HTTP 404") is False  # a session the restarted pod does not know
    holds.ended(0, 1)
    holds.request(0, 2)
    assert holds.response(0, 2) is True
    assert kills.points == ["response"]
    refused = [e for e in events(tmp_path) if e.get("answer")]
    assert [(e["attempt"], e["held"], e["answer"]) for e in refused] == [(1, False, "HTTP 404")]


def test_the_fence_keeps_out_what_the_dying_pod_connects_with_until_another_has_started(
    tmp_path: Path,
) -> None:
    pid = [100]
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        router = Router(plan_for(CrashPoints.model_validate({"holds": [{"at": "db_commit#1"}]})))
        router.attach(history, Kills(), lambda: True, lambda: pid[0])
        holds = Sites(router)
        before = holds.router.connection()
        holds.request(0, 1)
        assert holds.db_commit(COMMIT) is True
        assert holds.router.cut(before)  # its connections are cut off
        assert holds.router.connection() is None  # and a new one is the dying pod's own: it gets nowhere
        assert holds.router.cut(None)
        pid[0] = 101  # restarted
        after = holds.router.connection()
        assert after is not None
        assert not holds.router.cut(after)


def test_a_point_never_reached_is_a_missed_kill(tmp_path: Path, controller: Controller) -> None:
    holds = controller({"holds": [{"at": "response/db_commit#3"}]}, Kills())
    holds.request(4, 1)
    assert holds.response(4, 1) is True
    holds.ended(4, 1)
    holds.request(4, 2)
    holds.response(4, 2)  # the retry replayed: no commit at all
    holds.router.record_missed()
    (missed,) = [e for e in events(tmp_path) if e["type"] == "fault_missed"]
    assert missed["fault"] == "kill"
    assert missed["counted"] is False  # planned, so the run is inconclusive
    assert "never reached db_commit#3" in missed["reason"]


def test_a_pod_that_cannot_be_killed_is_not_held(controller: Controller) -> None:
    holds = controller({"holds": [{"at": "request"}]}, Kills(works=False))
    assert holds.request(0, 1) is False
    assert holds.router.generation == 0


def test_the_scenario_refuses_crash_points_it_cannot_count() -> None:
    data = invoice_scenario(concurrency=4)
    data["faults"] = {"crash_points": {"holds": [{"at": "response"}]}}
    with pytest.raises(ScenarioError, match="concurrency 1"):
        parse_scenario(data)
    data = invoice_scenario()
    data["faults"] = {"crash_points": {"holds": [{"at": "db_commit#1"}]}}
    with pytest.raises(ScenarioError, match=r"needs services\.postgres"):
        parse_scenario(data)
    data["faults"] = {"crash_points": {"explore": {}, "holds": [{"at": "request"}]}}
    with pytest.raises(ScenarioError, match="one of holds, explore, order or race"):
        parse_scenario(data)
    data["faults"] = {"crash_points": {"holds": [{"at": "db_commit#0"}]}}
    with pytest.raises(ScenarioError, match="not a hold point"):
        parse_scenario(data)


def test_a_tries_story_tells_the_points_each_attempt_passed_and_the_one_held() -> None:
    from harness.audit.stories import Passed, Step, Story
    from harness.report.stories import story_lines

    def step(attempt: int, outcome: str, points: list[Passed], **more: Any) -> Step:
        fields: dict[str, Any] = {"detail": None, "code": None, "text": None, "faults": []} | more
        t = 10.0 + attempt / 10
        return Step(
            attempt,
            6 + attempt,
            "pod-0",
            t,
            t + 0.05,
            outcome,
            reads_as_failure=False,
            points=points,
            **fields,
        )

    held = Passed("db_commit#1", held=True, statements=("INSERT INTO invoices\n\x1b[2J",))
    refused = {"detail": "refused"}
    steps = [
        step(1, "transport_error", [Passed("request", held=False), held], faults=["kill#1 pod-0 @10.15s"]),
        step(2, "transport_error", [], **refused),
        step(3, "transport_error", [], **refused),
        step(4, "ok", [Passed("request", False), Passed("downstream#1", False, key="k-3", replayed=True)]),
    ]
    story = Story(3, "m3", "k-3", "duplicate", "kill", "ok", 2, steps, [], 0, "", None)
    lines = story_lines(story)
    assert lines[1:] == [
        "  attempt 1 (request 7, pod-0) 10.100s → 10.150s: transport_error; hit by kill#1 pod-0 @10.15s",
        "    request: the request was at the server's door",
        "    db_commit#1: committed 'INSERT INTO invoices\\n\\x1b[2J': HELD, the pod SIGKILLed here",
        "  attempts 2–3 (requests 8–9, pod-0) 10.200s → 10.350s: transport_error refused, 2 times",
        "  attempt 4 (request 10, pod-0) 10.400s → 10.450s: ok",
        "    request: the request was at the server's door",
        "    downstream#1: the downstream recorded a call with key 'k-3', deduplicated by it",
    ]


def test_a_reproducer_puts_back_only_the_scenario_dir_the_user_wrote(tmp_path: Path) -> None:
    """Every existing absolute path was rewritten: ``/tmp`` in a SQL literal became
    ``{scenario_dir}/../..``, changing what the reproducer's query counted; then every text holding
    the scenario's directory was: a workload argument the user wrote out inside it was sent
    differently by the reproducer (``{scenario_dir}/../customers.csv``, another string)."""
    from harness.crashpoints.emit import portable
    from harness.scenario import load_scenario

    repo = tmp_path / "repo"
    here = repo / "tests" / "crash"
    here.mkdir(parents=True)
    data = invoice_scenario(mode="naive")
    data["target"]["command"] = ["python", "{scenario_dir}/server.py", "--db={scenario_dir}/x.db"]
    data["target"]["env"]["NOTE"] = str(repo)  # written out by the user: theirs
    data["workload"]["arguments"]["customer_id"] = f"{repo}/customers.csv"
    literal = (
        f"SELECT memo AS marker, COUNT(*) AS effects FROM invoices WHERE customer_id = '{repo}/c' GROUP BY 1"
    )
    data["audit"]["effects"]["sql"]["query"] = literal
    (repo / "chaos.yaml").write_text(yaml.safe_dump(data))
    scenario = load_scenario(repo / "chaos.yaml")
    ran = scenario.model_dump(mode="json")
    assert ran["target"]["command"][1] == f"{repo}/server.py"

    made = portable(ran, scenario, here)
    assert made["target"]["command"] == [
        "python",
        "{scenario_dir}/../../server.py",
        "--db={scenario_dir}/../../x.db",
    ]
    assert made["target"]["env"]["NOTE"] == str(repo)
    assert made["workload"]["arguments"]["customer_id"] == f"{repo}/customers.csv"
    assert made["audit"]["effects"]["sql"]["query"] == literal
    assert portable(ran, scenario, repo)["target"]["command"][1] == "{scenario_dir}/server.py"
    changed = {**ran, "target": {**ran["target"], "command": ["python", "/elsewhere/server.py"]}}
    assert portable(changed, scenario, here)["target"]["command"] == ["python", "/elsewhere/server.py"]
    unloaded = parse_scenario(data)  # not loaded from a file: nothing was written out
    assert portable(unloaded.model_dump(mode="json"), unloaded, here) == unloaded.model_dump(mode="json")


def test_a_reproducer_keeps_every_character_and_a_name_of_its_own() -> None:
    from harness.crashpoints.emit import reproducer_scenario_name
    from harness.crashpoints.explore import PointResult
    from harness.scenario.model import scenario_yaml

    text = "line\x85next \u2028 é"
    assert yaml.safe_load(scenario_yaml({"memo": text}))["memo"] == text  # U+0085 reloaded as a space
    long = "a" * 60
    names = {reproducer_scenario_name(long, PointResult((p,))) for p in (DB1, DB2, RESPONSE)}
    assert len(names) == 3
    for name in names:
        assert len(name) <= 64
        assert not name.endswith("-")


def test_a_commit_that_grew_is_still_the_planned_one_and_counted_by_what_it_holds() -> None:
    """A fix that puts the key record into the effect's transaction: the reproducer's hold, planned at
    'INSERT invoices', falls on the one commit that now holds both."""
    from harness.crashpoints.points import reached

    invoice = Point(PointKind.DB_COMMIT, 2, "INSERT invoices", 1)
    read = Point(PointKind.DB_COMMIT, 1, "SELECT idempotency_keys")
    both = Point(PointKind.DB_COMMIT, 2, "INSERT invoices; INSERT idempotency_keys")
    assert not reached(invoice, [read])
    assert reached(invoice, [read, both])
    second = Point(PointKind.DB_COMMIT, 3, "INSERT invoices", 2)
    assert not reached(second, [read, both])  # the first commit with an invoice, not the second
    assert reached(second, [read, both, Point(PointKind.DB_COMMIT, 3, "INSERT invoices")])
    assert not reached(Point(PointKind.DB_COMMIT, 1, "INSERT invoices; INSERT audit"), [both])


def test_a_request_while_an_earlier_exchange_is_open_is_marked(
    tmp_path: Path, controller: Controller
) -> None:
    holds = controller({"holds": [{"at": "db_commit#1", "intents": [9]}]}, Kills())
    holds.request(0, 1)  # its client will give up; the server is still on it
    holds.request(0, 2)
    holds.ended(0, 1)
    holds.ended(0, 2)
    holds.request(1, 1)
    requests = [e for e in events(tmp_path) if e["type"] == "crash_point" and e["point"] == "request"]
    assert [e.get("overlap", False) for e in requests] == [False, True, False]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ExploreOptions(repeat=100_000),
            "--repeat 100000: give the tries per crash state, an integer from 1",
        ),
        (ExploreOptions(repeat=0), "--repeat 0: give the tries per crash state"),
        (ExploreOptions(budget_s=-1), "--budget -1: give the exploration's seconds, from 0"),
        (ExploreOptions(budget_s=math.inf), "--budget inf: give the exploration's seconds"),
        (ExploreOptions(jobs=0), "--jobs 0: give the number of copies of the target to explore in"),
    ],
)
def test_options_out_of_range_are_named_as_the_flags_that_ask_for_them(
    options: ExploreOptions, message: str
) -> None:
    """``crashpoints --repeat 100000`` was refused with a message about ``target.max_restarts``, a
    field the user never set."""
    from harness.crashpoints.explore import exploring_scenario
    from harness.errors import UsageError

    scenario = parse_scenario(invoice_scenario(mode="atomic", intents=1))
    exploring = exploring_scenario(scenario, ExploreOptions(repeat=100, budget_s=86_400))
    assert exploring.workload.intents == 50_002  # the most tries any budget is given
    assert exploring.target.max_restarts == 100_000
    assert exploring.workload.max_duration_s == 86_400
    with pytest.raises(UsageError, match=re.escape(message)):
        exploring_scenario(scenario, options)


def test_the_exploration_runs_for_its_budget_and_its_last_try() -> None:
    """No cap on points: the run is given tries for as long as the budget, and time for the try in flight
    when it is spent, whatever the scenario's own max_duration_s."""
    from harness.crashpoints.explore import exploring_scenario

    data = invoice_scenario(mode="atomic", intents=1)
    data["workload"]["max_duration_s"] = 60
    exploring = exploring_scenario(parse_scenario(data), ExploreOptions(budget_s=300))
    crash = exploring.faults.crash_points
    assert crash is not None
    assert crash.explore is not None
    assert (crash.explore.budget_s, crash.explore.repeat, crash.explore.power_loss) == (300, 1, True)
    assert exploring.workload.intents == 2 + 3000  # the warm-up, the clean call, a try per 0.1 s at most
    patience = exploring.client.give_up_after_s
    assert patience is not None
    assert exploring.workload.max_duration_s >= 300 + 2 * patience


def test_an_exploration_bounds_each_intent_by_time_as_well_as_attempts() -> None:
    """Crash points raised max_attempts (to 280 here) and kept the scenario's 20 s attempt timeout: a
    server that hangs took each intent's 280 attempts to their timeout, the exploration to
    max_duration_s. An intent now gives up once a restart's patience and one attempt have passed."""
    from harness.crashpoints.explore import exploring_scenario

    data = invoice_scenario(mode="atomic", intents=1)
    data["client"].update(attempt_timeout_s=20, max_attempts=3)
    exploring = exploring_scenario(parse_scenario(data), ExploreOptions())
    target = exploring.target
    assert exploring.client.max_attempts >= 280  # as many as a restart needs, at 0.1 s apart
    assert exploring.client.give_up_after_s == target.ready_timeout_s + target.stop_timeout_s + 10 + 20


# -- file operations and power losses

TRUNC, WRITE1, FSYNC1 = (
    Point(PointKind.FS_TRUNCATE, 1),
    Point(PointKind.FS_WRITE, 1),
    Point(PointKind.FS_FSYNC, 1),
)
WRITE2, WRITE3, RENAME = (
    Point(PointKind.FS_WRITE, 2),
    Point(PointKind.FS_WRITE, 3),
    Point(PointKind.FS_RENAME, 1),
)
FILES = (REQUEST, TRUNC, WRITE1, WRITE2, WRITE3, FSYNC1, RENAME, RESPONSE)


def test_file_points_and_power_losses_have_names_that_round_trip() -> None:
    for name in ("fs_write#3", "fs_rename#1@power_loss", "response@power_loss", "request@kill"):
        assert parse_point(name).name == name.removesuffix("@kill")
    lost = parse_point("fs_write#3@power_loss")
    assert (lost.operation, lost.crash) == ("fs_write#3", Crash.POWER_LOSS)
    assert lost != parse_point("fs_write#3")  # two points to explore
    assert reached(
        lost, [Point(PointKind.FS_WRITE, 1), Point(PointKind.FS_WRITE, 2), Point(PointKind.FS_WRITE, 3)]
    )
    with pytest.raises(ValueError, match="@power_loss"):
        parse_point("fs_write#3@unplugged")


def test_a_call_that_writes_files_is_explored_telling_points_first_each_both_ways() -> None:
    """Points the tracer said nothing of (no ``op``): each is a crash state of its own but the first (the
    truncation, before which nothing ran: the request's state)."""
    plan = ExplorePlan(repeat=1, power_loss=True, store=())
    plan.answered(0, FILES, 0)  # the warm-up: a fresh store's first call is not the others'
    assert plan.clean is None
    assert plan.path_of(1) == ()
    plan.answered(1, FILES, 0)
    assert plan.clean_intent == 1
    ordered = [path_name(p) for p in plan.planned]
    assert ordered[:4] == ["request", "request@power_loss", "response", "response@power_loss"]
    assert [p.name for p in plan.same[(REQUEST,)]] == ["fs_truncate#1"]
    operations = [name for name in ordered[4:] if "@" not in name]
    # fsync, rename before the writes; the first and last write of a run before the middle
    assert operations == ["fs_fsync#1", "fs_rename#1", "fs_write#1", "fs_write#3", "fs_write#2"]
    assert len(ordered) == 2 * len(FILES) - 2
    assert plan.points == 2 * len(FILES)


def test_power_losses_are_planned_only_where_the_call_wrote_files() -> None:
    plan = ExplorePlan(repeat=1, power_loss=True, store=())
    plan.answered(0, CLEAN, 0)
    assert [path_name(p) for p in plan.planned] == ["request", "db_commit#1", "db_commit#2", "response"]
    off = ExplorePlan(repeat=1)
    off.answered(0, FILES, 0)
    off.answered(1, FILES, 0)
    assert not any(p[0].crash is Crash.POWER_LOSS for p in off.planned)


def test_only_names_a_power_loss_of_a_point_the_clean_call_passed() -> None:
    plan = ExplorePlan(repeat=1, only=["fs_rename#1@power_loss", "fs_unlink#1"], power_loss=True)
    plan.answered(0, FILES, 0)
    plan.answered(1, FILES, 0)
    assert [path_name(p) for p in plan.planned] == ["fs_rename#1@power_loss"]


def test_a_file_operation_is_held_by_what_it_writes_and_a_power_loss_is_taken_once(
    tmp_path: Path, controller: Controller
) -> None:
    kills = Kills()
    holds = controller({"holds": [{"at": "fs_write#2@power_loss", "intents": [0]}]}, kills)
    assert holds.request(0, 1) is False
    assert holds.fs_op("write", ["notes.jsonl"]) is False
    assert holds.fs_op("write", ["notes.jsonl"]) is True  # the second write: the pod killed before it
    assert kills.points == ["fs_write#2@power_loss"]
    assert holds.router.take_power_loss()
    assert not holds.router.take_power_loss()  # once: the rollback takes it
    held = [e for e in events(tmp_path) if e["type"] == "crash_point" and e["held"]]
    assert (held[-1]["point"], held[-1]["paths"]) == ("fs_write#2@power_loss", ["notes.jsonl"])


def test_a_kill_is_no_power_loss(tmp_path: Path, controller: Controller) -> None:
    holds = controller({"holds": [{"at": "fs_rename#1", "intents": [0]}]}, Kills())
    holds.request(0, 1)
    assert holds.fs_op("rename", ["a.tmp", "a"]) is True
    assert not holds.router.take_power_loss()


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("memory.jsonl.f1bdd5d235aac4ad86b76860be.tmp", "memory.jsonl.*.tmp"),  # write-file-atomic
        ("tmpk3j_9x2a", "tmp*"),  # Python's tempfile
        ("notes.1733230000123.json", "notes.*.json"),  # a timestamp
        ("notes.jsonl.tmp", "notes.jsonl.tmp"),
        ("tasks.db-journal", "tasks.db-journal"),
        # A git repository as the store, written by GitPython: each commit's objects are new files.
        (".git/objects/objp8kwwxvy", ".git/objects/obj*"),  # tempfile.mkstemp(prefix="obj")
        (".git/objects/obj_kwwxvya", ".git/objects/obj*"),
        (".git/objects/a4/tmp_obj_6FcNsW", ".git/objects/*/tmp_obj_*"),  # git's own
        (".git/objects/5f/3c9e2b01d4a7c8e9f0a1b2c3d4e5f60718293a", ".git/objects/*/*"),
        (".git/logs/refs/heads/master.lock", ".git/logs/refs/heads/master.lock"),
        ("settings.json", "settings.json"),
        ("messages.jsonl", "messages.jsonl"),  # a word of eight letters is a name
    ],
)
def test_a_file_named_anew_each_call_is_the_same_point(path: str, label: str) -> None:
    assert file_label(path) == label


# -- the router's own work, with plans fed scripted points (no process)


def at(intent: int, attempt: int, point: Point, ticket: int) -> At:
    return At(intent, attempt, point, (point,), Site.POSTGRES, ticket)


def test_an_order_holds_the_first_arrivals_and_releases_them_in_its_order() -> None:
    """Two attempts of one intent at the same statement: the second to arrive goes first, the first once
    the second has gone on to its next point."""
    statement = Point(PointKind.DB_STATEMENT, 1, "INSERT invoices")
    plan = OrderPlan(parse_point("db_statement#1"), [2, 1])
    assert plan.decide(at(0, 1, statement, 1)) is Decision.HOLD
    assert plan.releases() == []  # one of two there: nothing goes yet
    assert plan.decide(at(0, 2, statement, 2)) is Decision.HOLD
    assert plan.releases() == [(2, Decision.PASS)]
    assert plan.releases() == []  # the first waits for the second to go on
    plan.applied(at(0, 2, statement, 2), Decision.PASS)  # its own release: not yet gone on
    assert plan.releases() == []
    plan.applied(at(0, 2, Point(PointKind.DB_COMMIT, 1), 3), Decision.PASS)
    assert plan.releases() == [(1, Decision.PASS)]
    assert plan.released_order == [(0, 2), (0, 1)]
    assert plan.decide(at(1, 1, statement, 4)) is Decision.PASS  # the order was made: the rest pass
    assert plan.missed() == []


def test_an_order_the_target_cannot_run_side_by_side_is_released_as_it_came_and_said() -> None:
    statement = Point(PointKind.DB_STATEMENT, 1)
    plan = OrderPlan(statement, [2, 1])
    assert plan.decide(at(0, 1, statement, 1)) is Decision.HOLD
    plan.blocked(1)  # the second never came while the first was held
    assert plan.releases() == [(1, Decision.PASS)]
    (missed,) = plan.missed()
    assert (missed.fault, missed.trigger) == ("hold", "order db_statement#1")
    assert "only 1 of 2 attempts reached db_statement#1 while the first was held" in missed.reason


def test_observe_counts_each_attempts_points_and_tells_them_at_its_end(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        router = Router(ObservePlan())
        router.attach(history, None, lambda: True)
        router.started(0, 1)
        commit = asyncio.run(router.reached(commit_point(COMMIT, None)))
        assert commit is Decision.PASS
        assert router.ended(0, 1) == {"points": [["db_commit#1", "INSERT invoices"]]}
        assert router.ended(0, 1) == {}  # taken once
    assert not [e for e in events(tmp_path) if e["type"] == "crash_point"]  # observe records no events


def test_a_point_several_attempts_may_own_is_placed_by_its_marker_else_said_ambiguous(tmp_path: Path) -> None:
    router = Router(ObservePlan())
    router.started(3, 1)
    router.started(7, 1)
    marked = replace(commit_point(COMMIT, None), payload=b"...\x00abc123-m0000007\x00...")
    asyncio.run(router.reached(marked))
    asyncio.run(router.reached(commit_point(AUDIT, None)))  # no marker, no connection: either's
    seven = router.ended(7, 1)["points"]
    three = router.ended(3, 1)["points"]
    assert seven == [["db_commit#1", "INSERT invoices"], ["db_commit", "INSERT audit", "ambiguous"]]
    assert three == [["db_commit", "INSERT audit", "ambiguous"]]


def test_a_key_lookup_is_placed_by_the_intents_key_where_it_carries_no_marker() -> None:
    """A server's key check (``SELECT ... WHERE key = $1``) carries the intent's idempotency key and no
    marker: the key alone places it (it was said ambiguous beside every other open call); a key of
    another shape, or one with more hex digits than the harness makes, places nothing."""
    router = Router(ObservePlan())
    router.started(3, 1)
    router.started(12, 1)
    lookup = replace(commit_point(AUDIT, None), label="SELECT idempotency_keys")
    asyncio.run(router.reached(replace(lookup, payload=b"\x00ab1c-12-00ff00ff00ff00ff\x00")))
    asyncio.run(router.reached(replace(lookup, payload=b"ab1c-3-00ff00ff00ff00ff00")))  # 18 hex digits
    twelve = router.ended(12, 1)["points"]
    three = router.ended(3, 1)["points"]
    lookup_of_twelve = ["db_commit#1", "SELECT idempotency_keys"]
    assert twelve == [lookup_of_twelve, ["db_commit", "SELECT idempotency_keys", "ambiguous"]]
    assert three == [["db_commit", "SELECT idempotency_keys", "ambiguous"]]


def test_a_point_told_late_finds_its_intent_among_the_recent_calls_and_the_oldest_are_let_go() -> None:
    """Observe mode places every commit of a run by the intent it names, from an index of the calls at
    work and the last ``KEPT_RECENT`` ended: a point seen while its call was open and read after the
    call ended is still its; the index forgets what the recent calls forget."""
    now = [0.0]
    router = Router(ObservePlan(), clock=lambda: now[0])
    for intent in range(KEPT_RECENT + 50):
        now[0] = float(intent)
        router.started(intent, 1)
        router.started(intent + 100_000, 1)  # another call at work beside each
        now[0] += 0.5
        router.closed(intent + 100_000, 1)
        router.closed(intent, 1)
    seen_then = float(KEPT_RECENT + 40) + 0.25  # while intent KEPT_RECENT + 40 was open, told only now
    marked = replace(commit_point(COMMIT, None), payload=f"ns-m{KEPT_RECENT + 40:07d}".encode(), at=seen_then)
    router.seen(marked)
    assert router.points_of(KEPT_RECENT + 40, 1) == {"points": [["db_commit#1", "INSERT invoices"]]}
    assert len(router._of_intent) <= KEPT_RECENT  # bounded as the recent calls are
    assert 0 not in router._of_intent  # the first calls were let go


def test_a_connection_serves_one_attempt_per_transaction_and_a_pool_one_call_per_connection(
    tmp_path: Path,
) -> None:
    """An original and its retry (one marker) open at once: the connection inside a transaction serves
    the attempt it began it for; a connection no attempt holds serves the one no other connection does;
    once neither tells, the point is either's."""
    router = Router(Plan())  # passes every point, statements included
    first, second = router.connection(), router.connection()
    assert first is not None
    assert second is not None
    router.opened(1, 1)
    statement = Reached(Site.POSTGRES, PointKind.DB_STATEMENT, connection=first, label="BEGIN")
    asyncio.run(router.reached(statement))  # the only call open: the first connection serves it
    router.opened(1, 2)  # its retry, beside it
    asyncio.run(router.reached(replace(commit_point(COMMIT, second), payload=b"k-m0000001")))
    asyncio.run(router.reached(replace(commit_point(COMMIT, first), payload=b"k-m0000001")))
    router.idle(first)
    router.idle(second)  # both transactions over: nothing tells whose the next one is
    asyncio.run(router.reached(commit_point(AUDIT, first)))
    router.closed(1, 1)
    router.closed(1, 2)
    assert [p[0] for p in router.points_of(1, 2)["points"]] == ["db_commit#1", "db_commit"]
    assert [p[0] for p in router.points_of(1, 1)["points"]] == ["db_statement#1", "db_commit#1", "db_commit"]


def test_a_point_told_later_than_it_was_seen_is_placed_among_the_windows_open_when_it_was() -> None:
    """The observing relay's commits come over a pipe, read some time after they were seen: each goes to
    the attempts open at its time, those closed since included, never one opened after it; the pipe is
    drained before an attempt's end takes its points."""
    now = [0.0]
    router = Router(ObservePlan(), clock=lambda: now[0])
    told: list[Reached] = []

    class Pipe:
        def drain(self) -> None:
            while told:
                router.seen(told.pop(0))

    router.follow(Pipe())
    router.started(1, 1)
    now[0] = 1.0
    told.append(replace(commit_point(COMMIT, None), at=1.5))  # seen while only intent 1 was open
    now[0] = 2.0
    router.started(2, 1)
    assert router.ended(1, 1) == {"points": [["db_commit#1", "INSERT invoices"]]}  # drained first
    told.append(replace(commit_point(COMMIT, None), at=1.8))  # intent 1's, read once it had closed
    told.append(replace(commit_point(AUDIT, None), at=2.5))  # intent 1 had closed: intent 2's alone
    now[0] = 3.0
    assert router.ended(2, 1) == {"points": [["db_commit#1", "INSERT audit"]]}


def test_an_attempt_ended_by_the_client_before_its_exchange_keeps_no_points_behind(tmp_path: Path) -> None:
    router = Router(ObservePlan())
    router.started(0, 1)
    asyncio.run(router.reached(commit_point(COMMIT, None)))
    assert router.points_of(0, 1)["points"][0][0] == "db_commit#1"  # a break: the client is done first
    router.closed(0, 1)
    assert router.points_of(0, 1) == {}


def test_the_store_is_tried_before_its_copies_and_one_try_stands_for_each_state() -> None:
    """A server keeping a plain-text list writes a backup copy first, then truncates the list and writes
    it: the list's truncation and writes (a kill there loses every item) come right after the controls,
    the copy's last; a kill before the copy's truncation is the request's state, tried once for both."""
    backup, store = ("list.txt.bak",), ("list.txt",)
    clean = (
        REQUEST,
        Point(PointKind.FS_TRUNCATE, 1, "list.txt.bak", op=FileOp(backup, size=0)),
        Point(PointKind.FS_WRITE, 1, "list.txt.bak", op=FileOp(backup)),
        Point(PointKind.FS_TRUNCATE, 2, "list.txt", op=FileOp(store, size=0)),
        Point(PointKind.FS_WRITE, 2, "list.txt", op=FileOp(store)),
        Point(PointKind.FS_WRITE, 3, "list.txt", op=FileOp(store)),
        RESPONSE,
    )
    plan = ExplorePlan(repeat=1, power_loss=True, store=["list.txt"])
    plan.answered(0, clean, 0)
    plan.answered(1, clean, 0)
    assert [path_name(p) for p in plan.planned] == [
        "request",
        "request@power_loss",  # nothing is ever fsynced: every power loss leaves the same files
        "response",
        "fs_truncate#2",
        "fs_write#2",  # the list empty: the window that loses every item
        "fs_write#3",
        "fs_write#1",  # the copy's
    ]
    assert [p.name for p in plan.same[(REQUEST,)]] == ["fs_truncate#1"]
    assert len(plan.same[(replace(REQUEST, crash=Crash.POWER_LOSS),)]) == 6
    assert plan.points == 14
    told = PathPlan(plan).told()
    assert told is not None
    assert told["points"] == 14
    assert told["planned"][0] == {"path": "request", "labels": [None], "same": ["fs_truncate#1"]}


def test_a_plan_not_told_where_the_store_is_shares_no_state() -> None:
    """A ``tool`` or ``command`` source: the harness does not see the store, so no two points are known to
    leave the same state; each is tried."""
    clean = (REQUEST, Point(PointKind.FS_WRITE, 1, "log", op=FileOp(("log",))), RESPONSE)
    plan = ExplorePlan(repeat=1, store=None)
    plan.answered(0, clean, 0)
    plan.answered(1, clean, 0)
    assert [path_name(p) for p in plan.planned] == ["request", "response", "fs_write#1"]
    assert not any(plan.same.values())
