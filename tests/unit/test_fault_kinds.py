"""A fault kind is one module (decision 0088): it declares every facet its source needs, and the schedule,
the injector, ``describe``, the audit's causes and fixes and the reports take its facts from the registry.

Adding a kind means adding its module and its word in ``FaultKind``; this test fails until the module
declares all it must, and checks it against every reader with the other kinds.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import pkgutil
from typing import Any, get_args

import pytest

from harness import faultkinds
from harness.audit import causes, fixes
from harness.audit.stories import FindingClass, Story
from harness.faultkinds.base import GROUPS, Kind, Source
from harness.faultkinds.registry import BLAME, COLOURS, KINDS, NOT_KINDS, SCHEDULED
from harness.faults.describe import describe_rule
from harness.faults.schedule import build_schedule
from harness.history import FaultKind, StreamFaultKind, Verdict
from harness.report import html, stories
from harness.scenario import Scenario, StreamFault, parse_scenario

SECTIONS = {
    "kill": {"count": 3, "jitter_s": 0.2},
    "pause": {"count": 2, "duration_s": 0.5},
    "rollout": {"count": 2},
}
"""A small section of each scheduled kind, as a scenario writes it."""


def _modules() -> dict[str, Kind]:
    names = [m.name for m in pkgutil.iter_modules(faultkinds.__path__) if m.name not in NOT_KINDS]
    return {name: importlib.import_module(f"harness.faultkinds.{name}").KIND for name in names}


def test_every_fault_kind_is_one_module_named_for_it() -> None:
    modules = _modules()
    assert sorted(modules) == sorted(k.value for k in FaultKind)
    for name, kind in modules.items():
        assert kind.kind.value == name, f"harness/faultkinds/{name}.py declares {kind.kind}"
    assert len(KINDS) == len(FaultKind)


def test_the_blame_order_is_the_ranks_and_the_vocabulary_lists_it() -> None:
    ranks = [k.rank for k in KINDS]
    assert len(set(ranks)) == len(ranks), "two kinds share a blame rank"
    assert list(BLAME) == list(FaultKind), "FaultKind's members are listed in blame order"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind.value)
def test_each_kind_declares_every_facet_its_source_needs(kind: Kind) -> None:
    assert kind.means.strip().endswith(".")
    assert kind.group in GROUPS
    scheduled = kind.source is Source.SCHEDULE
    assert (kind.plan is not None, kind.strike is not None, kind.rate is not None) == (scheduled,) * 3
    assert not kind.stepwise or scheduled
    assert not kind.reads_before or scheduled
    assert kind.heal is None or scheduled
    nameable = kind.kind.value in get_args(StreamFaultKind)
    assert (kind.rule_action is not None) == nameable, "a rule a scenario can name says what it does"
    assert (kind.strike_exchange is not None) == nameable, "and does it to an exchange"
    assert not nameable or kind.source is Source.STREAM
    assert kind.colour is None or kind.colour.startswith("#")
    assert kind.takes_pod_down or not kind.replayed_by_kill


def test_the_scenario_has_a_section_for_each_scheduled_kind_and_no_other() -> None:
    # The sections stay in harness/scenario/faults.py (pydantic's model, the shipped JSON Schema);
    # the registry and the model must agree.
    sections = set(Scenario.model_fields["faults"].annotation.model_fields)  # type: ignore[union-attr]
    assert sections - {"stream", "crash_points"} == {k.value for k in SCHEDULED}


@pytest.mark.parametrize("kind", SCHEDULED, ids=str)
def test_a_kind_plans_only_its_own_faults_on_its_own_stream(
    kind: FaultKind, scenario_data: dict[str, Any]
) -> None:
    """Each kind's plan reads its section alone: adding another kind's section moves none of its faults."""
    alone = copy.deepcopy(scenario_data)
    alone["faults"] = {kind.value: SECTIONS[kind.value]}
    own = build_schedule(parse_scenario(alone))
    assert own
    assert {f.kind for f in own} == {kind}
    together = copy.deepcopy(scenario_data)
    together["faults"] = dict(SECTIONS)
    assert [f for f in build_schedule(parse_scenario(together)) if f.kind is kind] == own


def test_the_audit_blames_and_fixes_by_the_registry() -> None:
    for kind in KINDS:
        assert fixes.GROUPS[kind.kind] == kind.group
        for verdict, fix in kind.fixes.items():
            assert fixes.fix_for(verdict, kind.kind.value) == fix
    for first, second in itertools.combinations(KINDS, 2):  # KINDS is in rank order
        assert causes.first_fault(f"{second.kind};{first.kind}") == first.kind.value
    pods = [k for k in KINDS if k.takes_pod_down]
    others = [k for k in KINDS if not k.takes_pod_down]
    cell = ";".join(k.kind.value for k in pods + others)
    assert causes.first_fault(cell, pods=False) == others[0].kind.value


def test_the_reports_and_describe_take_their_words_from_the_registry() -> None:
    for drawn in COLOURS:  # each drawn kind takes the pod down on the timeline until it is ready again
        timeline = html.timeline_of([(1.0, drawn), (1.5, "pod_ready"), (2.0, "sever_response")])
        assert timeline.down == [(1.0, 1.5)], drawn
        assert timeline.faults == [(1.0, drawn), (2.0, "sever_response")]
    assert html.timeline_of([(2.0, "sever_response"), (2.5, "pod_ready")]).down == []  # a stream fault: no
    for kind in KINDS:
        story = Story(7, "m", "k", "duplicate", kind.kind.value, "ok", 2, [], [], 0, "", None)
        found = FindingClass(Verdict.DUPLICATE, kind.kind.value, 1, None, [story])
        assert (stories.replay_command(found) is not None) == kind.replayed_by_kill
        if kind.rule_action is not None:
            rule = StreamFault.model_validate({"fault": kind.kind.value, "probability": 0.5})
            assert describe_rule(0, rule).endswith(f": {kind.rule_action(rule)}")
