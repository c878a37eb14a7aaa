"""``stall``: the request (or the response) held until the client gives up and retries, or ``hold_s``;
a request held is delivered late, so the original and the retry run on the server at the same time
(``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Exchange, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    return f"hold the {rule.hold}" + (f" {rule.hold_s:g}s" if rule.hold_s else "")


async def strike(rule: StreamFault, exchange: Exchange) -> bool:
    hold_s = rule.hold_s if rule.hold_s is not None else exchange.default_hold_s
    exchange.record(hold=rule.hold, hold_s=hold_s)
    if rule.hold == "request":
        left = await exchange.client_left(hold_s)
        exchange.forward()  # delivered late: the retry may already be on the server
        if left:
            await exchange.read_whole()  # let the server finish; nobody is listening
            return False
        return await exchange.relay()
    exchange.forward()  # the server runs it; its answer is what waits
    raw, complete = await exchange.read_whole()
    if await exchange.client_left(hold_s) or not complete:
        return False
    exchange.send(raw)
    await exchange.drain()
    return True


KIND = Kind(
    kind=FaultKind.STALL,
    rank=6,
    means="The fault proxy held the request or the response past the client's timeout (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
    strike_exchange=strike,
)
