"""Every kind of hold point has its facts, and what the harness derives from them agrees with them: a kind
added without facts, or a module that lists kinds again instead of asking the facts, fails here."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness.crashpoints.decisions import Reached
from harness.crashpoints.explore import hold_points
from harness.crashpoints.plans import ObservePlan, PathPlan
from harness.crashpoints.points import (
    BOUNDARIES,
    COUNTED,
    CRASH_KINDS,
    EDGES,
    FILE_KINDS,
    KINDS,
    OBSERVED,
    SERVICE_KINDS,
    Crash,
    Point,
    PointKind,
    Site,
    parse_point,
    phrase,
)
from harness.errors import ScenarioError
from harness.scenario import parse_scenario
from harness.scenario.rules import SERVICE_SECTIONS


def test_every_kind_has_its_facts_in_the_order_a_call_passes_them() -> None:
    assert list(KINDS) == list(PointKind)
    for kind, facts in KINDS.items():
        assert facts.sites, kind
        assert facts.phrase, kind


def test_the_derived_sets_are_the_facts() -> None:
    assert {k for k in PointKind if KINDS[k].counted} == COUNTED
    assert {k for k in PointKind if KINDS[k].crashable} == CRASH_KINDS
    assert {k for k in PointKind if KINDS[k].observed} == OBSERVED
    assert {k for k in PointKind if KINDS[k].boundary} == BOUNDARIES
    assert {k for k in PointKind if Site.FILES in KINDS[k].sites} == FILE_KINDS
    assert {k for k in PointKind if Site.PROXY in KINDS[k].sites} == EDGES
    assert BOUNDARIES <= FILE_KINDS
    assert len(EDGES) + len(FILE_KINDS) + len(SERVICE_KINDS) == len(PointKind)  # each kind in one of them
    assert set(PointKind) == EDGES | FILE_KINDS | SERVICE_KINDS


def test_the_plans_hold_and_observe_the_kinds_the_facts_say() -> None:
    assert ObservePlan.kinds == OBSERVED
    assert PathPlan.kinds == CRASH_KINDS


@pytest.mark.parametrize("kind", list(PointKind))
def test_a_kind_is_named_with_an_index_where_its_facts_count_it(kind: PointKind) -> None:
    counted, once = f"{kind.value}#3", kind.value
    good, bad = (counted, once) if KINDS[kind].counted else (once, counted)
    assert parse_point(good) == Point(kind, 3 if KINDS[kind].counted else 1)
    assert parse_point(f"{good}@power_loss").crash is Crash.POWER_LOSS
    assert str(parse_point(good)) == good
    with pytest.raises(ValueError, match="not a hold point") as info:
        parse_point(bad)
    assert (f"{kind.value}#N" if KINDS[kind].counted else kind.value) in str(info.value)


@pytest.mark.parametrize("kind", list(PointKind))
def test_a_site_reports_only_the_kinds_its_facts_name(kind: PointKind) -> None:
    for site in Site:
        if site in KINDS[kind].sites:
            assert Reached(site, kind).site is site
        else:
            with pytest.raises(ValueError, match="its facts name"):
                Reached(site, kind)


def test_every_site_a_kind_is_seen_at_is_one_the_rules_know() -> None:
    """The fault proxy is in every run and the file tracer has a rule of its own; every other site is a
    service whose section the scenario rules ask for."""
    for kind, facts in KINDS.items():
        assert facts.sites <= {Site.PROXY, Site.FILES, *SERVICE_SECTIONS}, kind


SERVICES = {
    "services.postgres": ("services", "postgres", {}),
    "audit.effects.sink": ("audit", "effects", {"sink": {}}),
    "services.downstream": ("services", "downstream", {"upstream": "http://127.0.0.1:9/"}),
}
"""How a unit scenario gets each service section the rules may ask for."""


def _with(data: dict[str, Any], section: str) -> dict[str, Any]:
    data = copy.deepcopy(data)
    parent, name, value = SERVICES[section]
    where = data
    for part in parent.split("."):
        where = where.setdefault(part, {})
    where[name] = value
    return data


@pytest.mark.parametrize("kind", sorted(SERVICE_KINDS))
def test_a_service_point_needs_one_of_its_sites_sections(
    scenario_data: dict[str, Any], kind: PointKind
) -> None:
    """Held in an order (any kind can be, no crash), the point needs a service that sees it: without any,
    the error names every section that would do; with any one of them, the rule passes."""
    name = f"{kind.value}#1" if kind in COUNTED else kind.value
    data = copy.deepcopy(scenario_data)
    data["faults"] = {"crash_points": {"order": {"at": name, "order": [2, 1]}}}
    sections = [SERVICE_SECTIONS[site][0] for site in Site if site in KINDS[kind].sites]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(copy.deepcopy(data), source="s.yaml")
    assert f"a {kind.value} point needs {' or '.join(sections)} (" in info.value.message
    for section in sections:
        parse_scenario(_with(data, section), source="s.yaml")


def test_hold_points_are_the_crashed_kinds_of_the_sites_a_target_reaches(
    scenario_data: dict[str, Any],
) -> None:
    data = copy.deepcopy(scenario_data)
    data["target"]["env"]["DATABASE_URL"] = "{postgres_url}"
    data["services"] = {"postgres": {}}
    data["faults"] = {}
    scenario = parse_scenario(data, source="s.yaml")
    postgres = {k for k in CRASH_KINDS if Site.POSTGRES in KINDS[k].sites}
    assert set(hold_points(scenario)) == postgres | FILE_KINDS
    assert PointKind.DB_STATEMENT not in hold_points(scenario)  # held in an order, never crashed


def test_a_story_tells_a_point_by_its_kinds_phrase() -> None:
    for kind, facts in KINDS.items():
        assert phrase(kind.value) == facts.phrase
        assert phrase(f"{kind.value}#2@power_loss") == facts.phrase
    assert phrase("nowhere#1") == "passed"
