"""The history's events, typed: one frozen dataclass per line a run writes (issue #57).

Each class is one event type (``TYPE``) and its fields are the line's, beyond the ``seq``, ``t`` and
``type`` every line has: a writer builds one and hands it to :meth:`HistoryWriter.emit
<harness.history.HistoryWriter.emit>`, so mypy refuses a misspelt or missing field. A field with no
default is always written (``null`` included); a field defaulting to None is left out while it is
None. The driver's hot path writes its four events (``intent_started``, ``attempt_started``,
``attempt_ended``, ``intent_ended``) as keyword fields without building these (decision 0072): they
describe its lines all the same, and the tests check every line against the schema made from them
(:mod:`harness.history_schema`, ``harness/history.schema.json``).

Readers still read the lines as dicts, by key; these classes are the one place those keys are
defined. A pod fault and a stream fault are both ``fault`` lines, with fields of their own: two
classes, one type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypedDict

from harness.history import (
    ABSENT,
    SCHEMA_VERSION,
    Absent,
    CheckpointWhen,
    Detail,
    Event,
    EventType,
    FaultKind,
    IntentStatus,
    Outcome,
    RunStatus,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(Event):
    """The run began: what it is, and what a reader needs to read the rest."""

    TYPE: ClassVar[EventType] = EventType.RUN_STARTED
    run_id: str
    """The run directory's name."""
    scenario: str
    """The scenario's ``name``."""
    seed: int
    intents: int
    """Intents planned (``workload.intents``)."""
    concurrency: int
    runtime: str
    """How the target runs (``target.runtime``)."""
    namespace: str
    """The run's namespace: every marker is ``{namespace}-m{index:07d}``."""
    faults_planned: dict[str, int]
    """``{kind: count}`` of the counted pod faults the schedule planned."""
    started_at: str
    """The wall clock at the start, ISO 8601, seconds."""
    version: str
    """The harness's version."""
    keyed: bool
    """Whether each attempt of an intent carries the intent's key (``client.key_in``, ``key_reuse`` and
    the arguments' ``{key}``): what a duplicate's fix depends on."""
    kill_signal: str | None
    """``faults.kill.signal`` (null without kills): a SIGKILL is a crash that should break calls."""
    stream_rules: list[dict[str, Any]]
    """Each of ``faults.stream``'s rules as the audit needs it: ``{fault, intent, probability}``."""
    schema: int = SCHEMA_VERSION
    """The version of the history's format (``harness/history.schema.json``)."""
    epoch_s: float | None = None
    """The wall clock (Unix seconds) at t = 0, which turns the history's times into timestamps."""
    points_placed_after: bool | None = None
    """True when the attempts' observed points are not in their ``attempt_ended`` but in
    ``points_placed`` events at the history's end (the PostgreSQL relay's, placed after the run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentStarted(Event):
    """An intent's first attempt is about to be sent (the driver's hot path)."""

    TYPE: ClassVar[EventType] = EventType.INTENT_STARTED
    intent: int
    marker: str
    key: str
    """Its idempotency key (the first attempt's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptStarted(Event):
    """One attempt of an intent is sent (the driver's hot path)."""

    TYPE: ClassVar[EventType] = EventType.ATTEMPT_STARTED
    intent: int
    attempt: int
    id: int
    """Its JSON-RPC request id."""
    key: str | None
    """The key it carries (null when the workload sends none)."""
    pod: str | None = None
    """The replica it went to, when the target has several."""
    round: int | None = None
    """n >= 2 when the attempt answers the server's n-1-th ``input_required`` question (MRTR)."""
    trace_id: str | None = None
    """The traceparent it sent (``client.trace``): its trace."""
    span_id: str | None = None
    link: str | None = None
    """From attempt 2: the span id of the intent's first attempt."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptEnded(Event):
    """What the client saw of one attempt (the driver's hot path)."""

    TYPE: ClassVar[EventType] = EventType.ATTEMPT_ENDED
    intent: int
    attempt: int
    id: int
    outcome: Outcome
    detail: Detail | None = None
    status: int | None = None
    """The HTTP status."""
    form: str | None = None
    """How the answer came: ``json`` or ``sse``, or ``stdio``."""
    result: str | None = None
    """A digest of an ok's result."""
    code: str | int | None = None
    """A tool error's code (excerpt, at most ``CODE_LIMIT``), or a JSON-RPC error's number."""
    retryable: bool | None = None
    notifications: int | None = None
    """Progress notifications that came with it."""
    message: str | None = None
    """An error's text (excerpt, at most ``MESSAGE_LIMIT``)."""
    reply: str | None = None
    """An ok's text (excerpt, at most ``MESSAGE_LIMIT``)."""
    reads_as_failure: bool | None = None
    """True when an ok's text says the call failed (:func:`harness.replies.reads_as_failure`)."""
    resumed: bool | None = None
    """2025: the stream broke or closed before its answer, and coming back for it worked (or not)."""
    reconnections: int | None = None
    """How many times the client came back (GET with Last-Event-ID)."""
    points: list[list[Any]] | None = None
    """The crash points it reached: ``[name, label]``, or ``[name, label, "ambiguous"]``."""
    points_more: int | None = None
    """Points beyond those listed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentEnded(Event):
    """The client is done with an intent (the driver's hot path)."""

    TYPE: ClassVar[EventType] = EventType.INTENT_ENDED
    intent: int
    status: IntentStatus
    attempts: int
    reason: str | None = None
    """Why the client stopped answering the server's questions, or retrying: the run stopped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodStarted(Event):
    TYPE: ClassVar[EventType] = EventType.POD_STARTED
    pod: str
    pid: int
    """Its process (0 for a Kubernetes pod or a server at a URL)."""
    container: str | None = None
    """Docker: the container's id (12 digits)."""
    namespace: str | None = None
    """Kubernetes: the pod's namespace."""
    selector: str | None = None
    """Kubernetes: the label selector."""
    url: str | None = None
    """A server the harness does not start (``target.url``), passwords masked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodReady(Event):
    TYPE: ClassVar[EventType] = EventType.POD_READY
    pod: str
    pid: int
    after_s: float
    """Seconds from its start."""
    protocol: str | None
    """The protocol version it answered in."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodExited(Event):
    """The pod died during the run: killed or crashed."""

    TYPE: ClassVar[EventType] = EventType.POD_EXITED
    pod: str
    pid: int | None
    returncode: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodStopped(Event):
    """The harness stopped the pod at the end."""

    TYPE: ClassVar[EventType] = EventType.POD_STOPPED
    pod: str
    pid: int | None
    returncode: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResumed(Event):
    """The end of a pause fault."""

    TYPE: ClassVar[EventType] = EventType.POD_RESUMED
    pod: str
    pid: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGraceExpired(Event):
    """A pod stopped gracefully was still running after its grace period, and got SIGKILL."""

    TYPE: ClassVar[EventType] = EventType.POD_GRACE_EXPIRED
    pod: str
    pid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOpened(Event):
    """A 2025-protocol session (initialize + notifications/initialized), first or after a loss."""

    TYPE: ClassVar[EventType] = EventType.SESSION_OPENED
    session: str | None
    """A digest of its id, or null (stdio)."""
    version: str
    client: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionLost(Event):
    """The server no longer knew the session (404, or 400 naming it), or a stdio channel closed."""

    TYPE: ClassVar[EventType] = EventType.SESSION_LOST
    session: str | None
    status: int | None
    client: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodFault(Event):
    """A pod fault struck (``kill``, ``rollout``, ``pause``): one line per pod it hit."""

    TYPE: ClassVar[EventType] = EventType.FAULT
    fault: FaultKind
    pod: str
    pid: int
    trigger: str
    """What fired it, in words."""
    counted: bool | None = None
    """Whether it counts as a planned fault (a crash point's kill does not)."""
    signal: str | None = None
    """A kill's signal other than SIGKILL: a graceful stop."""
    grace_s: float | None = None
    power_loss: bool | None = None
    """A kill planned as a power loss: the data directory rolls back to what was durable."""
    step: int | None = None
    """A rollout's step (0 .. replicas-1)."""
    duration_s: float | None = None
    """A pause's length."""
    point: str | None = None
    """A kill at a crash point: the point."""
    in_flight: int | None = None
    """Attempts in flight as it struck."""
    dispatched: int | None = None
    """Intents dispatched by then."""
    held_s: float | None = None
    """How long it held dispatching before it struck."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFault(Event):
    """A stream fault the proxy made on one exchange (``fault``'s other form)."""

    TYPE: ClassVar[EventType] = EventType.FAULT
    fault: str
    """``sever_request``, ``sever_response``, ``stall`` or ``delay``."""
    rule: int
    """Its rule's index in ``faults.streams``."""
    id: int | str | None
    intent: int | None
    attempt: int | None
    tool: str | None
    key: str | None
    delay_s: float | None = None
    direction: str | None = None
    relayed: int | None = None
    """Bytes of the response relayed before the cut."""
    of: int | None = None
    """The whole response's bytes, when it had all come."""
    server_done: bool | None = None
    server_closed: bool | None = None
    hold: str | None = None
    """A stall's hold."""
    hold_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultMissed(Event):
    """A planned fault (or hold) the run ended without making."""

    TYPE: ClassVar[EventType] = EventType.FAULT_MISSED
    fault: str
    trigger: str
    counted: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultUnfinished(Event):
    """A kill begun that did not finish: whether the pod died is not known; not injected."""

    TYPE: ClassVar[EventType] = EventType.FAULT_UNFINISHED
    fault: FaultKind
    pod: str
    pid: int
    trigger: str
    fault_seq: int
    """Its ``fault`` event."""
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectsCollected(Event):
    """The final read of a live effect source."""

    TYPE: ClassVar[EventType] = EventType.EFFECTS_COLLECTED
    markers: int | None
    """How many markers the read found (its effects are in ``effects.json``), or null when it failed."""
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectsCheckpoint(Event):
    """A checkpoint read of the effect source (:mod:`harness.run.checkpoints`)."""

    TYPE: ClassVar[EventType] = EventType.EFFECTS_CHECKPOINT
    when: CheckpointWhen
    pod: str
    fault_seq: int | None
    """The fault a before_fault read precedes (the next event), or the pod_ready an after_restart
    read follows."""
    read_at: float
    took_s: float
    intent: int | None = None
    """An ``at_answer`` read: the intent whose attempt was just answered (a race's)."""
    attempt: int | None = None
    """An ``at_answer`` read: that attempt."""
    seen: str | None = None
    """The intents with an effect, as :class:`harness.history.SeenEffects` encodes them (base64)."""
    counts: dict[str, int] | None = None
    """Intents with two or more effects."""
    foreign: int | None = None
    """Effects under markers not this run's."""
    error: str | None = None
    """Why the read failed (then no ``seen``)."""
    rereads: int | None = None
    """How often it was read again because it contradicted the run."""
    unstable: bool | None = None
    """No two reads agreed."""
    torn: bool | None = None
    """Lines of the store did not parse."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceStarted(Event):
    """A service the harness runs for the target."""

    TYPE: ClassVar[EventType] = EventType.SERVICE_STARTED
    service: str
    """``postgres``, ``downstream``, ``nginx`` or the file tracer."""
    pid: int | None = None
    url: str | None = None
    port: int | None = None
    traced: bool | None = None
    """The file tracer: whether it traces."""
    reason: str | None = None
    """The file tracer: why it does not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceStopped(Event):
    TYPE: ClassVar[EventType] = EventType.SERVICE_STOPPED
    service: str
    pid: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BalancerRetry(Event):
    """The load balancer sent this attempt's request to more than one replica (read from its log)."""

    TYPE: ClassVar[EventType] = EventType.BALANCER_RETRY
    intent: int
    attempt: int
    id: int
    upstreams: list[str]
    statuses: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashPoint(Event):
    """An attempt passed a hold point (``faults.crash_points``); ``held``: the pod was killed there."""

    TYPE: ClassVar[EventType] = EventType.CRASH_POINT
    intent: int
    attempt: int
    point: str
    """``db_commit#2``: see :mod:`harness.crashpoints.points`."""
    held: bool
    path: str | None = None
    """The intent's planned holds."""
    race: str | None = None
    """``races``: the ordering the intent tries."""
    statements: list[str] | None = None
    wrote: str | None = None
    """A commit's: ``yes``, ``no`` or ``unknown``."""
    autocommit: bool | None = None
    label: str | None = None
    nth: int | None = None
    key: str | Literal[Absent.ABSENT] | None = ABSENT
    """A downstream call's key (null when it carried none; absent at other points)."""
    replayed: bool | None = None
    """A downstream call the upstream answered as a replay."""
    paths: list[str] | None = None
    """A file operation's paths."""
    answer: str | None = None
    """What came that was no answer to the tool (then never held)."""
    overlap: bool | None = None
    """Reached while another attempt's window was open on the same connection."""
    released: str | None = None
    """A hold released without a kill: how."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashPlan(Event):
    """An exploration's plan as it grew; or, for ``races``, each ordering tried."""

    TYPE: ClassVar[EventType] = EventType.CRASH_PLAN
    planned: list[dict[str, Any]] | None = None
    """Each path: ``{path, labels, [same]}``."""
    points: int | None = None
    """How many crash points the clean call passed."""
    races: list[dict[str, Any]] | None = None
    """Each ordering tried: intent, ordering, held, at, label, made, why, meanwhile (and partner)."""
    orderings: list[str] | None = None
    clean_intent: int | None = None
    ran_out: bool | None = None
    """The budget was spent with tries left."""
    second: str | None = None
    """``call`` for a race of two calls (each ordering two intents, ``partner`` the second's); else none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodUnavailable(Event):
    """A pod back from a fault answered no call for ``bound_s`` while calls were made, or never came
    back (``came_back: false``): the run stops."""

    TYPE: ClassVar[EventType] = EventType.POD_UNAVAILABLE
    pod: str
    ready_seq: int | None
    """Its last ``pod_ready`` (or ``pod_started``)."""
    for_s: float
    failed: int
    """Attempts that failed meanwhile."""
    locks: list[str]
    """Lock-like files in the data directory since the last answer before the fault."""
    message: str
    """The pod log's last lines."""
    answered: int | None = None
    bound_s: float | None = None
    came_back: bool | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRefreshed(Event):
    """OAuth: a token replaced another; the refused request was sent again (no attempt of its own)."""

    TYPE: ClassVar[EventType] = EventType.TOKEN_REFRESHED
    why: str
    """``expiring``, ``refused`` or ``step_up``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataRolledBack(Event):
    """A crash planned as a power loss: the data directory rolled back to what was durable."""

    TYPE: ClassVar[EventType] = EventType.DATA_ROLLED_BACK
    changed: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class PointLate(Event):
    """A point an attempt reached that was told after its ``attempt_ended`` was written: the PostgreSQL
    relay reads a commit's reply after the pod that sent it was killed (the cluster makes it anyway), by
    when the client has seen the break."""

    TYPE: ClassVar[EventType] = EventType.POINT_LATE
    intent: int
    attempt: int
    point: str
    """``db_commit#1``, as ``attempt_ended`` names its points."""
    label: str | None
    """What it commits: ``INSERT invoices``."""


class _Placed(TypedDict):
    intent: int
    attempt: int
    points: list[list[Any]]
    """``[name, label]``, or ``[name, label, "ambiguous"]``; the first and the last of a longer call."""


class PlacedAttempt(_Placed, total=False):
    """One attempt's points in a ``points_placed`` event, as its ``attempt_ended`` would have listed them
    (``total=False`` for the one key that may be left out: ``NotRequired`` is not seen where annotations
    are strings)."""

    points_more: int
    """Points beyond those listed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PointsPlaced(Event):
    """Observed points placed in their attempts after the run (``run_started``'s ``points_placed_after``):
    the PostgreSQL relay's reports, spooled during the run, against the attempts' windows in this history
    (:mod:`harness.crashpoints.placement`). One event for many attempts: a run of a million calls adds a
    few thousand lines, not a million."""

    TYPE: ClassVar[EventType] = EventType.POINTS_PLACED
    attempts: list[PlacedAttempt]
    """Each attempt that reached a point, with the points it reached."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(Event):
    TYPE: ClassVar[EventType] = EventType.RUN_ENDED
    status: RunStatus
    reason: str | None
    kills: int
    restarts: int


EVENTS: tuple[type[Event], ...] = (
    RunStarted,
    IntentStarted,
    AttemptStarted,
    AttemptEnded,
    IntentEnded,
    PodStarted,
    PodReady,
    PodExited,
    PodStopped,
    PodResumed,
    PodGraceExpired,
    SessionOpened,
    SessionLost,
    PodFault,
    StreamFault,
    FaultMissed,
    FaultUnfinished,
    EffectsCollected,
    EffectsCheckpoint,
    ServiceStarted,
    ServiceStopped,
    BalancerRetry,
    CrashPoint,
    CrashPlan,
    PodUnavailable,
    TokenRefreshed,
    DataRolledBack,
    PointLate,
    PointsPlaced,
    RunEnded,
)
"""Every event class, in the order of :class:`EventType` (a unit test holds it to every member)."""
