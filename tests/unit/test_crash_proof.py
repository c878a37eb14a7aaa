"""A crash point's try counts only with its proof in the history; the proxy withholds the whole answer.

The histories are synthetic, event by event as the controller, the supervisor and the driver write
them; the responses are bytes as a server sends them, cut at every offset.
"""

from __future__ import annotations

import orjson
import pytest

from harness.crashpoints.proof import clean_call, read_evidence
from harness.faults.proxy import AnswerWatch
from tests.unit.histories import History


def held_try(
    h: History,
    intent: int,
    point: str = "db_commit#1",
    *,
    outcome: str = "transport_error",
    kill: bool = True,
    held: bool = True,
) -> None:
    """One try: held at ``point`` on its first attempt (killed there unless told), then retried to ok."""
    h.start(intent)
    rid = h.attempt(intent)
    h.add("crash_point", intent=intent, attempt=1, point="request", held=False, path=point)
    if kill:
        h.fault("kill", trigger=f"crash point {point}", point=point)
    h.add(
        "crash_point", intent=intent, attempt=1, point=point, held=held, path=point, label="INSERT t", nth=1
    )
    h.end(intent, rid, outcome, attempt=1)
    retry = h.attempt(intent, 2)
    h.end(intent, retry, "ok", attempt=2)
    h.finish(intent, attempts=2)


def why(h: History, intent: int = 1) -> str | None:
    h.add("run_ended", status="completed")
    return read_evidence(h.events).tries[intent].why


def test_a_hold_killed_there_whose_answer_never_came_is_proven() -> None:
    h = History(2)
    held_try(h, 1)
    assert why(h) is None


def test_a_hold_whose_answer_reached_the_client_is_a_leak_not_a_pass() -> None:
    h = History(2)
    held_try(h, 1, point="response", outcome="ok")
    assert why(h) == (
        "the client got an answer though attempt 1 was held at response (it ended ok): the hold leaked"
    )


def test_a_hold_without_its_kill_proves_nothing() -> None:
    h = History(2)
    held_try(h, 1, kill=False)
    assert why(h) == "no kill while attempt 1 was held at db_commit#1"


def test_a_power_loss_is_proven_only_by_its_rollback() -> None:
    h = History(2)
    held_try(h, 1, point="fs_write#1@power_loss")
    assert why(h) == "no rollback of the data directory after the power loss at fs_write#1@power_loss"
    rolled = History(2)
    rolled.start(1)
    rid = rolled.attempt(1)
    rolled.fault("kill", trigger="crash point fs_write#1@power_loss", point="fs_write#1@power_loss")
    rolled.add(
        "crash_point",
        intent=1,
        attempt=1,
        point="fs_write#1@power_loss",
        held=True,
        path="fs_write#1@power_loss",
    )
    rolled.end(1, rid, "transport_error", attempt=1)
    rolled.add("data_rolled_back", changed=["notes.jsonl"])
    retry = rolled.attempt(1, 2)
    rolled.end(1, retry, "ok", attempt=2)
    rolled.finish(1, attempts=2)
    assert why(rolled) is None
    assert read_evidence(rolled.events).tries[1].kills == [1]  # kill#1: what a wiped intent is blamed on


def test_a_kill_where_a_power_loss_was_planned_proves_nothing() -> None:
    h = History(2)
    h.start(1)
    rid = h.attempt(1)
    h.fault("kill", trigger="crash point fs_write#1", point="fs_write#1")
    h.add("crash_point", intent=1, attempt=1, point="fs_write#1", held=True, path="fs_write#1@power_loss")
    h.end(1, rid, "transport_error", attempt=1)
    h.finish(1)
    assert why(h) == "held at fs_write#1, not at fs_write#1@power_loss"


def test_a_point_the_call_never_reached_is_unproven_with_its_label() -> None:
    h = History(2)
    h.add(
        "crash_plan", planned=[{"path": "db_commit#2", "labels": ["INSERT audit"]}], skipped=[], deferred=[]
    )
    held_try(h, 1, point="db_commit#2", held=False, kill=False)
    assert why(h) == "never reached db_commit#2 (INSERT audit) (the call took another path)"


