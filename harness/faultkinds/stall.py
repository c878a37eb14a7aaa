"""``stall``: the request (or the response) held until the client gives up and retries, or ``hold_s``;
a request held is delivered late, so the original and the retry run on the server at the same time
(``faults.stream``, the fault proxy)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Kind, Source
from harness.history import FaultKind
from harness.scenario import StreamFault


def rule_action(rule: StreamFault) -> str:
    return f"hold the {rule.hold}" + (f" {rule.hold_s:g}s" if rule.hold_s else "")


KIND = Kind(
    kind=FaultKind.STALL,
    rank=6,
    means="The fault proxy held the request or the response past the client's timeout (``faults.stream``).",
    source=Source.STREAM,
    group=IN_FLIGHT,
    rule_action=rule_action,
)
