"""A scenario's fault plan in words, as ``validate`` prints it and a run announces it."""

from __future__ import annotations

from typing import Any

from harness.faults.describe import announcement, describe_plan
from harness.scenario import parse_scenario


def test_the_first_ten_faults_are_listed_and_the_rest_counted(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"] = {"kill": {"count": 12}}
    workload, faults = describe_plan(parse_scenario(scenario_data))
    assert workload == "  100 intents of create_invoice, concurrency 4"
    assert faults.startswith("  12 pod faults planned: kill after intent ")
    assert faults.count("kill after intent") == 10
    assert faults.endswith(", ... (2 more)")


def test_each_stream_rule_says_what_it_hits_and_does(scenario_data: dict[str, Any]) -> None:
    scenario_data["target"]["replicas"] = 2
    scenario_data["faults"] = {
        "stream": [
            {"fault": "sever_response", "tool": "create_invoice", "probability": 0.05},
            {"fault": "stall", "intent": 3, "hold": "response", "hold_s": 2},
        ]
    }
    scenario = parse_scenario(scenario_data)
    assert describe_plan(scenario)[1:] == [
        "  2 replicas (round_robin), 0 pod faults planned",
        "  stream rule 0: sever_response on tools/call create_invoice (p=0.05): "
        "cut after 0 bytes once the server finished",
        "  stream rule 1: stall on tools/call (intent 3, always): hold the response 2s",
    ]
    assert announcement(scenario, "r1") == (
        "run r1: 100 intents, concurrency 4, 2 replicas (round_robin), 0 pod faults planned, "
        "stream faults by rule"
    )


def test_crash_points_say_where_each_intent_is_held_or_how_they_are_explored(
    scenario_data: dict[str, Any],
) -> None:
    scenario_data["workload"]["concurrency"] = 1
    scenario_data["faults"] = {"crash_points": {"holds": [{"at": "db_commit#1/response", "intents": [1, 2]}]}}
    scenario_data["services"] = {"postgres": {}}
    scenario = parse_scenario(scenario_data)
    assert describe_plan(scenario)[1:] == [
        "  0 pod faults planned",
        "  crash points: held and the pod SIGKILLed there: intents 1, 2 at db_commit#1/response",
    ]
    assert announcement(scenario, "r1").endswith("0 pod faults planned, kills at crash points")
    scenario_data["faults"] = {"crash_points": {"explore": {"repeat": 2, "only": ["response"]}}}
    assert describe_plan(parse_scenario(scenario_data))[2] == (
        "  crash points, explored: a clean call, then each distinct crash state of the points it passes "
        "held and the pod SIGKILLed there in 2 tries, then the retries' own commits (within 120 s, only "
        "response)"
    )
