"""Findings people can act on, on synthetic histories: the headline, the causes that need more than a fault
(vanished, error_as_success, no_fault), stories from a bounded second read, pod log evidence, the control
run, and how report.md, report.html and ``explain`` show them."""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from harness.audit.accumulators import CheckpointReads, PodFault
from harness.audit.fold import fold_history
from harness.audit.vanished import seen_counts, vanishing
from harness.cli import main
from harness.history import SeenEffects, Verdict
from harness.report.html import render_html
from harness.report.stories import explain
from harness.report.text import render_markdown, render_text
from harness.scenario import Scenario, parse_scenario
from tests.unit.histories import History, audit


@pytest.fixture
def scenario(scenario_data: dict[str, Any]) -> Scenario:
    return parse_scenario({**scenario_data, "faults": {}})


def simple(h: History, i: int, **reply: Any) -> None:
    h.start(i)
    rid = h.attempt(i)
    h.tick()
    h.end(i, rid, **reply)
    h.finish(i)


# The headline: the worst finding first.


def test_the_headline_names_lost_before_duplicates_and_never_duplicates_0(scenario: Scenario) -> None:
    h = History(intents=10)
    for i in range(10):
        simple(h, i)
    effects = {f"ns-m{i}": 1 for i in range(5)} | {"ns-m5": 2}  # 4 lost, 1 duplicate
    s = audit(h, effects, scenario).summary
    assert [f.kind for f in s.findings] == ["lost", "duplicate"]
    assert s.headline.sentence.startswith("LOST: 4 of 10 intents = 40.00% (95% CI 16.82%–68.73%)")
    assert s.headline.causes == {"no_fault": 4}
    assert render_text(s).splitlines()[:2] == [
        s.headline.sentence,
        "also: duplicate: 1 of 10 intents = 10.00% (95% CI 1.79%–40.42%); causes: no_fault 1",
    ]
    nothing = audit(h, {f"ns-m{i}": 1 for i in range(10)}, scenario).summary
    assert nothing.headline.sentence.startswith("exactly once: 10 of 10 intents")
    assert "duplicates: 0" not in render_text(s)


# Causes that need more than the fault that hit an intent.


def test_effects_seen_before_a_kill_and_gone_after_the_restart_vanished(scenario: Scenario) -> None:
    h = History(intents=6)
    h.add("pod_started", pod="pod-0", pid=1)
    for i in range(4):
        simple(h, i)
    h.checkpoint("before_fault", {0: 1, 1: 1, 2: 1, 3: 1})
    h.fault("kill")
    h.exited()
    h.restarted()
    h.checkpoint("after_restart", {2: 1})  # the restart started from a torn file: 0, 1 and 3 are gone
    simple(h, 4)
    h.checkpoint("before_fault", {2: 1, 4: 1})
    simple(h, 5)  # never seen by a read: lost with no fault
    result = audit(h, {"ns-m2": 1, "ns-m4": 1}, scenario)
    rows = result.intents.set_index("intent")
    assert list(rows["verdict"]) == ["lost", "lost", "exactly_once", "lost", "exactly_once", "lost"]
    assert list(rows["cause"]) == ["vanished", "vanished", "", "vanished", "", "no_fault"]
    assert (
        list(rows["vanished_after"])
        == ["kill#1 pod-0 @0.04s"] * 2 + [""] + ["kill#1 pod-0 @0.04s"] + [""] * 2
    )
    assert result.summary.checkpoints.reads == 3
    assert result.summary.checkpoints.vanished == 3
    story = next(c for c in result.summary.classes if c.cause == "vanished").stories[0]
    assert [(r.when, r.effects) for r in story.reads] == [("before_fault", 1), ("after_restart", 0)]
    assert story.pod_faults == [(0.04, "kill#1 pod-0 @0.04s")]


def _acked_then_killed(h: History, *, read: dict[int, int] | None, unstable: bool = False) -> None:
    """Intents 0 and 1 acknowledged; then (``read``) a read before a kill; the kill and its restart."""
    h.add("pod_started", pod="pod-0", pid=1)
    simple(h, 0)
    h.tick()
    simple(h, 1)
    h.tick()
    if read is not None:
        h.checkpoint("before_fault", read)
        if unstable:
            h.events[-1]["unstable"] = True
    h.fault("kill")
    h.exited()
    h.restarted()


