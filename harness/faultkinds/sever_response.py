"""``sever_response``: the request is forwarded; the client's connection is cut after N bytes or N SSE
events of the response, once the server has sent all of it (the article's window between commit and
delivery) or as soon as they are relayed (``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    cut = (
        f"cut after {rule.after_events} events"
        if rule.after_events is not None
        else f"cut after {rule.after_bytes} bytes"
    )
    return cut + (" once the server finished" if rule.wait_for_server else " at once")


KIND = Kind(
    kind=FaultKind.SEVER_RESPONSE,
    rank=4,
    means="The fault proxy cut the client's connection after part of the response (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
)
