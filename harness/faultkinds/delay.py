"""``delay``: latency before the request or the response (``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Exchange, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    return f"{rule.delay_s:g}s before the {rule.direction}"


async def strike(rule: StreamFault, exchange: Exchange) -> bool:
    exchange.record(delay_s=rule.delay_s, direction=rule.direction)
    if rule.direction == "request":
        await exchange.sleep(rule.delay_s)
        exchange.forward()
        return await exchange.relay()
    exchange.forward()
    return await exchange.relay(delay_s=rule.delay_s)


KIND = Kind(
    kind=FaultKind.DELAY,
    rank=9,
    means="The fault proxy held the request or the response for ``delay_s`` (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
    strike_exchange=strike,
)