@pytest.mark.parametrize(
    ("read", "unstable", "cause"),
    [
        (None, False, "lost_across_restart"),  # no read at all: nothing shows the server dropped it
        ({1: 1}, False, "no_fault"),  # the store kept the later intent and not it: a lost update
        ({}, False, "lost_across_restart"),  # a store with nothing in it yet: not durable, then killed
        ({1: 1}, True, "lost_across_restart"),  # a read whose re-reads never agreed proves nothing
    ],
    ids=["no_read", "kept_later_work", "nothing_yet", "unstable_read"],
)
def test_a_lost_intent_acknowledged_before_a_kill_is_no_fault_only_when_a_read_shows_it(
    scenario: Scenario, read: dict[int, int] | None, unstable: bool, cause: str
) -> None:
    h = History(intents=2)
    _acked_then_killed(h, read=read, unstable=unstable)
    rows = audit(h, {"ns-m1": 1}, scenario).intents.set_index("intent")
    assert rows.loc[0, "verdict"] == "lost"
    assert rows.loc[0, "cause"] == cause
    if cause == "lost_across_restart":
        assert str(rows.loc[0, "vanished_after"]).startswith("kill#1 pod-0 @")


def test_a_lost_intent_acknowledged_after_the_last_fault_is_no_fault(scenario: Scenario) -> None:
    h = History(intents=3)
    _acked_then_killed(h, read=None)
    simple(h, 2)  # after the restart, no fault since: the server lost it by itself
    rows = audit(h, {"ns-m0": 1, "ns-m1": 1}, scenario).intents.set_index("intent")
    assert (rows.loc[2, "verdict"], rows.loc[2, "cause"]) == ("lost", "no_fault")


def test_the_story_of_a_loss_across_a_restart_says_so(scenario: Scenario) -> None:
    h = History(intents=2)
    _acked_then_killed(h, read=None)
    result = audit(h, {"ns-m1": 1}, scenario)
    one = next(c for c in result.summary.classes if c.cause == "lost_across_restart")
    assert "lost across the restart after kill#1 pod-0 @" in render_markdown(result.summary, "")
    assert one.fix is not None
    assert "did not keep it across the restart" in one.fix.meaning


@pytest.mark.parametrize(("after_restart", "cause"), [(0, "sever_response"), (1, "kill")])
def test_a_duplicate_is_blamed_on_the_kill_only_if_the_restart_found_the_effect(
    scenario: Scenario, after_restart: int, cause: str
) -> None:
    """Attempt 1 died with the pod; the read once it was back found the effect (the kill left it: the
    retry repeats it) or did not (then both effects came later: a severed response and its retry)."""
    h = History(intents=1)
    h.add("pod_started", pod="pod-0", pid=1)
    h.start(0)
    first = h.attempt(0)
    h.tick()
    h.fault("kill")
    h.exited()
    h.end(0, first, "transport_error", "closed_before_response")
    h.tick()
    h.restarted()
    h.checkpoint("after_restart", {0: after_restart} if after_restart else {})
    h.tick()
    second = h.attempt(0, 2)
    h.add("fault", fault="sever_response", id=second, intent=0, attempt=2, server_done=True)
    h.end(0, second, "transport_error", "closed_before_response", attempt=2)
    h.tick()
    third = h.attempt(0, 3)
    h.end(0, third, attempt=3)
    h.finish(0, attempts=3)
    rows = audit(h, {"ns-m0": 2}, scenario).intents.set_index("intent")
    assert (rows.loc[0, "verdict"], rows.loc[0, "cause"]) == ("duplicate", cause)


def test_two_samples_of_one_read_join_what_either_saw() -> None:
    a = SeenEffects.of({"ns-m0000000": 1, "ns-m0000009": 2}, "ns", 20)
    b = SeenEffects.of({"ns-m0000003": 1, "ns-m0000009": 3, "other": 4}, "ns", 20)
    joined = a.join(b)
    bits = int.from_bytes(joined.bitmap, "little")
    assert [i for i in range(20) if bits >> i & 1] == [0, 3, 9]
    assert joined.counts == {9: 3}
    assert joined.foreign == 4


