"""``sever_response``: the request is forwarded; the client's connection is cut after N bytes or N SSE
events of the response, once the server has sent all of it (the article's window between commit and
delivery) or as soon as they are relayed (``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Exchange, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    cut = (
        f"cut after {rule.after_events} events"
        if rule.after_events is not None
        else f"cut after {rule.after_bytes} bytes"
    )
    return cut + (" once the server finished" if rule.wait_for_server else " at once")


async def strike(rule: StreamFault, exchange: Exchange) -> bool:
    exchange.forward()
    if rule.wait_for_server:
        raw, complete = await exchange.read_whole()
        offset = exchange.cut_offset(raw, rule.after_bytes, rule.after_events)
        exchange.record(relayed=offset, of=len(raw), server_done=complete)
        exchange.send(raw[:offset])
        return False
    # Cut while the server may still be working: relay up to the cut point, then close both
    # sides (returning False aborts the server's connection too: SSE handlers see a cancellation).
    relayed = 0
    while True:
        data = await exchange.read()
        if not data:
            exchange.record(relayed=relayed, server_done=False, server_closed=True)
            return False
        cut: int | None
        if rule.after_events is None:
            room = rule.after_bytes - relayed
            cut = room if len(data) >= room else None
        else:
            cut = exchange.events_cut(data, rule.after_events)
        if cut is not None:
            exchange.record(relayed=relayed + cut, server_done=False)
            exchange.send(data[:cut])
            return False
        exchange.send(data)
        relayed += len(data)


KIND = Kind(
    kind=FaultKind.SEVER_RESPONSE,
    rank=4,
    means="The fault proxy cut the client's connection after part of the response (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
    strike_exchange=strike,
)
