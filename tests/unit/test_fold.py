"""The fold's accumulators, one concern at a time, on synthetic histories (pure, no I/O).

Grouped by the accumulator that owns what is checked (harness/audit/accumulators.py):
pod disruptions (replicas, graceful stops, rollouts, pauses, crashes), stream faults and
the balancer's re-sends, the fault plan, sessions, error tallies, the pod timeline, the
run's bounds, and the per-intent columns.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from harness.audit.accumulators import MAX_MESSAGES, OTHER_MESSAGES
from harness.audit.fold import CRASH_WINDOW_S, Fold, MissedFault, fold_history
from harness.errors import HistoryError
from tests.unit.histories import History


def fold(h: History) -> Fold:
    return fold_history([h.events])


def column(f: Fold, name: str) -> list[Any]:
    return list(f.intents.set_index("intent")[name])


# PodDisruptions: replicas, each attempt watching its own pod.


def test_a_kill_hits_only_the_attempts_on_the_killed_replica() -> None:
    h = History(intents=3)
    for i in range(3):
        h.start(i)
    on_victim = h.attempt(0, pod="pod-0")
    on_survivor = h.attempt(1, pod="pod-1")
    h.tick()
    h.fault("kill", pod="pod-0")
    h.end(0, on_victim, "transport_error", "closed_before_response")
    h.end(1, on_survivor)
    h.exited("pod-0")
    moved = h.attempt(0, attempt=2, pod="pod-1")
    h.end(0, moved, attempt=2)
    h.restarted("pod-0")
    later = h.attempt(2, pod="pod-0")  # after the restart: the old kill is not its
    h.end(2, later)
    f = fold(h)
    assert column(f, "attempts_hit_by_pod_fault") == [1, 0, 0]
    assert column(f, "faults") == ["kill", "", ""]
    assert column(f, "first_pod") == ["pod-0", "pod-1", "pod-0"]
    assert column(f, "pods") == ["pod-0;pod-1", "pod-1", "pod-0"]
    assert (f.pod_exits, f.crashes) == (1, 0)


def test_without_replicas_a_kill_hits_every_attempt_in_flight() -> None:
    h = History(intents=2)
    for i in range(2):
        h.start(i)
    rids = [h.attempt(i) for i in range(2)]
    h.fault("kill", pod="pod-0")
    for i, rid in enumerate(rids):
        h.end(i, rid, "transport_error", "closed_before_response")
    f = fold(h)
    assert column(f, "attempts_hit_by_pod_fault") == [1, 1]
    assert "first_pod" not in f.intents.columns  # the columns exist with replicas only


def test_a_crash_is_blamed_on_the_closed_attempts_of_its_own_replica() -> None:
    h = History(intents=2)
    for i in range(2):
        h.start(i)
    a0 = h.attempt(0, pod="pod-0")
    a1 = h.attempt(1, pod="pod-1")
    h.tick()
    h.end(0, a0, "transport_error", "closed_before_response")
    h.end(1, a1, "transport_error", "closed_mid_response")
    h.tick(0.05)
    h.exited("pod-1")  # no fault announced it: pod-1 crashed
    f = fold(h)
    assert column(f, "faults") == ["", "crash"]
    h.tick(0.05)
    h.exited("pod-0")  # and then pod-0, still within the window of its closed attempt
    f = fold(h)
    assert column(f, "faults") == ["crash", "crash"]
    assert column(f, "attempts_hit_by_pod_fault") == [1, 1]
    assert f.crashes == 2


# PodDisruptions: graceful stops and rollouts (the disruption is the exit).


def test_a_graceful_stop_breaks_what_is_in_flight_at_the_exit_not_at_the_signal() -> None:
    h = History(intents=3)
    for i in range(3):
        h.start(i)
    drained = h.attempt(0)
    cut = h.attempt(1)
    h.tick()
    h.fault("kill", signal="SIGTERM", grace_s=5.0)
    h.tick()
    h.end(0, drained)  # finished within its grace period
    sent_late = h.attempt(2)  # the driver had not yet heard the pod was stopping
    h.tick()
    h.add("pod_grace_expired", pod="pod-0", pid=1)
    h.exited(returncode=-9)
    h.end(1, cut, "transport_error", "closed_mid_response")
    h.end(2, sent_late, "transport_error", "closed_before_response")
    f = fold(h)
    assert column(f, "attempts_hit_by_pod_fault") == [0, 1, 1]
    assert column(f, "faults") == ["", "kill", "kill"]
    assert (f.faults["kill"], f.pod_exits, f.crashes) == (1, 1, 0)


def test_a_sigkill_disrupts_at_the_fault_and_its_exit_adds_nothing() -> None:
    h = History(intents=2)
    for i in range(2):
        h.start(i)
    broken = h.attempt(0)
    h.fault("kill")
    h.end(0, broken, "transport_error", "closed_before_response")
    h.tick(0.1)
    closed_late = h.attempt(1)  # refused by the dead pod before its exit is reaped
    h.end(1, closed_late, "transport_error", "closed_before_response")
    h.exited()
    f = fold(h)
    # The exit is the kill's, not a crash: the second attempt is in no window.
    assert column(f, "attempts_hit_by_pod_fault") == [1, 0]
    assert (f.pod_exits, f.crashes) == (1, 0)


def test_a_rollout_replaces_replicas_one_at_a_time_with_its_own_kind() -> None:
    h = History(intents=4, faults_planned={"rollout": 2})
    for i in range(4):
        h.start(i)
    on_0 = h.attempt(0, pod="pod-0")
    on_1 = h.attempt(1, pod="pod-1")
    h.fault("rollout", pod="pod-0", signal="SIGTERM", grace_s=1.0, step=1, of=2)
    h.exited("pod-0", returncode=0)
    h.end(0, on_0, "transport_error", "closed_before_response")
    h.end(1, on_1)
    h.restarted("pod-0")
    on_1_again = h.attempt(2, pod="pod-1")
    on_0_again = h.attempt(3, pod="pod-0")
    h.fault("rollout", pod="pod-1", step=2, of=2)  # SIGKILL: the disruption is the fault
    h.end(2, on_1_again, "transport_error", "closed_before_response")
    h.end(3, on_0_again)
    h.exited("pod-1")
    f = fold(h)
    assert column(f, "faults") == ["rollout", "", "rollout", ""]
    assert (f.faults["rollout"], f.faults_planned["rollout"]) == (2, 2)
    assert (f.pod_exits, f.crashes) == (2, 0)


def test_a_kill_whose_exit_went_unrecorded_does_not_explain_a_later_crash() -> None:
    h = History(intents=1)
    h.fault("kill")
    h.add("pod_started", pod="pod-0", pid=2)  # the runtime reported the replacement, not the exit
    h.start(0)
    rid = h.attempt(0)
    h.end(0, rid, "transport_error", "closed_before_response")
    h.exited()
    f = fold(h)
    assert f.crashes == 1
    assert column(f, "faults") == ["crash"]


# PodDisruptions: pauses (a freeze and a thaw).


def test_a_pause_hits_what_is_in_flight_when_the_pod_freezes_and_when_it_thaws() -> None:
    h = History(intents=4)
    for i in range(4):
        h.start(i)
    before = h.attempt(0)
    h.tick()
    h.fault("pause", duration_s=2.0)
    during = h.attempt(1)
    timed_out = h.attempt(2)
    h.tick(1.0)
    h.end(2, timed_out, "timeout", "no_response")  # gave up while the pod was frozen
    h.tick(1.0)
    h.add("pod_resumed", pod="pod-0", pid=1)
    h.end(0, before)
    h.end(1, during)
    after = h.attempt(3)
    h.end(3, after)
    f = fold(h)
    assert column(f, "attempts_hit_by_pod_fault") == [1, 1, 0, 0]  # once per attempt, not per disruption
    assert column(f, "faults") == ["pause", "pause", "", ""]
    assert (f.faults["pause"], f.pod_exits, f.crashes) == (1, 0, 0)


# PodDisruptions: crashes (an exit no fault announced).


def test_a_crash_blames_only_attempts_whose_connection_closed_within_the_window() -> None:
    h = History(intents=5)
    for i in range(5):
        h.start(i)
    long_ago = h.attempt(0)
    h.end(0, long_ago, "transport_error", "closed_before_response")
    h.tick(CRASH_WINDOW_S * 2)
    rids = [h.attempt(i) for i in range(1, 5)]
    h.tick()
    h.end(1, rids[0], "transport_error", "gateway_error")  # a balancer's 502: the upstream closed
    h.end(2, rids[1], "timeout", "no_response")
    h.end(3, rids[2], "transport_error", "connect_refused")  # never sent
    h.end(4, rids[3])
    h.tick(CRASH_WINDOW_S / 2)
    h.exited()
    f = fold(h)
    assert column(f, "faults") == ["", "crash", "", "", ""]
    assert column(f, "attempts_hit_by_pod_fault") == [0, 1, 0, 0, 0]
    assert f.crashes == 1


def test_an_attempt_a_kill_broke_is_not_blamed_on_a_later_crash_too() -> None:
    h = History(intents=1)
    h.start(0)
    rid = h.attempt(0)
    h.fault("kill")
    h.end(0, rid, "transport_error", "closed_before_response")
    h.exited()
    h.restarted()
    h.tick(0.1)
    h.exited()  # the replacement crashed soon after
    f = fold(h)
    assert (column(f, "attempts_hit_by_pod_fault"), column(f, "faults")) == ([1], ["kill"])
    assert (f.pod_exits, f.crashes) == (2, 1)


# StreamFaults and FaultPlan: what names its request, and what was planned.


def test_a_balancer_retry_is_pinned_on_its_intent_and_counted_as_injected() -> None:
    h = History(intents=2)
    rids = []
    for i in range(2):
        h.start(i)
        rids.append(h.attempt(i))
        h.end(i, rids[-1])
        h.finish(i)
    h.add("run_ended", status="completed")
    # Recorded after the run, from the balancer's log.
    resent = {"upstreams": ["pod-0", "pod-1"], "statuses": [502, 200]}
    h.add("balancer_retry", intent=1, attempt=1, id=rids[1], **resent)
    h.add("balancer_retry", intent=9, attempt=1, id=99, **resent)
    f = fold(h)
    assert column(f, "faults") == ["", "balancer_retry"]
    assert column(f, "attempts_hit_by_pod_fault") == [0, 0]
    assert f.faults["balancer_retry"] == 2  # the one past the run's intents is counted, not pinned


def test_stream_faults_count_their_rules_and_a_cut_mid_stream_is_its_own_kind() -> None:
    h = History(intents=3)
    for i in range(3):
        h.start(i)
    rids = [h.attempt(i) for i in range(3)]
    h.add("fault", fault="sever_response", rule=0, id=rids[0], intent=0, attempt=1, server_done=False)
    h.add("fault", fault="sever_response", rule=0, id=rids[1], intent=1, attempt=1, server_done=True)
    h.add("fault", fault="delay", rule=1, id=rids[2], intent=2, attempt=1)
    for i, rid in enumerate(rids):
        h.end(i, rid, "transport_error", "closed_mid_response")
    f = fold(h)
    assert column(f, "faults") == ["sever_mid_stream", "sever_response", "delay"]
    assert column(f, "attempts_hit_by_pod_fault") == [0, 0, 0]  # not pod faults
    assert f.rule_hits == {0: 2, 1: 1}
    assert f.faults == {"sever_mid_stream": 1, "sever_response": 1, "delay": 1}
    assert [what for _, what in f.pod_events] == ["sever_response", "sever_response", "delay"]


def test_planned_injected_and_missed_faults() -> None:
    h = History(intents=1, faults_planned={"kill": 3})
    h.fault("kill", trigger="after intent 0")
    h.fault("pause", counted=False, trigger="at 1s", duration_s=1.0)  # timed: planned once due
    h.add("fault_missed", fault="kill", trigger="after intent 5", counted=True, reason="the run ended first")
    h.add("fault_missed", fault="pause", trigger="at 9s", counted=False, reason="the run ended first")
    h.add("fault_missed", fault="kill")
    f = fold(h)
    assert f.faults_planned == {"kill": 3, "pause": 2}
    assert f.faults == {"kill": 1, "pause": 1}
    assert f.missed == [
        MissedFault("kill", "after intent 5", "the run ended first"),
        MissedFault("pause", "at 9s", "the run ended first"),
        MissedFault("kill", "", ""),
    ]


# Sessions.


def test_lost_sessions_are_blamed_on_the_last_disruption_and_resumptions_counted() -> None:
    h = History(intents=2)
    for _ in range(3):
        h.add("session_opened", session="s", version="2025-11-25", client="c")
    h.add("session_lost", session="s", status=404, client="c")  # nothing disrupted: the server forgot
    h.fault("kill")
    h.exited()  # the exit of a SIGKILL is no second disruption
    h.add("session_lost", session="s", status=404, client="c")
    h.exited()
    h.add("session_lost", session="s", status=404, client="c")
    h.fault("pause", duration_s=1.0)
    h.add("session_lost", session="s", status=404, client="c")
    for i, resumed in enumerate((True, False)):
        h.start(i)
        rid = h.attempt(i)
        h.end(i, rid, resumed=resumed)
    f = fold(h)
    assert f.sessions_opened == 3
    assert f.sessions_lost == {"none": 1, "kill": 1, "crash": 1, "pause": 1}
    assert f.resumed == {True: 1, False: 1}


# ErrorTallies.


def test_error_messages_are_counted_by_shape_with_the_first_verbatim() -> None:
    h = History(intents=5)
    ends: list[tuple[str, dict[str, Any]]] = [
        ("tool_error", {"message": "no invoice 12", "code": 404}),
        ("tool_error", {"message": "no invoice 3456", "code": 404}),
        ("protocol_error", {"message": "no invoice 7"}),
        ("ok", {"message": "fine 1"}),  # only errors are tallied
        ("timeout", {}),  # and only those with a message
    ]
    for i, (outcome, fields) in enumerate(ends):
        h.start(i)
        rid = h.attempt(i)
        h.end(i, rid, outcome, **fields)
    f = fold(h)
    assert {key: (t.example, t.count) for key, t in f.errors.items()} == {
        ("tool_error", "404", "no invoice #"): ("no invoice 12", 2),
        ("protocol_error", None, "no invoice #"): ("no invoice 7", 1),
    }


def test_error_shapes_past_the_limit_are_counted_together() -> None:
    h = History(intents=1)
    h.start(0)
    shapes = [f"error {chr(65 + n // 26)}{chr(65 + n % 26)}" for n in range(MAX_MESSAGES + 2)]
    for n, message in enumerate(shapes):
        rid = h.attempt(0, attempt=n + 1)
        h.end(0, rid, "tool_error", attempt=n + 1, message=message)
    rid = h.attempt(0, attempt=len(shapes) + 1)
    h.end(0, rid, "timeout", attempt=len(shapes) + 1, message="error ZZ")  # another outcome: kept
    f = fold(h)
    kept = [key for key in f.errors if key[0] == "tool_error" and key[2] != OTHER_MESSAGES]
    assert len(kept) == MAX_MESSAGES
    assert f.errors[("tool_error", None, OTHER_MESSAGES)].count == 2
    assert f.errors[("timeout", None, "error ZZ")].count == 1


# PodTimeline and RunBounds.


def test_the_pod_timeline_and_the_run_bounds() -> None:
    h = History(intents=1, started_at="2026-08-01T00:00:00Z")
    h.add("pod_started", pod="pod-0", pid=1)
    h.add("pod_ready", pod="pod-0", pid=1, after_s=0.2)  # an older history: no protocol
    h.tick()
    h.add("pod_ready", pod="pod-0", pid=1, after_s=0.2, protocol="2025-11-25")
    h.tick()
    h.fault("kill")
    h.tick()
    h.exited()
    h.tick()
    h.add("effects_collected", error="connection refused")
    h.add("run_ended", status="completed", kills=1)
    f = fold(h)
    assert f.pod_events == [(0.0, "pod_ready"), (0.01, "pod_ready"), (0.02, "kill"), (0.03, "pod_exited")]
    assert f.protocol == "2025-11-25"
    assert (f.run["run_id"], f.run["started_at"]) == ("r", "2026-08-01T00:00:00Z")
    assert f.ended == {"seq": 7, "t": 0.04, "type": "run_ended", "status": "completed", "kills": 1}
    assert (f.collect_error, f.duration_s) == ("connection refused", 0.04)


def test_the_duration_ends_at_the_last_attempt_of_a_run_that_did_not_end() -> None:
    h = History(intents=1)
    h.start(0)
    rid = h.attempt(0)
    h.tick(2.5)
    h.end(0, rid)
    assert fold(h).duration_s == 2.5


# Intents: the per-intent columns.


def test_the_per_intent_columns() -> None:
    h = History(intents=3)
    h.start(0)
    h.tick(0.5)
    first = h.attempt(0)
    h.tick(0.25)
    h.end(0, first, "protocol_error")
    second = h.attempt(0, attempt=2)
    h.tick(0.25)
    h.end(0, second, attempt=2)
    h.finish(0, status="no_such_status", attempts=2)  # read as a client that gave up
    h.start(1)
    h.attempt(1)  # still in flight at the end
    f = fold(h)
    rows = f.intents.set_index("intent")
    counts = ["marker", "key", "attempts", "n_ok", "n_protocol_error"]
    assert list(rows.loc[0, counts]) == ["ns-m0", "k0", 2, 1, 1]
    assert list(rows["first_attempt_ms"].astype(object)) == [500, 1000, pd.NA]
    assert list(rows["last_end_ms"].astype(object)) == [1000, pd.NA, pd.NA]
    assert list(rows["client_status"]) == [3, 1, 0]  # gave_up, in_progress, not_started
    assert f.open_attempts == 1


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"type": "intent_started", "intent": 3, "marker": "m", "key": "k"}, "intent 3 is not one of"),
        ({"type": "attempt_started", "intent": -1, "id": 1, "t": 0}, "intent -1 is not one of"),
        ({"type": "attempt_started", "intent": "0", "id": 1, "t": 0}, "malformed history event"),
        ({"type": "fault", "t": 0}, "malformed history event"),
        ({"type": "pod_exited"}, "t None is not a time in seconds"),
        ({"type": "pod_exited", "t": "soon"}, "t 'soon' is not a time in seconds"),
        ({"type": "attempt_started", "intent": 0, "id": 1, "t": "soon"}, "t 'soon' is not a time in seconds"),
        ({"type": "run_started", "t": 0, "intents": "many"}, "malformed history event"),
        (["not", "an", "event"], "malformed history event"),
    ],
)
def test_a_damaged_history_is_a_history_error(event: Any, message: str) -> None:
    h = History(intents=3)
    h.events.append(event)
    with pytest.raises(HistoryError, match=message):
        fold(h)


def test_an_outcome_the_harness_does_not_know_is_named_with_its_line() -> None:
    """Not counted as another outcome: a history with it was not written by this harness's client."""
    h = History(intents=1)
    h.start(0)
    h.end(0, h.attempt(0), "something_new")
    with pytest.raises(
        HistoryError, match=r"^history:\d+: outcome 'something_new' is not one of ok, "
    ) as raised:
        fold(h)
    line = int(raised.value.message.split(":")[1])
    assert h.events[line - 1]["outcome"] == "something_new"