def test_effects_vanish_in_the_first_pod_fault_after_the_last_read_that_saw_them() -> None:
    # 0 and 1: seen, then a read saw less (it caught the file mid-rewrite, or a writer overwrote it),
    # then the kill: the first pod fault after the last read that saw them is blamed. 2: seen twice,
    # lost in the kill after the second read. 3: never seen. Without a pod fault after the reads
    # that saw them, nothing vanished: no restart lost it.
    checkpoints = CheckpointReads()
    reads: list[tuple[int, dict[str, int]]] = [
        (10, {"ns-m0000000": 1, "ns-m0000001": 1, "ns-m0000002": 1}),
        (20, {"ns-m0000002": 1}),
        (40, {}),
    ]
    for seq, seen in reads:
        checkpoints.checkpoint(
            {"seq": seq, "t": seq / 10, "when": "before_fault", **SeenEffects.of(seen, "ns", 4).fields()}
        )
    kill = PodFault(seq=30, t=3.0, kind="kill", pod="pod-0", number=1, start=1)
    early = PodFault(seq=5, t=0.5, kind="crash", pod="pod-0", number=1, start=1)
    gone = vanishing(checkpoints.reads, [early, kill], np.arange(4), np.array([0, 0, 0, 0]))
    assert list(gone.seen_max) == [1, 1, 1, 0]
    assert list(gone.vanished) == [True, True, True, False]
    assert list(gone.after) == ["kill#1 pod-0 @3.00s"] * 3 + [""]
    no_restart = vanishing(checkpoints.reads, [early], np.arange(4), np.array([0, 0, 0, 0]))
    assert not no_restart.vanished.any()  # the only pod fault came before any read saw them


def test_effects_a_restarted_server_threw_away_vanished_in_the_fault_it_restarted_after() -> None:
    # A crash tore the file; the read after the restart still saw 0 and 1 in it; the restarted server
    # started empty on the torn line and its first save dropped them: no pod fault after that read,
    # but the restart lost them. 2 was seen only by a read before the crash and kept: not vanished.
    crash = PodFault(seq=10, t=1.0, kind="crash", pod="pod-0", number=1, start=1)
    checkpoints = CheckpointReads()
    for seq, when, seen in [
        (5, "before_fault", {"ns-m0000002": 1}),
        (12, "after_restart", {"ns-m0000000": 1, "ns-m0000001": 1, "ns-m0000002": 1}),
    ]:
        record = SeenEffects.of(seen, "ns", 3).fields()
        checkpoints.checkpoint({"seq": seq, "t": seq / 10, "when": when, **record})
    gone = vanishing(checkpoints.reads, [crash], np.arange(3), np.array([0, 0, 1]))
    assert list(gone.vanished) == [True, True, False]
    assert list(gone.after) == ["crash#1 pod-0 @1.00s"] * 2 + [""]
    before_only = CheckpointReads()
    before_only.checkpoint(
        {"seq": 12, "t": 1.2, "when": "before_fault", **SeenEffects.of({"ns-m0000000": 1}, "ns", 3).fields()}
    )
    assert not vanishing(before_only.reads, [crash], np.arange(3), np.array([0, 0, 1])).vanished.any()


def test_the_seen_bitmap_round_trips_with_counts_and_foreign_markers() -> None:
    counts = {"ns-m0000000": 1, "ns-m0000009": 3, "ns-m0000016": 1, "other-m1": 2, "ns-mx": 1}
    record = SeenEffects.of(counts, "ns", 20).fields()
    assert (record["counts"], record["foreign"]) == ({"9": 3}, 3)
    checkpoints = CheckpointReads()
    checkpoints.checkpoint({"t": 0.0, "when": "before_fault", **record})
    assert list(seen_counts(checkpoints.reads[0], np.arange(20))) == [1] + [0] * 8 + [3] + [0] * 6 + [
        1,
        0,
        0,
        0,
    ]


