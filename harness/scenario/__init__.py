"""The scenario: everything one run needs, as a typed and validated model.

A scenario is a YAML file (see ``scenarios/``). It is validated here once, with
errors that name the field and the fix, so that no other module ever sees an
untyped dict. The model knows nothing of processes, sockets or files beyond
loading itself: the runner turns it into pods, a driver and an injector.

One module per section (``target``, ``workload``, ``client``, ``faults`` and
its ``crash_points``, ``effects`` for ``audit``, ``services``, ``gate``), their shared pieces
(``section``, ``placeholders``, ``serving`` (what each service of the harness provides: its
section, its placeholders), ``headers``, ``window``, ``sql_guard``), the
whole (``model``), the rules across sections (``rules``), and loading
(``loading``, ``overrides``, ``bounded_yaml``). Other modules import from here.
"""

from harness.scenario.client import Backoff, ClientPolicy
from harness.scenario.crash_points import CrashExplore, CrashHold, CrashPoints
from harness.scenario.effects import (
    Audit,
    CommandEffects,
    DownstreamEffects,
    Effects,
    FilesEffects,
    JsonlEffects,
    SinkEffects,
    SqlEffects,
    ToolEffects,
)
from harness.scenario.faults import (
    Faults,
    HoldDispatch,
    KillFaults,
    PauseFaults,
    RolloutFaults,
    StreamFault,
)
from harness.scenario.gate import Gate
from harness.scenario.headers import RESERVED_HEADERS
from harness.scenario.loading import load_scenario, parse_scenario
from harness.scenario.model import Scenario
from harness.scenario.overrides import apply_override
from harness.scenario.placeholders import AUDIT_PLACEHOLDERS, READ_TOOL_PLACEHOLDERS, TARGET_PLACEHOLDERS
from harness.scenario.services import BalancerService, DownstreamService, PostgresService, Services
from harness.scenario.serving import (
    BALANCER_FACTS,
    DOWNSTREAM_FACTS,
    POSTGRES_FACTS,
    SERVICES,
    SINK_FACTS,
    ServiceFacts,
)
from harness.scenario.sql_guard import single_select
from harness.scenario.target import KubernetesTarget, TargetSpec
from harness.scenario.window import Window
from harness.scenario.workload import WorkloadSpec

__all__ = [
    "AUDIT_PLACEHOLDERS",
    "BALANCER_FACTS",
    "DOWNSTREAM_FACTS",
    "POSTGRES_FACTS",
    "READ_TOOL_PLACEHOLDERS",
    "RESERVED_HEADERS",
    "SERVICES",
    "SINK_FACTS",
    "TARGET_PLACEHOLDERS",
    "Audit",
    "Backoff",
    "BalancerService",
    "ClientPolicy",
    "CommandEffects",
    "CrashExplore",
    "CrashHold",
    "CrashPoints",
    "DownstreamEffects",
    "DownstreamService",
    "Effects",
    "Faults",
    "FilesEffects",
    "Gate",
    "HoldDispatch",
    "JsonlEffects",
    "KillFaults",
    "KubernetesTarget",
    "PauseFaults",
    "PostgresService",
    "RolloutFaults",
    "Scenario",
    "ServiceFacts",
    "Services",
    "SinkEffects",
    "SqlEffects",
    "StreamFault",
    "TargetSpec",
    "ToolEffects",
    "Window",
    "WorkloadSpec",
    "apply_override",
    "load_scenario",
    "parse_scenario",
    "single_select",
]
