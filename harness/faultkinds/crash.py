"""``crash``: a pod that died with no kill (the auditor's label, never written: a ``pod_exited`` that no
fault of the harness caused)."""

from __future__ import annotations

from harness.faultkinds.base import POD_FAULT, Kind, Source
from harness.history import FaultKind

KIND = Kind(
    kind=FaultKind.CRASH,
    rank=2,
    means="The pod died by itself, with no kill (the auditor's label: a pod exit no fault caused).",
    source=Source.AUDIT,
    group=POD_FAULT,
    takes_pod_down=True,
    replayed_by_kill=True,
    colour="#e67e22",
)