def test_an_attempt_end_at_no_time_is_named_with_its_line() -> None:
    h = History(intents=1)
    h.start(0)
    h.end(0, h.attempt(0))
    h.events[-1]["t"] = "soon"
    with pytest.raises(HistoryError, match=f"^history:{len(h.events)}: t 'soon' is not a time in seconds"):
        fold(h)


def test_completion_without_start_is_an_error() -> None:
    h = History(intents=1)
    h.start(0)
    h.end(0, rid=99)
    with pytest.raises(HistoryError, match="request id 99 without its attempt_started"):
        fold(h)


def test_intent_end_without_start_is_an_error() -> None:
    h = History(intents=1)
    h.finish(0)
    with pytest.raises(HistoryError, match="intent_ended for intent 0 without its intent_started"):
        fold(h)


# PodDisruptions' pod faults: what vanished effects are blamed on, and which log section tells of it.


def test_pod_faults_are_numbered_by_kind_with_the_start_they_ended() -> None:
    h = History(intents=1)
    h.add("pod_started", pod="pod-0", pid=1)  # start #1
    h.tick()
    h.fault("kill")  # SIGKILL: the fault is the disruption
    h.exited()
    h.restarted()  # start #2
    h.tick()
    h.exited(returncode=1)  # nothing killed it: a crash of start #2
    h.restarted()  # start #3
    h.fault("pause")  # a pause takes no pod down
    h.add("pod_resumed", pod="pod-0", pid=2)
    h.tick()
    h.fault("kill", signal="SIGTERM", grace_s=1.0)  # graceful: the disruption is the exit
    h.tick(0.5)
    h.exited()
    f = fold(h)
    assert [(p.kind, p.number, p.pod, p.start) for p in f.pod_faults] == [
        ("kill", 1, "pod-0", 1),
        ("crash", 1, "pod-0", 2),
        ("kill", 2, "pod-0", 3),
    ]
    assert [p.label() for p in f.pod_faults] == [
        "kill#1 pod-0 @0.01s",
        "crash#1 pod-0 @0.02s",
        "kill#2 pod-0 @0.53s",
    ]
    assert [p.seq for p in f.pod_faults] == [2, 6, 12]  # the kill event, the exits


