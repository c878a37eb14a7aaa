"""The fault proxy's pure parts: which exchange a rule hits, and where a cut falls."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.errors import ScenarioError
from harness.faults.proxy import Exchange, choose_fault, cut_offset
from harness.scenario import StreamFault, parse_scenario


def rule(**kw: Any) -> StreamFault:
    return StreamFault.model_validate(kw)


def ex(intent: int | None, attempt: int | None = 1, tool: str = "create_invoice") -> Exchange:
    return Exchange(method="tools/call", tool=tool, request_id=1, key="k", intent=intent, attempt=attempt)


def test_explicit_plan_hits_exactly_its_attempt() -> None:
    rules = [rule(fault="stall", intent=17, attempt=1)]
    assert choose_fault(rules, 1, ex(17, 1)) == 0
    assert choose_fault(rules, 1, ex(17, 2)) is None
    assert choose_fault(rules, 1, ex(16, 1)) is None


def test_probability_is_a_seeded_draw_per_attempt() -> None:
    rules = [rule(fault="sever_response", tool="create_invoice", probability=0.05)]

    def hits(seed: int) -> list[int]:
        return [i for i in range(20_000) if choose_fault(rules, seed, ex(i)) is not None]

    assert hits(7) == hits(7)  # same seed, same attempts
    assert hits(7) != hits(8)
    assert 800 <= len(hits(7)) <= 1200  # 5% of 20,000, far inside any plausible spread


def test_filters_and_first_match_wins() -> None:
    rules = [rule(fault="delay", tool="other", probability=1.0), rule(fault="sever_request", probability=1.0)]
    assert choose_fault(rules, 1, ex(0)) == 1
    assert choose_fault(rules, 1, ex(0, tool="other")) == 0
    listing = Exchange(method="tools/list", tool=None, request_id=1, key=None, intent=None, attempt=None)
    assert choose_fault(rules, 1, listing) is None  # rules default to tools/call


def test_rule_needs_a_target() -> None:
    data: dict[str, Any] = {
        "name": "x",
        "target": {"command": ["x"]},
        "workload": {"intents": 1, "tool": "t", "arguments": {"memo": "{marker}"}},
        "faults": {"stream": [{"fault": "stall"}]},
        "audit": {"effects": {"sql": {"url": "sqlite:///x", "query": "q"}}},
    }
    with pytest.raises(ScenarioError, match="needs a probability, or an intent/attempt"):
        parse_scenario(data)


def sse_response(events: int) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    body = b""
    for n in range(events):
        event = b"event: message\r\ndata: " + orjson.dumps({"n": n}) + b"\r\n\r\n"
        body += f"{len(event):x}\r\n".encode() + event + b"\r\n"
    return head + body + b"0\r\n\r\n"


def test_cut_after_events_falls_just_after_the_event() -> None:
    raw = sse_response(3)
    for n in range(4):
        offset = cut_offset(raw, 0, n)
        relayed = raw[:offset]
        assert relayed.count(b"data: ") == n
        if 0 < n < 3:
            assert relayed.endswith(b"}\r\n\r\n")


def test_cut_after_bytes() -> None:
    raw = sse_response(1)
    assert cut_offset(raw, 10, None) == 10
    assert cut_offset(raw, 10_000, None) == len(raw)