def test_a_point_never_reached_because_the_server_refused_the_call_quotes_the_refusal() -> None:
    """An earlier try's crash left a lock file: every later call is refused before it writes anything.
    That is not another path through the call, and the refusal is what a person needs to read."""
    h = History(2)
    h.add("crash_plan", planned=[{"path": "fs_rename#2", "labels": ["master.lock"]}], skipped=[], deferred=[])
    h.start(1)
    rid = h.attempt(1)
    h.add("crash_point", intent=1, attempt=1, point="request", held=False, path="fs_rename#2")
    h.end(1, rid, "tool_error", attempt=1, message="Unable to create 'master.lock': File exists.")
    h.finish(1)
    assert why(h) == (
        'never reached fs_rename#2 (master.lock): the server refused the call ("Unable to create '
        "'master.lock': File exists.\"); an earlier crash may have left the store unable to take it"
    )
    # Refused once, then answered: the refusal is not why the point was missed.
    later = History(2)
    later.add("crash_plan", planned=[{"path": "fs_rename#2", "labels": ["x"]}], skipped=[], deferred=[])
    later.start(1)
    first = later.attempt(1)
    later.add("crash_point", intent=1, attempt=1, point="request", held=False, path="fs_rename#2")
    later.end(1, first, "tool_error", attempt=1, message="busy")
    second = later.attempt(1, 2)
    later.end(1, second, "ok", attempt=2)
    later.finish(1, attempts=2)
    assert why(later) == "never reached fs_rename#2 (x) (the call took another path)"


def test_a_try_the_run_did_not_finish_is_unproven() -> None:
    h = History(2)
    h.start(1)
    rid = h.attempt(1)
    h.add("crash_point", intent=1, attempt=1, point="request", held=False, path="response")
    h.end(1, rid, "transport_error")
    assert why(h) == "the run stopped before the try ended"


def test_the_clean_call_is_the_attempt_the_server_itself_answered() -> None:
    h = History(1)
    h.add("crash_point", intent=0, attempt=1, point="request", held=False)
    h.add("crash_point", intent=0, attempt=1, point="response", held=False, answer="HTTP 404")
    h.add("crash_point", intent=0, attempt=2, point="request", held=False)
    h.add("crash_point", intent=0, attempt=2, point="db_commit#1", held=False, label="INSERT t", nth=1)
    h.add("crash_point", intent=0, attempt=2, point="response", held=False)
    evidence = read_evidence(h.events)
    assert [ev["point"] for ev in clean_call(evidence.windows)] == ["request", "db_commit#1", "response"]


ANSWER: dict[str, object] = {
    "jsonrpc": "2.0",
    "id": 7,
    "result": {"content": [{"type": "text", "text": "1"}]},
}
PROGRESS: dict[str, object] = {
    "jsonrpc": "2.0",
    "method": "notifications/progress",
    "params": {"progress": 1},
}


