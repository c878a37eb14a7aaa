"""``balancer_retry``: the load balancer (``services.balancer``) sent an attempt's request to a second
replica; recorded from nginx's log when it stops, never planned."""

from __future__ import annotations

from harness.faultkinds.base import IN_FLIGHT, Fix, Kind, Source
from harness.history import FaultKind, Verdict

KIND = Kind(
    kind=FaultKind.BALANCER_RETRY,
    rank=0,
    means="The load balancer sent the attempt's request to a second replica (``services.balancer``).",
    source=Source.SERVICE,
    group=IN_FLIGHT,
    fixes={
        Verdict.DUPLICATE: Fix(
            "the load balancer sent the request to a second replica, which did not know the key",
            "keep key records where every replica reads them (the store, in the effect's transaction), "
            "and do not let the balancer re-send non-idempotent requests",
        ),
    },
)
