"""A store its server cannot read again, audited on synthetic histories: a finding of its own, first after
an unavailable pod, failed by the default gate; the intents whose effects it held are lost, blamed on the
fault that tore it, and never read as duplicates from its leftover bytes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.audit.auditor import AuditResult, FrameChunks, judge
from harness.audit.effects import EffectTable
from harness.audit.fold import fold_history
from harness.effects.base import Unreadable
from harness.history import Verdict
from harness.scenario import Scenario, parse_scenario
from tests.unit.histories import History

EPOCH = 1_800_000_000.0
"""The wall clock at the run's t = 0."""
ERROR = "Extra data: line 1 column 61 (char 60)"


@pytest.fixture
def scenario(scenario_data: dict[str, Any]) -> Scenario:
    return parse_scenario({**scenario_data, "faults": {}})


def acknowledged(h: History, *intents: int) -> None:
    for i in intents:
        h.run_intent(i)
        h.tick()


def killed(h: History) -> None:
    h.fault("kill")
    h.exited()
    h.tick(0.5)
    h.restarted()
    h.tick()


def judged(h: History, scenario: Scenario, counts: dict[str, int], *files: Unreadable) -> AuditResult:
    fold = fold_history([h.events])
    table = EffectTable.of(Counter(counts), files)
    try:
        return judge(fold, FrameChunks(fold.intents), table, scenario, Path("run"), lambda: [h.events])
    finally:
        table.close()


def torn(held: dict[int, int], changed_t: float | None = None) -> Unreadable:
    """``data/notes.json``, torn, holding these intents' markers (intent -> occurrences), last written at
    ``changed_t`` on the run's clock."""
    changed = None if changed_t is None else EPOCH + changed_t
    return Unreadable(
        "data/notes.json", "json", ERROR, Counter({f"ns-m{i}": n for i, n in held.items()}), changed
    )


def test_a_torn_document_is_a_finding_its_intents_lost_to_the_kill_that_tore_it(scenario: Scenario) -> None:
    """Read whole before the second kill, unreadable after it: the second kill tore it. Intent 1 is in the
    leftover bytes twice, and is no duplicate; intent 3, stored elsewhere, is counted as ever."""
    h = History(intents=4, epoch_s=EPOCH)
    acknowledged(h, 0, 1)
    h.checkpoint("before_fault", {0: 1, 1: 1})
    killed(h)
    acknowledged(h, 2)
    h.checkpoint("before_fault", {0: 1, 1: 1, 2: 1})
    killed(h)
    acknowledged(h, 3)
    result = judged(h, scenario, {"ns-m3": 1}, torn({0: 1, 1: 2, 2: 1}))
    s = result.summary
    rows = result.intents.set_index("intent")
    assert list(rows["verdict"]) == ["lost", "lost", "lost", "exactly_once"]
    assert list(rows["cause"])[:3] == ["kill"] * 3
    assert str(rows.loc[0, "vanished_after"]).startswith("kill#2 pod-0 @")
    assert s.verdicts[Verdict.DUPLICATE] == 0
    assert [f.kind for f in s.findings][:2] == ["store_unreadable", "lost"]
    assert s.headline.sentence.startswith(
        f"STORE UNREADABLE: data/notes.json does not parse as json ({ERROR}): the server cannot read its "
        "store again; it held the effects of 3 intents, none counted, 3 of them acknowledged, now lost "
        "(torn by kill#2 pod-0 @"
    )
    assert "Fix: write the store whole to a temporary file, fsync it, rename it" in s.headline.sentence
    (row,) = s.unreadable
    assert (row.held, row.lost, row.torn_by.split(" ")[0]) == (3, 3, "kill#2")
    assert not s.gate.passed
    (check,) = [c for c in s.gate.checks if c.name == "store_unreadable"]
    assert check.status == "failed"
    assert check.message.startswith("store unreadable: data/notes.json does not parse as json")
    (lost,) = [c for c in s.classes if c.verdict is Verdict.LOST]
    assert lost.cause == "kill"
    assert lost.stories[0].vanished_after.startswith("kill#2 pod-0 @")


def test_a_store_torn_with_no_pod_fault_since_it_was_whole_is_the_server_s_own(scenario: Scenario) -> None:
    h = History(intents=2, epoch_s=EPOCH)
    acknowledged(h, 0)
    killed(h)
    h.checkpoint("after_restart", {0: 1})
    acknowledged(h, 1)
    result = judged(h, scenario, {}, torn({0: 1, 1: 1}))
    assert set(result.intents["cause"]) == {"no_fault"}
    assert result.summary.unreadable[0].torn_by == ""
    assert "(torn with no pod fault after the last whole read)" in result.summary.headline.sentence


def test_without_a_whole_read_the_file_s_last_write_names_the_fault_that_cut_it(scenario: Scenario) -> None:
    """No checkpoint reads: the first pod fault after the file was last written tore it; a file written
    after every fault (a restarted server appended to it) is blamed on the last."""
    h = History(intents=3, epoch_s=EPOCH)
    acknowledged(h, 0)
    killed(h)
    acknowledged(h, 1)
    written = h.t
    h.tick(3)
    killed(h)
    h.tick(3)
    killed(h)
    acknowledged(h, 2)
    cut = judged(h, scenario, {"ns-m2": 1}, torn({0: 1, 1: 1}, changed_t=written))
    assert cut.summary.unreadable[0].torn_by.startswith("kill#2 ")
    later = judged(h, scenario, {"ns-m2": 1}, torn({0: 1, 1: 1}, changed_t=h.t + 5))
    assert later.summary.unreadable[0].torn_by.startswith("kill#3 ")


def test_an_unacknowledged_intent_in_it_is_not_lost_and_the_gate_can_leave_it_out(
    scenario_data: dict[str, Any],
) -> None:
    h = History(intents=2, epoch_s=EPOCH)
    acknowledged(h, 0)
    h.start(1)
    rid = h.attempt(1)
    killed(h)
    h.end(1, rid, "transport_error", "closed_before_response")
    h.finish(1, "gave_up")
    data = {**scenario_data, "faults": {}, "gate": {"fail_on": ["lost"]}}
    result = judged(h, parse_scenario(data), {}, torn({0: 1, 1: 1}))
    assert list(result.intents["verdict"]) == ["lost", "unfinished"]
    assert result.summary.unreadable[0].lost == 1
    assert result.summary.unreadable[0].held == 2
    (check,) = [c for c in result.summary.gate.checks if c.name == "store_unreadable"]
    assert check.status == "not_gated"
    assert check.message.startswith("store unreadable, not gated (fail_on does not list it): ")
