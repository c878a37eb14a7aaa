"""``target.kubernetes``: what it accepts, what it refuses (one line each), and that it reloads."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ScenarioError
from harness.scenario import load_scenario, parse_scenario

KUBE: dict[str, Any] = {
    "name": "kube",
    "target": {"kubernetes": {"selector": "app=invoices", "url": "http://invoices.shop.svc:8080/mcp"}},
    "workload": {"intents": 3, "tool": "create_invoice", "arguments": {"memo": "{marker}"}},
    "faults": {"kill": {"count": 1}},
    "audit": {"effects": {"tool": {"tool": "count_invoices"}}},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(KUBE)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="s.yaml")
    assert "\n" not in info.value.message
    return info.value.message


def test_defaults() -> None:
    target = parse_scenario(copy.deepcopy(KUBE)).target
    assert target.runtime == "kubernetes"
    assert target.kubernetes is not None
    kube = target.kubernetes
    assert (kube.namespace, kube.kill, kube.grace_period_s, kube.context, kube.kubeconfig) == (
        "default",
        "api",
        0,
        None,
        None,
    )


def test_the_scenario_as_run_loads_again(tmp_path: Path) -> None:
    """The run directory's copy holds every default; none of them may count as "set"."""
    scenario = parse_scenario(with_("target.kubernetes.grace_period_s", None))
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario.dump_yaml())
    assert load_scenario(path) == scenario
    assert yaml.safe_load(path.read_text())["target"]["kubernetes"]["grace_period_s"] is None


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("target.image", "x:1", "target.image does not go with target.kubernetes"),
        ("target.env", {"A": "1"}, "target.env does not go with target.kubernetes"),
        ("target.path", "/other", "target.path does not go with target.kubernetes"),
        ("target.transport", "stdio", "target.kubernetes needs transport: http"),
        ("target.kubernetes.namespace", "Shop_1", "target.kubernetes.namespace: String should match"),
        ("target.kubernetes.selector", "app=a\nb=c", "must be one line of labels"),
        ("target.kubernetes.url", "http://svc/mcp", "must be http://HOST:PORT/PATH"),
        ("target.kubernetes.url", "https://svc:80/mcp", "must be http://HOST:PORT/PATH"),
        ("target.kubernetes.grace_period_s", -1, "greater than or equal to 0"),
        ("target.kubernetes.colour", "red", "target.kubernetes.colour: unknown field"),
        (
            "faults.stream",
            [{"fault": "sever_response", "probability": 0.1}],
            "faults.stream is not supported",
        ),
        ("audit.effects", {"sink": {}}, "audit.effects.sink and services.downstream listen on the harness's"),
        (
            "services",
            {"downstream": {}},
            "audit.effects.sink and services.downstream listen on the harness's",
        ),
    ],
)
def test_refused_in_one_line(path: str, value: Any, expected: str) -> None:
    assert expected in error_of(with_(path, value))