def test_an_ok_reply_that_reads_as_a_failure_is_the_cause_of_a_lost_intent(scenario: Scenario) -> None:
    h = History(intents=3)
    simple(h, 0, reply="Created note 1")
    simple(h, 1, reply="Database error: no such table: notes", reads_as_failure=True)
    simple(h, 2, reply="Created note 3")
    result = audit(h, {"ns-m0": 1}, scenario)
    rows = result.intents.set_index("intent")
    assert list(rows["cause"]) == ["", "error_as_success", "no_fault"]
    assert rows.loc[1, "reply"] == "Database error: no such table: notes"
    s = result.summary
    assert s.replies_as_failure == 1
    assert [(r.message, r.count) for r in s.failure_replies] == [("Database error: no such table: notes", 1)]
    report = render_markdown(s, "")
    assert "## Replies that read as failures" in report
    assert "- 1× `Database error: no such table: notes`" in report
    assert "(an ok reply that reads as a failure)" in report


def test_a_rejected_intent_carries_its_last_error_code(scenario: Scenario) -> None:
    h = History(intents=1)
    h.start(0)
    rid = h.attempt(0)
    h.end(0, rid, "tool_error", "error_contract", code="E_QUOTA", message="quota exceeded")
    h.finish(0, status="rejected")
    rows = audit(h, {}, scenario).intents
    assert list(rows[["verdict", "cause", "code"]].iloc[0]) == ["rejected", "refused", "E_QUOTA"]


# Stories: a few intents per class, from a second read that stops early.


