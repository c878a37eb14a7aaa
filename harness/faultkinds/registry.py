"""The fault kinds, found as the modules of this package, in blame order; and the sets read from them.

Nothing keeps a hand-written list: every module here but ``base`` and this one declares one
:class:`~harness.faultkinds.base.Kind` as ``KIND``, named after its word (``kill.py`` for ``kill``),
and :data:`KINDS` is them sorted by rank. ``tests/unit/test_fault_kinds.py`` checks that every word of
:class:`~harness.history.FaultKind` has its module and each module every facet its source needs.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness import faultkinds
from harness.faultkinds.base import Kind, Source
from harness.history import FaultKind

NOT_KINDS = frozenset({"base", "registry"})
"""The package's modules that declare no kind."""


def _found() -> tuple[Kind, ...]:
    names = sorted(m.name for m in pkgutil.iter_modules(faultkinds.__path__) if m.name not in NOT_KINDS)
    kinds: list[Kind] = [importlib.import_module(f"{faultkinds.__name__}.{name}").KIND for name in names]
    return tuple(sorted(kinds, key=lambda k: k.rank))


KINDS = _found()
"""Every fault kind, in blame order (lowest rank first)."""
BY_KIND: dict[str, Kind] = {k.kind.value: k for k in KINDS}
"""A kind by its word."""
BLAME = tuple(k.kind for k in KINDS)
"""The blame order: a finding hit by several faults is blamed on the first of these present."""
SCHEDULED = tuple(k.kind for k in KINDS if k.source is Source.SCHEDULE)
"""The faults the injector plans, counts and strikes (the schedule's); the others come by rule,
from a service, or are the auditor's labels."""
POD_KINDS = frozenset(k.kind.value for k in KINDS if k.takes_pod_down)
"""Faults that take a pod down: a checkpoint read after its restart may clear them of a duplicate."""
ENDS_POD = frozenset(k.kind.value for k in KINDS if k.source is Source.SCHEDULE and k.heal is None)
"""Scheduled faults that end the pod (its supervisor restarts it): the fault, or after a graceful stop the
pod's exit, is its disruption."""
HEALED = frozenset(k.kind.value for k in KINDS if k.heal is not None)
"""Scheduled faults the injector heals (a pause: thawed): the pod keeps running, disrupted at the strike
and at the heal."""
REPLAYED_BY_KILLS = frozenset(k.kind.value for k in KINDS if k.replayed_by_kill)
"""Causes ``mcp-chaos replay`` makes again by a kill at the attempt's last point (harness/replay.py)."""
COLOURS = {k.kind.value: k.colour for k in KINDS if k.colour is not None}
"""report.html's timeline: the colour of each kind it draws, in blame order."""


def kind_of(kind: FaultKind | str) -> Kind:
    """The facts of one kind, by its word."""
    return BY_KIND[str(kind)]