def sse(*messages: dict[str, object], chunked: bool = False) -> tuple[bytes, int]:
    """An event-stream response, and the offset where its answer's event begins."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    events = [b"event: message\r\ndata: " + orjson.dumps(m) + b"\r\n\r\n" for m in messages]
    if not chunked:
        body = b"".join(events)
        prefix = head + f"content-length: {len(body)}\r\n\r\n".encode()
        return prefix + body, len(prefix) + sum(len(e) for e in events[:-1])
    framed = [f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events]
    prefix = head + b"transfer-encoding: chunked\r\n\r\n"
    # The answer's chunk header may go out: it carries none of the answer.
    start = len(prefix) + sum(len(f) for f in framed[:-1]) + len(f"{len(events[-1]):x}\r\n")
    return prefix + b"".join(framed) + b"0\r\n\r\n", start


def watch_in_pieces(raw: bytes, cut: int) -> AnswerWatch:
    watch = AnswerWatch(7)
    watch.feed(raw[:cut])
    watch.feed(raw[cut:])
    return watch


@pytest.mark.parametrize("chunked", [False, True])
def test_of_an_event_stream_only_what_comes_before_the_answers_event_is_relayed(chunked: bool) -> None:
    raw, start = sse(PROGRESS, ANSWER, chunked=chunked)
    for cut in range(len(raw) + 1):
        watch = AnswerWatch(7)
        watch.feed(raw[:cut])
        assert watch.safe <= start, cut  # never a byte of the answer's event, however it was read
        assert b'"result"' not in watch.raw[: watch.safe]
        watch.feed(raw[cut:])
        assert (watch.found, watch.complete, watch.refused) == (True, True, None)
        assert watch.safe == start  # and everything before it: the progress event went out as it came
        assert b"notifications/progress" in watch.raw[: watch.safe]


def test_of_a_json_answer_nothing_is_relayed_before_it_is_whole() -> None:
    body = orjson.dumps(ANSWER)
    raw = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )
    raw += body
    for cut in range(len(raw)):
        watch = AnswerWatch(7)
        watch.feed(raw[:cut])
        assert (watch.safe, watch.found) == (0, False)
    assert watch_in_pieces(raw, 10).refused is None


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        (
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            "HTTP 404",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            "no JSON-RPC answer to the call",
        ),
        (sse(PROGRESS)[0], "the stream ended without an answer"),
        (sse({**ANSWER, "id": 8})[0], "the stream ended without an answer"),  # another request's
    ],
)
def test_a_reply_that_is_no_answer_to_the_call_says_what_it_was(raw: bytes, refused: str) -> None:
    watch = watch_in_pieces(raw, 7)
    assert watch.complete
    assert watch.refused == refused


def test_what_an_exploration_did_not_prove_is_said_one_line_each() -> None:
    from harness.crashpoints.explore import PointResult, Untried, not_proven
    from harness.crashpoints.points import parse_path

    tried = PointResult(parse_path("db_commit#1"), repeat=3, proven=[1, 2, 3])
    short = PointResult(parse_path("db_commit#2"), repeat=3, proven=[4], unproven={5: "no kill while held"})
    never = PointResult(parse_path("response"), repeat=3)
    untried = Untried(["db_commit#9"], 4, 120, ran_out=True)
    reasons = not_proven([tried, short, never], untried, None, "deadline: workload.max_duration_s=4 reached")
    assert reasons == [
        "the exploration ended early (deadline: workload.max_duration_s=4 reached)",
        "not tried: 1 crash state (db_commit#9): the budget of 120 s ran out: 3 of 4 crash states tried, "
        "75%; raise --budget to try them all",
        "db_commit#2: 1 of 3 tries proven; no kill while held",
        "response: no try (the exploration ended before it)",
    ]
    nothing = Untried([], 1, 120, ran_out=False)
    assert not_proven([tried], nothing, None, None) == []
    # --only db_commit#9999 explored nothing and passed (exit 0): a point asked for and never passed.
    assert not_proven([], nothing, None, None, ["db_commit#9999"]) == [
        "asked for with --only, never passed by the call: db_commit#9999 (the clean call passed the "
        "points in the table; name one of those)"
    ]


def test_a_state_the_budget_cut_short_is_proven_by_one_try() -> None:
    """Its first try made, the budget spent before its second: coverage, not a reason to doubt it; a state
    with no proven try at all still is one."""
    from harness.crashpoints.explore import PointResult
    from harness.crashpoints.points import parse_path

    once = PointResult(parse_path("fs_write#1"), repeat=3, proven=[4], cut=True)
    assert once.inconclusive is None
    unproven = PointResult(parse_path("fs_write#2"), repeat=3, unproven={5: "no kill while held"}, cut=True)
    assert unproven.inconclusive == "fs_write#2: 0 of 3 tries proven; no kill while held"
    assert PointResult(parse_path("fs_write#1"), repeat=3, proven=[4]).inconclusive is not None


def test_a_json_answer_ended_by_the_close_is_found_at_the_close() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n" + orjson.dumps(
        ANSWER
    )
    watch = AnswerWatch(7)
    watch.feed(raw)
    assert (watch.found, watch.safe) == (False, 0)  # nothing of it relayed before the close
    watch.eof()
    assert (watch.found, watch.complete, watch.refused) == (True, True, None)


def test_a_try_whose_attempts_overlapped_on_the_server_is_unproven() -> None:
    h = History(2)
    held_try(h, 1)
    h.events[next(i for i, e in enumerate(h.events) if e["type"] == "crash_point")]["overlap"] = True
    assert why(h) == (
        "attempt 1 began while an earlier one was still running on the server: what committed may have "
        "been either's"
    )


def test_a_store_changed_unseen_where_ptrace_was_refused_says_so() -> None:
    from harness.crashpoints.explore import bypassed
    from harness.crashpoints.points import Point, PointKind

    clean = (Point(PointKind.REQUEST), Point(PointKind.RESPONSE))
    why = bypassed(clean, {}, 1, "ptrace is not allowed here (Operation not permitted)")
    assert why is not None
    assert "could not be traced: ptrace is not allowed here (Operation not permitted)" in why
    assert "CAP_SYS_PTRACE" in why
    h = History(2)
    h.add("service_started", service="file_tracer", traced=False, reason="ptrace is not allowed here (EPERM)")
    h.add("run_ended", status="completed")
    assert read_evidence(h.events).untraced == "ptrace is not allowed here (EPERM)"
