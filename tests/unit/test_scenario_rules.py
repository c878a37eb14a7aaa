"""The rules across a scenario's sections: each one is reached, and the first one broken is the error."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness.errors import ScenarioError
from harness.scenario import parse_scenario
from harness.scenario.rules import RULES

KUBE: dict[str, Any] = {
    "name": "kube",
    "target": {"kubernetes": {"selector": "app=invoices", "url": "http://invoices.shop.svc:8080/mcp"}},
    "workload": {"intents": 3, "tool": "create_invoice", "arguments": {"memo": "{marker}"}},
    "faults": {"kill": {"count": 1}},
    "audit": {"effects": {"tool": {"tool": "count_invoices"}}},
}


def error_of(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(copy.deepcopy(data), source="s.yaml", overrides=overrides)
    return info.value.message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["target.env.URL='{postgres_url}'"],
            "{postgres_url} is used but services.postgres is not set",
        ),
        (
            ["audit.effects.sql.url='{postgres_url}'"],
            "{postgres_url} is used but services.postgres is not set",
        ),
        (["target.command=[x, '{sink_url}']"], "{sink_url} is used but audit.effects.sink is not set"),
        (
            ["faults.kill.victim=1"],
            "faults.kill.victim: there is no replica 1 (target.replicas is 1: use 0..0, random or all)",
        ),
        (
            ["target.replicas=2", "faults.pause={count: 1, duration_s: 1, victim: 2}"],
            "faults.pause.victim: there is no replica 2 (target.replicas is 2: use 0..1, random or all)",
        ),
        (
            ["services.balancer={}", "target.transport=stdio"],
            "services.balancer goes in front of HTTP replicas the harness runs; not with a stdio or "
            "Kubernetes target",
        ),
        (
            ["target.transport=stdio", "faults.stream=[{fault: stall, probability: 0.1}]"],
            "faults.stream needs an HTTP target (the fault proxy sits between the driver and an HTTP "
            "server); a stdio target can be killed and paused",
        ),
        (
            ["target.transport=stdio", "client.key_in=header"],
            "client.key_in: header needs an HTTP target; use meta or argument",
        ),
        (
            ["target.transport=stdio", "audit.effects={tool: {tool: count}}"],
            "audit.effects.tool reads over HTTP; with a stdio target use sql, jsonl, files or command",
        ),
        (
            ["faults={crash_points: {holds: [{at: response}]}}"],
            "faults.crash_points holds and explore count the points of one call at a time: they need "
            "workload.concurrency 1 and one pod the harness runs (no replicas, balancer or Kubernetes "
            "target)",
        ),
        (
            ["workload.concurrency=1", "faults.crash_points={holds: [{at: response}]}"],
            "faults.crash_points kills the pod itself, at its points; it does not mix with faults.kill, "
            "pause, rollout or stream",
        ),
        (
            ["workload.concurrency=1", "faults={crash_points: {explore: {only: ['db_commit#1']}}}"],
            "a db_commit point needs services.postgres (the harness holds its statements)",
        ),
        (
            [
                "workload.concurrency=1",
                "faults={crash_points: {order: {at: 'db_statement#1', order: [2, 1]}}}",
            ],
            "faults.crash_points.order holds attempts that run side by side: give workload.concurrency 2 or "
            "more, or a stall stream fault that sends a retry beside its original",
        ),
        (
            ["workload.concurrency=1", "faults={crash_points: {holds: [{at: 'request/downstream#1'}]}}"],
            "a downstream point needs audit.effects.sink or services.downstream (which hold the reply "
            "of a call they recorded)",
        ),
        (
            ["target.replicas=2", "faults.kill.power_loss=true"],
            "faults.kill.power_loss rolls back the data directory of one pod the harness runs and traces: it "
            "needs target.replicas 1, a process or Docker runtime and signal SIGKILL",
        ),
        (
            ["faults.kill.signal=SIGTERM", "faults.kill.power_loss=true"],
            "faults.kill.power_loss rolls back the data directory of one pod the harness runs and traces: it "
            "needs target.replicas 1, a process or Docker runtime and signal SIGKILL",
        ),
        (
            ["target.env.API='{downstream_url}/v1'"],
            "{downstream_url} is used but services.downstream is not set",
        ),
        (
            ["target.env.SSL_CERT_FILE='{downstream_ca}'"],
            "{downstream_ca} is used but services.downstream is not set",
        ),
        (
            ["audit.effects={downstream: {}}"],
            "audit.effects.downstream counts the calls services.downstream records; set services.downstream "
            "(its upstream: the API the target calls)",
        ),
    ],
)
def test_a_rule_across_sections_is_one_line_at_the_top_level(
    scenario_data: dict[str, Any], overrides: list[str], expected: str
) -> None:
    assert error_of(scenario_data, *overrides) == f"s.yaml: (top level): {expected}"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["services.balancer={}"],
            "services.balancer goes in front of HTTP replicas the harness runs; not with a stdio or "
            "Kubernetes target",
        ),
        (
            ["target.replicas=2"],
            "target.replicas runs pods on this machine; with target.kubernetes the cluster's Deployment "
            "has the replicas (its Service spreads the calls)",
        ),
        (
            ["faults.kill.signal=SIGTERM"],
            "faults.kill.signal and victim are for pods the harness runs; with target.kubernetes use "
            "target.kubernetes.grace_period_s (the victim is a seeded Ready pod)",
        ),
        (
            ["faults.kill.victim=all"],
            "faults.kill.signal and victim are for pods the harness runs; with target.kubernetes use "
            "target.kubernetes.grace_period_s (the victim is a seeded Ready pod)",
        ),
        (
            ["faults.rollout={}"],
            "faults.rollout is for pods the harness runs; with target.kubernetes roll out with kubectl "
            "rollout restart, outside the run",
        ),
    ],
)
def test_what_pods_in_a_cluster_cannot_have(overrides: list[str], expected: str) -> None:
    assert error_of(KUBE, *overrides) == f"s.yaml: (top level): {expected}"


def test_the_first_rule_broken_is_the_error(scenario_data: dict[str, Any]) -> None:
    # Breaks victims_exist, then transport_fits: the order of RULES decides, as it always has.
    assert [rule.__name__ for rule in RULES] == [
        "services_used",
        "victims_exist",
        "balancer_fits",
        "kubernetes_fits",
        "url_fits",
        "power_loss_fits",
        "transport_fits",
        "crash_points_fit",
    ]
    both = ["target.transport=stdio", "client.key_in=header", "faults.kill.victim=1"]
    assert "faults.kill.victim: there is no replica 1" in error_of(scenario_data, *both)
    assert "client.key_in: header needs an HTTP target" in error_of(scenario_data, *both[:2])


def test_a_downstream_hold_point_is_held_by_the_downstream_proxy(scenario_data: dict[str, Any]) -> None:
    at = "faults={crash_points: {holds: [{at: 'request/downstream#1'}]}}"
    scenario = parse_scenario(
        copy.deepcopy(scenario_data),
        overrides=[
            "workload.concurrency=1",
            at,
            "services.downstream={}",
            "target.env.API='{downstream_url}'",
        ],
    )
    assert scenario.services.downstream is not None
    assert scenario.services.downstream.upstream is None  # the proxy answers as a provider's sandbox


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["services.downstream={upstream: 'ftp://x'}"],
            "services.downstream.upstream: must be an http:// or https:// URL (where the API's calls go) "
            "(got 'ftp://x')",
        ),
        (
            ["services.downstream={}", "audit.effects={downstream: {methods: ['PO ST']}}"],
            "audit.effects.downstream.methods: 'PO ST' is not an HTTP method (POST, PUT, ...)",
        ),
        (
            ["services.downstream={}", "audit.effects={downstream: {path: '(unclosed'}}"],
            "audit.effects.downstream.path: not a regular expression: missing ), unterminated subpattern at "
            "position 0 (got '(unclosed')",
        ),
    ],
)
def test_a_bad_downstream_section_names_its_field(
    scenario_data: dict[str, Any], overrides: list[str], expected: str
) -> None:
    assert error_of(scenario_data, *overrides) == f"s.yaml: {expected}"
