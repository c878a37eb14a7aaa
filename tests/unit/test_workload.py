"""Seeded intents: the same seed gives the same intents; markers and keys find their effects."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.scenario import parse_scenario
from harness.workload import INTENT_SHAPE, Workload, intent_in


def workload(data: dict[str, Any], seed: int | None = None, namespace: str = "ns") -> Workload:
    overrides = [f"seed={seed}"] if seed is not None else []
    return Workload(parse_scenario(data, overrides=overrides), namespace)


def snapshot(w: Workload) -> list[tuple[str, str, dict[str, Any]]]:
    return [(i.marker, i.key, w.arguments(i)) for i in w]


def test_same_seed_same_intents(scenario_data: dict[str, Any]) -> None:
    assert snapshot(workload(scenario_data)) == snapshot(workload(scenario_data))


def test_other_seed_other_values(scenario_data: dict[str, Any]) -> None:
    a = [args["amount_cents"] for _, _, args in snapshot(workload(scenario_data, seed=1))]
    b = [args["amount_cents"] for _, _, args in snapshot(workload(scenario_data, seed=2))]
    assert a != b


def test_markers_and_keys_are_unique_and_in_the_payload(scenario_data: dict[str, Any]) -> None:
    rows = snapshot(workload(scenario_data))
    assert len(rows) == 100
    assert len({m for m, _, _ in rows}) == 100
    assert len({k for _, k, _ in rows}) == 100
    for marker, key, args in rows:
        assert args["memo"] == marker
        assert args["idempotency_key"] == key
        assert 100 <= args["amount_cents"] <= 999
        assert args["currency"] in ("EUR", "USD", "TRY")
        assert 1 <= args["lines"][0]["qty"] <= 3


@given(namespace=st.from_regex(r"[A-Za-z0-9]{1,12}", fullmatch=True))
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_each_marker_and_key_names_its_intent_in_any_bytes(
    scenario_data: dict[str, Any], namespace: str
) -> None:
    """What a database, sink or downstream point carries is searched for the intent it serves: its
    marker, or its key alone (a server's key lookup); each found whole in the bytes around it."""
    for intent in workload(scenario_data, namespace=namespace):
        payload = f"\x00{intent.key}\x00 '{intent.marker}',".encode()
        found = INTENT_SHAPE.findall(payload)
        assert found == [intent.key.encode(), intent.marker.encode()]
        assert {intent_in(token) for token in found} == {intent.index}


def test_namespace_separates_runs(scenario_data: dict[str, Any]) -> None:
    a = snapshot(workload(scenario_data, namespace="run1"))
    b = snapshot(workload(scenario_data, namespace="run2"))
    assert {m for m, _, _ in a}.isdisjoint({m for m, _, _ in b})
    # The business payload apart from marker and key is the same: only the run differs.
    assert [x[2]["amount_cents"] for x in a] == [x[2]["amount_cents"] for x in b]


def test_fresh_key_changes_only_the_key(scenario_data: dict[str, Any]) -> None:
    w = workload(scenario_data)
    intent = next(iter(w))
    original, fresh = w.arguments(intent), w.arguments(intent, "other-key")
    assert fresh["idempotency_key"] == "other-key"
    assert {k: v for k, v in fresh.items() if k != "idempotency_key"} == {
        k: v for k, v in original.items() if k != "idempotency_key"
    }


def test_literal_braces_survive(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["arguments"] = {"note": "{{not a placeholder}} {marker}", "n": 3, "flag": True}
    w = workload(scenario_data, namespace="ns")
    assert w.arguments(next(iter(w))) == {"note": "{not a placeholder} ns-m0000000", "n": 3, "flag": True}


# The fixture is only read here, so sharing it between examples is safe.
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32))
def test_any_seed_is_reproducible(scenario_data: dict[str, Any], seed: int) -> None:
    data = {**scenario_data, "workload": {**scenario_data["workload"], "intents": 5}}
    assert snapshot(workload(data, seed=seed)) == snapshot(workload(data, seed=seed))


def test_a_question_is_answered_from_the_scenario(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["answers"] = {"customer": {"customer_id": "acme-inc"}}
    w = workload(scenario_data)
    form = {"method": "elicitation/create", "params": {"mode": "form", "message": "which?"}}
    question = {"resultType": "input_required", "inputRequests": {"customer": form}, "requestState": "s1"}
    assert w.respond(question) == {
        "inputResponses": {"customer": {"action": "accept", "content": {"customer_id": "acme-inc"}}},
        "requestState": "s1",
    }
    assert w.respond({"requestState": "s2"}) == {"requestState": "s2"}  # state only: echo it
    other = {"inputRequests": {"budget": form}}
    assert w.respond(other) == "no answer to the server's question 'budget' in workload.answers"
    sampling = {"inputRequests": {"customer": {"method": "sampling/createMessage"}}}
    assert "only elicitation forms are answered" in str(w.respond(sampling))
