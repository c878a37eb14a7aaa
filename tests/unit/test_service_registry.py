"""The services' registry: each service declares its section and placeholders once
(``harness.scenario.SERVICES``), its running side is registered beside it
(``harness.run.services.registry.KINDS``), and the scenario's placeholders come from them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.crashpoints.plans import plan_for
from harness.crashpoints.router import Router
from harness.errors import ScenarioError
from harness.history import HistoryWriter
from harness.pods.factory import placeholder_values
from harness.run.services.base import Given, Service
from harness.run.services.postgres import PostgresWired
from harness.run.services.registry import KINDS, logs, wanted
from harness.scenario import SERVICES, TARGET_PLACEHOLDERS, Scenario, parse_scenario
from harness.scenario.rules import SERVICE_SECTIONS

EVERY_SERVICE = [
    "services.postgres={}",
    "audit.effects={sink: {}}",
    "services.downstream={upstream: 'http://127.0.0.1:9/'}",
    "services.balancer={}",
    "target.replicas=2",
]


def parse(data: dict[str, Any], *overrides: str) -> Scenario:
    return parse_scenario(copy.deepcopy(data), source="s.yaml", overrides=overrides)


def error_of(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse(data, *overrides)
    message = info.value.message
    assert "\n" not in message
    return message


@pytest.fixture
def every_service(scenario_data: dict[str, Any]) -> Scenario:
    scenario_data["faults"] = {}
    return parse(scenario_data, *EVERY_SERVICE)


@pytest.fixture
def given(tmp_path: Path, every_service: Scenario) -> Iterator[Given]:
    history = HistoryWriter(tmp_path / "history.jsonl")
    yield Given(every_service, tmp_path, Router(plan_for(None)), history, str, fronted=(4001, 4002))
    history.close()


def test_the_registry_and_the_scenarios_facts_are_one_list_in_one_order() -> None:
    assert [kind.facts for kind in KINDS] == list(SERVICES)
    assert len({s.name for s in SERVICES}) == len(SERVICES)


def test_every_section_a_service_serves_is_a_section_of_the_scenario(every_service: Scenario) -> None:
    for facts in SERVICES:
        assert facts.present(every_service), facts.section


def test_a_scenario_without_services_asks_for_none(scenario_data: dict[str, Any]) -> None:
    bare = parse(scenario_data)
    assert wanted(bare, fronts=False) == [] == wanted(bare, fronts=True)
    assert not any(facts.present(bare) for facts in SERVICES)


def test_the_services_wanted_come_in_start_order_and_nginx_alone_in_front(every_service: Scenario) -> None:
    beside = wanted(every_service, fronts=False)
    assert [kind.facts.name for kind in beside] == ["postgres", "sink", "downstream"]
    assert [kind.facts.name for kind in wanted(every_service, fronts=True)] == ["nginx"]


def made(kind: type[Service], given: Given) -> Service:
    service = kind(given)
    if isinstance(service, PostgresWired):  # made, never started: its cluster's directory goes now
        import asyncio

        asyncio.run(service.cluster.stop())
    return service


@pytest.mark.parametrize("kind", KINDS, ids=[kind.facts.name for kind in KINDS])
def test_each_service_fills_in_exactly_the_placeholders_it_declares(
    kind: type[Service], given: Given
) -> None:
    service = made(kind, given)
    assert set(service.handed().placeholders) == set(kind.facts.placeholders)
    assert set(service.audit_values()) == kind.facts.audit
    assert kind.facts.audit <= set(kind.facts.placeholders)
    for name, meaning in kind.facts.placeholders.items():
        assert name in TARGET_PLACEHOLDERS
        assert meaning  # documented


def test_what_services_hand_the_target_beyond_placeholders(given: Given) -> None:
    services = {kind.facts.name: made(kind, given) for kind in KINDS}
    downstream = services["downstream"].handed()
    assert downstream.env["HTTPS_PROXY"] == downstream.placeholders["downstream_url"]
    assert downstream.env["SSL_CERT_FILE"] == downstream.placeholders["downstream_ca"]
    assert downstream.mounts == {}  # a process pod reads the CA where it is; a container gets a mount
    assert services["nginx"].entry_port is not None
    assert [s.entry_port for name, s in services.items() if name != "nginx"] == [None, None, None]
    assert logs() == ("postgres.log",)


def test_a_misspelt_service_placeholder_is_one_line_naming_every_one_allowed(
    scenario_data: dict[str, Any],
) -> None:
    scenario_data["services"] = {"postgres": {}}
    scenario_data["target"]["env"]["DB"] = "{postgres_ulr}"
    message = error_of(scenario_data)
    assert message.startswith("s.yaml: target.env: unknown placeholder {postgres_ulr} in target.env.DB")
    for facts in SERVICES:
        for name in facts.placeholders:
            assert "{" + name + "}" in message


@pytest.mark.parametrize(
    ("placeholder", "section"),
    [(name, facts.section) for facts in SERVICES for name in facts.placeholders],
)
def test_a_services_placeholder_without_its_section_is_one_line(
    scenario_data: dict[str, Any], placeholder: str, section: str
) -> None:
    scenario_data["target"]["env"]["X"] = "{" + placeholder + "}"
    assert (
        error_of(scenario_data) == f"s.yaml: (top level): {{{placeholder}}} is used but {section} is not set"
    )


def test_a_hold_sites_section_is_its_services(every_service: Scenario) -> None:
    assert {site: path for site, (path, _) in SERVICE_SECTIONS.items()} == {
        facts.site: facts.section for facts in SERVICES if facts.site is not None
    }


def test_a_placeholder_no_service_fills_stays_as_written(every_service: Scenario, tmp_path: Path) -> None:
    values = placeholder_values(every_service.target, run_dir=tmp_path, port=1, pod="pod-0", urls={})
    for facts in SERVICES:
        for name in facts.placeholders:
            assert values[name] == "{" + name + "}"