class Counted:
    """A history opened again, counting the events the second read took."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.events, self.read = events, 0

    def __call__(self) -> Iterator[Sequence[Mapping[str, Any]]]:
        for ev in self.events:
            self.read += 1
            yield [ev]


def test_stories_tell_the_first_intents_of_each_class_and_the_second_read_stops_after_them(
    scenario: Scenario,
) -> None:
    from harness.audit.auditor import judge_fold

    h = History(intents=200)
    for i in range(200):
        h.start(i)
        first = h.attempt(i)
        if i in (3, 30):
            h.fault("kill")
            h.end(i, first, "transport_error", "closed_before_response")
            again = h.attempt(i, attempt=2)
            h.end(i, again, attempt=2, reply=f"Created note {i}")
            h.finish(i, attempts=2)
        else:
            h.tick()
            h.end(i, first, reply=f"Created note {i}")
            h.finish(i)
    lost = [31, 33, 35, 37, 39, 41, 190]  # after the last kill: lost by the server itself (no_fault)
    effects = {f"ns-m{i}": 1 for i in range(200) if i not in lost} | {"ns-m3": 2, "ns-m30": 2}
    second = Counted(h.events)
    from collections import Counter

    result = judge_fold(fold_history([h.events]), Counter(effects), scenario, Path("run"), second)
    classes = [(c.verdict, c.cause, c.count, [s.intent for s in c.stories]) for c in result.summary.classes]
    assert classes == [
        (Verdict.LOST, "no_fault", 7, [31, 33, 35, 37, 39]),
        (Verdict.DUPLICATE, "kill", 2, [3, 30]),
    ]
    # It stopped after intent 39 ended, and read on LATE_S of the run for points told late, no further.
    from harness.audit.stories import LATE_S

    ended = next(e["t"] for e in h.events if e["type"] == "intent_ended" and e["intent"] == 39)
    assert second.read == 1 + sum(e["t"] <= ended + LATE_S for e in h.events) < len(h.events)
    story = result.summary.classes[1].stories[0]
    assert [(s.attempt, s.outcome, s.faults) for s in story.steps] == [
        (1, "transport_error", ["kill#1 pod-0 @0.03s"]),
        (2, "ok", []),
    ]
    fix = result.summary.classes[1].fix
    assert fix is not None
    assert "one transaction" in fix.fix  # the scenario's arguments carry {key}


def test_a_point_told_late_is_where_the_story_of_its_killed_attempt_ends(scenario: Scenario) -> None:
    """The relay read the commit of a killed attempt after its ``attempt_ended`` was written (the cluster
    answered after the pod died): the ``point_late`` event puts it back in that attempt, so the story says
    the kill came after the commit, where without it the attempt reached nothing."""
    from harness.report.stories import story_lines

    h = History(intents=1)
    h.start(0)
    first = h.attempt(0)
    h.fault("kill")
    h.end(0, first, "transport_error", "closed_before_response")
    h.tick()
    h.add("point_late", intent=0, attempt=1, point="db_commit#1", label="INSERT invoices")
    again = h.attempt(0, attempt=2)
    h.end(0, again, attempt=2, reply="Created note 0", points=[["db_commit#1", "INSERT invoices"]])
    h.finish(0, attempts=2)
    result = audit(h, {"ns-m0": 2}, scenario)
    [duplicate] = result.summary.classes
    told = "\n".join(story_lines(duplicate.stories[0]))
    assert "after db_commit#1 (INSERT invoices), before its answer" in told, told


def test_report_md_and_html_show_the_findings_and_escape_what_a_server_wrote(
    scenario: Scenario, tmp_path: Path
) -> None:
    hostile = '<script>alert(1)</script> "quoted" & `ticks`'
    h = History(intents=2)
    simple(h, 0, reply=hostile)
    simple(h, 1, reply="Created")
    result = audit(h, {"ns-m1": 1}, scenario)
    markdown = render_markdown(result.summary, "")
    assert markdown.splitlines()[2].startswith("**LOST: 1 of 2 intents")
    findings = markdown.index("## Findings")
    assert findings < markdown.index("## Verdicts")
    assert "### lost · no_fault: 1 intent" in markdown
    assert "**Fix:** serialise changes" in markdown
    story = markdown[findings:].split("```text\n", 1)[1].split("```", 1)[0]
    assert story.splitlines()[0].startswith("intent 0 (marker ns-m0, key k0): lost (no_fault)")
    assert all(line.startswith(("intent ", "  ")) or not line for line in story.splitlines())
    page = render_html(result)
    assert "<script>" not in page
    assert html.escape(hostile) in page or hostile.replace("<", "&lt;") in page
    assert page.count("<svg") == 1
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "<script" not in svg
    assert page.index('class="headline"') < page.index("<h2>Findings</h2>") < page.index("<h2>Timeline</h2>")


def test_explain_tells_the_first_of_each_class_or_one_intent(
    scenario_data: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.test_gate import write_run

    h = History(intents=3)
    for i in range(3):
        simple(h, i, reply=f"Created note {i}")
    run_dir = write_run(tmp_path / "run", {**scenario_data, "faults": {}}, h, {"ns-m0": 1, "ns-m2": 2})
    assert main(["explain", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("LOST: 1 of 3 intents")
    assert "lost · no_fault: 1 intent\n  what it means: the server acknowledged the write" in out
    assert "intent 1 (marker ns-m1, key k1): lost (no_fault): the client saw ok, 0 effects at the end" in out
    assert "duplicate · no_fault: 1 intent" in out
    assert main(["explain", str(run_dir), "0"]) == 0
    one = capsys.readouterr().out.splitlines()
    assert (
        one[0] == "intent 0 (marker ns-m0, key k0): exactly_once (): the client saw ok, 1 effect at the end"
    )
    assert one[1].startswith("  attempt 1 (request 1) 0.000s → 0.010s: ok: 'Created note 0'")
    assert main(["explain", str(run_dir), "7"]) == 2
    assert "intent 7 never started" in capsys.readouterr().err


# Evidence from the pod logs, and the control run.


def test_pod_log_lines_around_each_fault(scenario: Scenario, tmp_path: Path) -> None:
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "pod-0.log").write_text(
        "--- pod-0: start #1 at 10:00:00 ---\n"
        "serving\n"
        "ERROR: write interrupted\n" + "INFO ok\n" * 1000 + "--- pod-0: start #2 at 10:00:05 ---\n"
        "Error loading notes: line 155: Expecting ',' delimiter\n"
        "serving with 0 notes\n"
    )
    h = History(intents=1)
    h.add("pod_started", pod="pod-0", pid=1)
    simple(h, 0)
    h.fault("kill")
    h.exited()
    h.restarted()
    result = audit(h, {"ns-m0": 1}, scenario, run_dir=tmp_path)
    (shown,) = result.summary.evidence
    assert (shown.fault, shown.before, shown.after) == (
        "kill#1 pod-0 @0.01s",
        ["ERROR: write interrupted"],
        ["Error loading notes: line 155: Expecting ',' delimiter"],
    )
    assert "after:  Error loading notes: line 155" in render_markdown(result.summary, "")


def test_a_control_run_says_whether_the_server_loses_writes_without_faults(
    scenario: Scenario, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    summary = {"run_id": "c1", "verdicts": {"lost": 45, "duplicate": 0}, "intents": {"started": 100}}
    (control / "summary.json").write_bytes(orjson.dumps(summary))
    h = History(intents=100)
    for i in range(100):
        simple(h, i)
    result = audit(h, {f"ns-m{i}": 1 for i in range(50)}, scenario, run_dir=tmp_path)
    assert result.summary.control is not None
    lost, duplicate = result.summary.control.rows
    assert lost.sentence.startswith(
        "the server loses writes without any fault: 45 of 100 lost in the control run too (against 50 of 100"
    )
    assert duplicate.sentence == "none duplicated in either run"
    assert any(
        line.startswith("control run (c1): the server loses writes")
        for line in render_text(result.summary).splitlines()
    )
    (control / "summary.json").unlink()
    again = audit(h, {f"ns-m{i}": 1 for i in range(50)}, scenario, run_dir=tmp_path)
    assert again.summary.control is not None
    assert again.summary.control.problem is not None
    assert "audit it with mcp-chaos audit" in again.summary.control.problem


def test_faults_alone_cause_it_when_the_control_run_is_clean(scenario: Scenario, tmp_path: Path) -> None:
    (tmp_path / "control").mkdir()
    clean = {"run_id": "c", "verdicts": {"lost": 0, "duplicate": 0}, "intents": {"started": 100}}
    (tmp_path / "control" / "summary.json").write_bytes(orjson.dumps(clean))
    h = History(intents=100)
    for i in range(100):
        simple(h, i)
    result = audit(h, {f"ns-m{i}": 1 for i in range(100) if i >= 20}, scenario, run_dir=tmp_path)
    assert result.summary.control is not None
    assert result.summary.control.rows[0].sentence.startswith(
        "the faults cause it: 0 of 100 lost without faults"
    )


def test_explain_of_a_run_without_findings(scenario: Scenario) -> None:
    h = History(intents=2)
    simple(h, 0)
    simple(h, 1)
    s = audit(h, {"ns-m0": 1, "ns-m1": 1}, scenario).summary
    assert explain(s).splitlines() == [
        "exactly once: 2 of 2 intents; with 0 kills, 0 pod exits",
        "nothing to explain: every intent took effect exactly once",
    ]


# An inconclusive line says who ended the run before its faults.


@pytest.mark.parametrize(
    ("status", "reason", "said"),
    [
        (
            "stopped",
            "pod-0 answered no call for 8s after its last answer",
            "the harness stopped the run before them: ",
        ),
        ("interrupted", "SIGINT", "the run was interrupted before them: SIGINT"),
        ("completed", None, "the run ended after 2 intents were dispatched, before its trigger (intent 3)"),
    ],
)
def test_planned_kills_a_harness_stop_left_out_are_never_blamed_on_the_workload(
    scenario: Scenario, status: str, reason: str | None, said: str
) -> None:
    """ "2 of 4 planned kills did not happen (the run ended after 2 intents were dispatched ...)" read as
    "give the workload more intents", on a run the harness itself stopped on an unavailable pod."""
    h = History(intents=2, faults_planned={"kill": 3})
    simple(h, 0)
    h.fault("kill", trigger="after intent 0")
    h.exited()
    h.restarted()
    simple(h, 1)
    dispatched = "the run ended after 2 intents were dispatched, before its trigger (intent 3)"
    for _ in range(2):
        h.add("fault_missed", fault="kill", trigger="after intent 3", counted=True, reason=dispatched)
    h.add("run_ended", status=status, **({"reason": reason} if reason else {}))
    s = audit(h, {"ns-m0": 1, "ns-m1": 1}, scenario).summary
    (line,) = [r for r in s.inconclusive if "planned kills" in r]
    assert line.startswith(f"2 of 3 planned kills did not happen ({said}"), line
    assert ("dispatched" in line) == (status == "completed")
