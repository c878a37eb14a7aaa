"""``sever_request``: the client's connection dropped before anything reached the server
(``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Exchange, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    return "drop the request"


async def strike(rule: StreamFault, exchange: Exchange) -> bool:
    exchange.record()
    return False


KIND = Kind(
    kind=FaultKind.SEVER_REQUEST,
    rank=8,
    means="The fault proxy dropped the client's connection; nothing reached the server (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
    strike_exchange=strike,
)