# Checkpoints: reads of the effect source during the run.


def test_checkpoint_reads_are_decoded_from_their_bitmap_and_counts() -> None:
    h = History(intents=20)
    h.fault("kill")
    h.checkpoint("before_fault", {0: 1, 3: 1, 17: 2}, foreign=4)
    h.tick()
    h.checkpoint("after_restart", {}, error="timed out after 5 s")
    h.add(
        "effects_checkpoint", when="after_restart", pod="pod-0", fault_seq=1, seen="not base64!", took_s=0.1
    )
    f = fold(h)
    first, failed, unreadable = f.checkpoints
    assert [first.count(i) for i in (0, 1, 3, 17, 19, 500)] == [1, 0, 1, 2, 0, 0]
    assert (first.when, first.pod, first.fault_seq, first.foreign, first.ok) == (
        "before_fault",
        "pod-0",
        1,
        4,
        True,
    )
    assert (failed.ok, failed.error, failed.count(0)) == (False, "timed out after 5 s", 0)
    assert unreadable.error == "its record cannot be read (a damaged seen or counts)"


# Intents and FailureReplies: what each intent was last told.


def test_the_last_reply_the_last_code_and_replies_that_read_as_failures() -> None:
    h = History(intents=3)
    for i in range(3):
        h.start(i)
    r = h.attempt(0)
    h.end(0, r, reply="Created note 1")
    r = h.attempt(0, attempt=2)
    h.end(0, r, attempt=2, reply="Created note 1 again")
    r = h.attempt(1)
    h.end(1, r, "tool_error", "error_contract", code="E_BUSY", message="busy")
    r = h.attempt(1, attempt=2)
    h.end(1, r, "protocol_error", "jsonrpc_error", attempt=2, code=-32602, message="bad")
    r = h.attempt(2)
    h.end(2, r, reply="Database error: no such table: notes", reads_as_failure=True)
    r = h.attempt(2, attempt=2)
    h.end(2, r, attempt=2, reply="Database error: no such table: notes", reads_as_failure=True)
    f = fold(h)
    assert column(f, "reply") == ["Created note 1 again", "", "Database error: no such table: notes"]
    assert column(f, "code") == ["", "-32602", ""]
    assert column(f, "reply_reads_as_failure") == [False, False, True]
    (tally,) = f.failure_replies.values()
    assert (tally.outcome, tally.example, tally.count) == ("ok", "Database error: no such table: notes", 2)


def test_reply_shapes_past_the_limit_are_counted_together() -> None:
    h = History(intents=1)
    h.start(0)
    for n in range(MAX_MESSAGES + 5):
        r = h.attempt(0, attempt=n + 1)
        h.end(0, r, attempt=n + 1, reply=f"Error {'x' * n}", reads_as_failure=True)
    f = fold(h)
    assert len(f.failure_replies) == MAX_MESSAGES + 1
    assert f.failure_replies[OTHER_MESSAGES].count == 5
