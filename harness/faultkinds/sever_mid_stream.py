"""``sever_mid_stream``: a ``sever_response`` cut before the server had finished (the auditor's label,
never written: the handler was still running when its client's stream broke)."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Kind, Source
from harness.history import FaultKind

KIND = Kind(
    kind=FaultKind.SEVER_MID_STREAM,
    rank=5,
    means="A ``sever_response`` cut before the server had finished (the auditor's label: the handler "
    "still ran).",
    source=Source.STREAM,  # a rule's sever_response, read by the auditor: no rule names it
    group=IN_FLIGHT,
)
