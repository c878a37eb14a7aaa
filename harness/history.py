"""The history and its vocabulary: the one contract between what writes a run and what reads it.

The history is an append-only JSONL record of everything observed during a run.
It is the single source of truth for the auditor (Jepsen's model): client
operations and faults go into the same file, in the order they happened, each
with a sequence number and a monotonic timestamp in seconds since the run
started. Every event reaches the file with an unbuffered ``write`` before the
harness does anything more that the outside can see, so a harness that dies
mid-run loses nothing it had acted on, and a partial history can still be
audited. The driver's hot path *holds* the events that precede one of its own
(an intent's start, an attempt's end and its intent's end): they go out in one
``write`` with the next event or a :meth:`HistoryWriter.flush`, and the driver
flushes before it awaits anything (decision 0072).

The words written into it (event types, outcomes and their details, intent
statuses, fault kinds, run statuses) and the verdicts the auditor reads out of
it are defined here once, as enums; writers (client, driver, injector, proxy,
runner) and readers (auditor, reports) import them from here and nowhere else.

Event types and their fields are :mod:`harness.events`: one frozen dataclass per type (an
:class:`Event`), each field typed and described, which every writer but the driver's hot path builds
(:meth:`HistoryWriter.emit`); the line format's JSON Schema is generated from them and shipped
(:mod:`harness.history_schema`, ``harness/history.schema.json``), its version (:data:`SCHEMA_VERSION`)
written in ``run_started``. Readers still read lines as dicts, by key.
"""

from __future__ import annotations

import base64
import binascii
import enum
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Literal

import orjson

from harness.errors import HistoryError


class EventType(enum.StrEnum):
    RUN_STARTED = "run_started"
    INTENT_STARTED = "intent_started"
    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_ENDED = "attempt_ended"
    INTENT_ENDED = "intent_ended"
    POD_STARTED = "pod_started"
    POD_READY = "pod_ready"
    POD_EXITED = "pod_exited"
    POD_STOPPED = "pod_stopped"
    POD_RESUMED = "pod_resumed"
    POD_GRACE_EXPIRED = "pod_grace_expired"
    SESSION_OPENED = "session_opened"
    SESSION_LOST = "session_lost"
    FAULT = "fault"
    FAULT_MISSED = "fault_missed"
    FAULT_UNFINISHED = "fault_unfinished"
    EFFECTS_COLLECTED = "effects_collected"
    EFFECTS_CHECKPOINT = "effects_checkpoint"
    SERVICE_STARTED = "service_started"
    SERVICE_STOPPED = "service_stopped"
    BALANCER_RETRY = "balancer_retry"
    CRASH_POINT = "crash_point"
    CRASH_PLAN = "crash_plan"
    POD_UNAVAILABLE = "pod_unavailable"
    TOKEN_REFRESHED = "token_refreshed"
    """OAuth (``target.auth``): a token replaced another (``why``: expiring, refused, step_up); the
    refused request was sent again, and is not an attempt of its own."""
    DATA_ROLLED_BACK = "data_rolled_back"
    """A crash planned as a power loss: the data directory rolled back to what was durable (``changed``)."""
    POINT_LATE = "point_late"
    """A point an attempt reached, told after its ``attempt_ended`` was written (a commit whose reply the
    PostgreSQL relay read after the pod was killed)."""
    POINTS_PLACED = "points_placed"
    """The points the PostgreSQL relay saw, placed in their attempts once the run's calls were over: a run
    that only observes and whose only observing site is the relay (its reports are spooled during the
    run, off the driver's path)."""
    RUN_ENDED = "run_ended"


class Outcome(enum.StrEnum):
    """What the client saw for one attempt."""

    OK = "ok"
    TOOL_ERROR = "tool_error"
    TRANSPORT_ERROR = "transport_error"
    """The exchange broke: the request may or may not have taken effect."""
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"
    """The server answered, but not with a tool result (HTTP error, JSON-RPC error, garbage)."""
    SESSION_LOST = "session_lost"
    """The server did not know the attempt's session (it restarted): the call was not executed."""
    AUTH_ERROR = "auth_error"
    """HTTP 401 or 403: the server refused the credentials; retrying will not change that."""
    INPUT_REQUIRED = "input_required"
    """``resultType: input_required`` (MRTR): the server asks a question; the intent's next attempt
    answers it (``round`` in ``attempt_started``). Not an error, and not the intent's end."""


OUTCOMES = tuple(o.value for o in Outcome)
"""Every outcome, in the order of the columns that count them (``n_ok``, ``n_tool_error``, ...)."""


class Detail(enum.StrEnum):
    """Where an attempt's exchange ended, machine-readable; free text goes in ``message``."""

    # transport_error
    CONNECT_REFUSED = "connect_refused"
    """Nothing listened: the request certainly did not reach a server."""
    CONNECT_FAILED = "connect_failed"
    CLOSED_BEFORE_RESPONSE = "closed_before_response"
    """The request was written; the connection closed before any response byte."""
    CLOSED_MID_RESPONSE = "closed_mid_response"
    """Part of the response arrived, then the connection closed."""
    SSE_ENDED = "sse_ended_without_response"
    """The event stream ended cleanly but never carried the response."""
    GATEWAY_ERROR = "gateway_error"
    """A gateway (a load balancer) answered 502, 503 or 504 instead of the server: the request may
    or may not have reached a replica."""
    # timeout
    TIMEOUT_CONNECT = "connect"
    TIMEOUT_NO_RESPONSE = "no_response"
    TIMEOUT_MID_RESPONSE = "mid_response"
    # protocol_error
    BAD_HTTP = "bad_http"
    HTTP_STATUS = "http_status"
    """A non-200 answer that is not a JSON-RPC error."""
    NOT_JSON = "not_json"
    NOT_JSONRPC = "not_jsonrpc"
    JSONRPC_ERROR = "jsonrpc_error"
    ID_MISMATCH = "id_mismatch"
    BAD_RESULT = "bad_result"
    # session_lost
    SESSION_NOT_FOUND = "session_not_found"
    """HTTP 404 to a request carrying a session id, as the 2025 specification says."""
    SESSION_REJECTED = "session_rejected"
    """HTTP 400 whose answer names the session (some servers answer so instead of 404)."""
    # auth_error
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    # tool_error
    ERROR_CONTRACT = "error_contract"
    """A tool error carrying a machine-readable ``code`` (and maybe ``retryable``)."""
    NO_ERROR_CONTRACT = "no_error_contract"


CONNECTION_CLOSED = frozenset(
    {Detail.CLOSED_BEFORE_RESPONSE, Detail.CLOSED_MID_RESPONSE, Detail.GATEWAY_ERROR}
)
"""Details of attempts whose connection the server side closed: what a crash looks like (behind a
load balancer, the balancer's 502 is what it looks like)."""

NEVER_SENT = frozenset({Detail.CONNECT_REFUSED, Detail.CONNECT_FAILED, Detail.TIMEOUT_CONNECT})
"""Details of failed attempts whose request never reached a server: they cannot have taken effect."""

MESSAGE_LIMIT = 300
"""At most this many characters of an error's text are kept in the history (``message``)."""


class IntentStatus(enum.StrEnum):
    """How the client finished with an intent."""

    OK = "ok"
    GAVE_UP = "gave_up"
    """Retries ran out (or the run's deadline came): the outcome is unknown to the client."""
    REJECTED = "rejected"
    """The server answered with an error the policy does not retry."""


class FaultKind(enum.StrEnum):
    """Everything that can break an attempt: the word each kind of fault is written and read as.

    All else a kind is (what it means, its blame rank, its plan, strike and heal, its fix, its
    colour) is declared once, in its module of :mod:`harness.faultkinds` (decision 0088). The
    members are listed in blame order, the fault closest to a commit first (a test checks the ranks
    agree). ``crash`` (a pod that died with no kill) and ``sever_mid_stream`` (a ``sever_response``
    cut before the server had finished) are the auditor's labels, never written.
    """

    BALANCER_RETRY = "balancer_retry"
    KILL = "kill"
    CRASH = "crash"
    ROLLOUT = "rollout"
    SEVER_RESPONSE = "sever_response"
    SEVER_MID_STREAM = "sever_mid_stream"
    STALL = "stall"
    PAUSE = "pause"
    SEVER_REQUEST = "sever_request"
    DELAY = "delay"


StreamFaultKind = Literal["sever_request", "sever_response", "stall", "delay"]
"""The fault proxy's faults, as a scenario names them."""


class RunStatus(enum.StrEnum):
    COMPLETED = "completed"
    DEADLINE = "deadline"
    """``workload.max_duration_s`` came before every intent had started."""
    STOPPED = "stopped"
    """A pod back from a fault answered no call for ``target.unavailable_after_s`` (``pod_unavailable``):
    the intents left were not started."""
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    UNFINISHED = "unfinished"
    """No ``run_ended``: the harness itself died. Only the auditor says this."""


class Verdict(enum.StrEnum):
    """The auditor's judgement per intent (see ``harness.audit.verdicts`` for the rules)."""

    EXACTLY_ONCE = "exactly_once"
    """The client saw ok and the intent took effect once: correct."""
    DUPLICATE = "duplicate"
    """The intent took effect two or more times, whatever the client saw."""
    LOST = "lost"
    """The client saw ok and nothing was stored: success reported, nothing done."""
    UNFINISHED = "unfinished"
    """The client gave up (retries ran out) and nothing was stored."""
    APPLIED_AFTER_GIVING_UP = "applied_after_giving_up"
    """The client gave up, and the intent took effect once: done, but the client never knew."""
    REJECTED = "rejected"
    """The server answered a final error and nothing was stored: a clean, definitive failure."""
    APPLIED_DESPITE_ERROR = "applied_despite_error"
    """The server said no (a final error, or an ok whose text reads as a failure) and did it."""
    INCOMPLETE = "incomplete"
    """The run stopped while the intent was in flight: its end was never recorded."""


class CheckpointWhen(enum.StrEnum):
    """When a checkpoint read of the effect source was taken (``effects_checkpoint``'s ``when``)."""

    BEFORE_FAULT = "before_fault"
    """Just before an injected kill or rollout step, the pod still up: what it had stored by then."""
    AFTER_RESTART = "after_restart"
    """Once a pod that died (killed or crashed) was ready again: what survived its restart."""
    BEFORE_CALL = "before_call"
    """Before each call of a crash-point exploration (one at a time, the store at rest): what was stored
    by then, which a crash in the call may lose (and, if it is missing, what was never stored)."""
    AT_ANSWER = "at_answer"
    """As an attempt of a race (``mcp-chaos races``) was answered ok, the other attempt perhaps still at
    work: what the store held when the client got its answer (one sample, the event names the
    ``intent`` and ``attempt``)."""


@dataclass(frozen=True, slots=True)
class SeenEffects:
    """The effects a checkpoint read found, compact enough for a million-intent run.

    This run's intents (markers ``{namespace}-m{index:07d}``, :mod:`harness.workload`) with at
    least one effect are a bitmap, bit ``index % 8`` (least significant first) of byte
    ``index // 8``, trailing zero bytes dropped, written in base64 as ``seen`` (numpy reads it
    with ``unpackbits(..., bitorder="little")``). Counts of two or more are listed as ``counts``
    (``{index: n}``); effects under any other marker (another run's, another writer's) are only
    counted, as ``foreign``.
    """

    bitmap: bytes
    counts: dict[int, int]
    """Intents with two or more effects; the other intents of the bitmap had one."""
    foreign: int

    def join(self, other: SeenEffects) -> SeenEffects:
        """What two samples of one store saw together: every intent either saw, with the larger count."""
        size = max(len(self.bitmap), len(other.bitmap))
        either = int.from_bytes(self.bitmap, "little") | int.from_bytes(other.bitmap, "little")
        bitmap = either.to_bytes(size, "little").rstrip(b"\0")
        counts = dict(self.counts)
        for i, n in other.counts.items():
            counts[i] = max(n, counts.get(i, 1))
        return SeenEffects(bitmap, counts, max(self.foreign, other.foreign))

    @classmethod
    def of(cls, effects: Mapping[str, int], namespace: str, intents: int) -> SeenEffects:
        """Compact effects per marker, as an effect source counts them, for a run of ``intents``."""
        prefix = f"{namespace}-m"
        cut = len(prefix)
        bitmap = bytearray((intents + 7) // 8)
        counts: dict[int, int] = {}
        foreign = 0
        for marker, n in effects.items():
            if n <= 0:
                continue
            digits = marker[cut:] if marker.startswith(prefix) else ""
            # The workload's own spelling only: seven digits at least, no other leading zeros.
            if (
                digits.isdigit()
                and digits.isascii()
                and (len(digits) == 7 or (len(digits) > 7 and digits[0] != "0"))
                and (index := int(digits)) < intents
            ):
                bitmap[index >> 3] |= 1 << (index & 7)
                if n >= 2:
                    counts[index] = n
            else:
                foreign += n
        return cls(bytes(bitmap).rstrip(b"\0"), counts, foreign)

    def fields(self) -> dict[str, Any]:
        """The event's ``seen``, ``counts`` and ``foreign``."""
        return {
            "seen": base64.b64encode(self.bitmap).decode("ascii"),
            "counts": {str(index): n for index, n in sorted(self.counts.items())},
            "foreign": self.foreign,
        }

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> SeenEffects | None:
        """What an ``effects_checkpoint`` event saw; None for a read that failed (it has ``error``)."""
        if event.get("seen") is None:
            return None
        try:
            bitmap = base64.b64decode(event["seen"], validate=True)
            counts = {int(k): int(v) for k, v in (event.get("counts") or {}).items()}
            return cls(bitmap, counts, int(event.get("foreign") or 0))
        except (binascii.Error, TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(f"effects_checkpoint #{event.get('seq')} is damaged: {exc}") from None

    def count(self, index: int) -> int:
        """The effects of intent ``index`` at this checkpoint."""
        byte = index >> 3
        if byte >= len(self.bitmap) or not self.bitmap[byte] >> (index & 7) & 1:
            return 0
        return self.counts.get(index, 1)

    def indices(self) -> Iterator[int]:
        """The intents with at least one effect, in order."""
        for byte, bits in enumerate(self.bitmap):
            for bit in range(8):
                if bits >> bit & 1:
                    yield byte * 8 + bit


FINDINGS = (Verdict.DUPLICATE, Verdict.LOST, Verdict.APPLIED_DESPITE_ERROR)
"""Verdicts that are retry-safety violations of the target whatever the client did."""

Clock = Callable[[], float]


FREE_TEXT_FIELDS = ("message", "reason", "error", "code", "reply")
"""Event fields that hold what a server or the OS said: redacted, then cut to an excerpt
(``message`` and an ok's ``reply`` to MESSAGE_LIMIT, a tool error's ``code`` to CODE_LIMIT; a
JSON-RPC code is a number)."""
_FREE_TEXT = frozenset(FREE_TEXT_FIELDS)
"""Most events hold none of them: one set test spares them the loop."""
CODE_LIMIT = 80
"""A tool error's ``code`` is an identifier (``handle_expired``); a server may send a megabyte."""
_LIMITS = {"message": MESSAGE_LIMIT, "reply": MESSAGE_LIMIT, "code": CODE_LIMIT}
CAPTURED_FIELDS = ("statements", "writes", "key", "answer")
"""What a ``crash_point`` captured of the server's work: the SQL it committed (a literal may be its
token), a downstream call's key, what came instead of an answer. The server's text: redacted, not cut
(advice quotes statements whole). A commit's ``label`` (verb and table) is not: a plan matches by it."""


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """A captured field with its text redacted: a string, or each string of a list."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact(v) if isinstance(v, str) else v for v in value]
    return value


SCHEMA_VERSION = 1
"""The version of the history's line format (``run_started``'s ``schema``; ``harness/history.schema.json``):
raised when a field changes meaning or a required one is added or removed."""


class Absent(enum.Enum):
    """The default of the few event fields written as null when None and left out when never set."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One line of the history, typed: each event type is a subclass in :mod:`harness.events`, its fields
    the line's (beyond ``seq``, ``t`` and ``type``, which the writer adds).

    A field with no default is always written, ``null`` included; a field whose default is None is left
    out of the line while it is None, so optional fields cost a reader nothing to tell apart; a field
    whose default is :data:`ABSENT` is left out only while unset (a downstream point's ``key``: null
    when the call carried none).
    """

    TYPE: ClassVar[EventType]

    def fields(self) -> dict[str, Any]:
        """The line's fields, in declaration order, optional ones left out while None."""
        layout = _LAYOUTS.get(type(self))
        if layout is None:
            layout = _LAYOUTS[type(self)] = tuple((f.name, f.default is None) for f in dataclass_fields(self))
        out: dict[str, Any] = {}
        for name, optional in layout:
            value = getattr(self, name)
            if value is ABSENT or (value is None and optional):
                continue
            out[name] = value
        return out


_LAYOUTS: dict[type[Event], tuple[tuple[str, bool], ...]] = {}


def optional_field(f: Any) -> bool:
    """Whether a dataclass field of an :class:`Event` may be left out of its line (its default is None
    or :data:`ABSENT`)."""
    return (f.default is None or f.default is ABSENT) and f.default_factory is MISSING


_CRASH_POINT = EventType.CRASH_POINT
"""Looked up once: an enum member costs a descriptor call per lookup on Python 3.11."""


class HistoryWriter:
    """Appends events to ``history.jsonl``, secrets redacted; each event in an unbuffered write, or held
    (:meth:`hold`) until the next one is written."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock = time.monotonic,
        redact: Callable[[str], str] | None = None,
        check: Callable[[Path], None] | None = None,
    ) -> None:
        self.path = path
        self._check = check
        """Called with the path once the history is closed (the tests check it against its schema)."""
        self._clock = clock
        self._t0 = clock()
        self._seq = 0
        self._redact = redact
        self._held: list[bytes] = []
        self._file: BinaryIO | None = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()

    def now(self) -> float:
        """Seconds since the run started, on the history's clock."""
        return self._clock() - self._t0

    def since_start(self, clock_time: float) -> float:
        """A time read on the history's clock (``time.monotonic()``, as another process of the run reads
        it too) as seconds since the run started: the ``t`` an event at that moment has."""
        return clock_time - self._t0

    @property
    def next_seq(self) -> int:
        """The seq the next event will get."""
        return self._seq

    def emit(self, event: Event) -> int:
        """Append one event, and any held before it, in one write; its ``seq`` (what a later event
        refers to it by)."""
        return self.emit_fields(event.TYPE, **event.fields())

    def emit_fields(self, type_: EventType, **fields: Any) -> int:
        """:meth:`emit` for the driver's hot path, which writes its events' fields without building an
        :class:`Event` (decision 0072); what it writes is described by the same types all the same, and
        the tests check its lines against their schema."""
        line = self._line(type_, fields)
        assert self._file is not None  # _line checked it
        if self._held:
            self._held.append(line)
            line = b"".join(self._held)
            self._held.clear()
        self._file.write(line)
        return self._seq - 1

    def hold(self, type_: EventType, **fields: Any) -> int:
        """An event numbered and timed now, written with the next :meth:`emit` or :meth:`flush`: on the
        driver's hot path, one write per call instead of one per event. The caller flushes before it
        awaits or acts on anything outside the process, so a held event is never lost to a crash that
        what followed it could have been seen by."""
        self._held.append(self._line(type_, fields))
        return self._seq - 1

    def flush(self) -> None:
        """Write the held events, if any."""
        if self._held and self._file is not None:
            self._file.write(b"".join(self._held))
            self._held.clear()

    def _line(self, type_: EventType, fields: dict[str, Any]) -> bytes:
        """One event's line, numbered and timed; free text redacted and cut."""
        if self._file is None:
            raise HistoryError(f"history {self.path} is closed; no event can be added after run_ended")
        if not _FREE_TEXT.isdisjoint(fields):
            for name in FREE_TEXT_FIELDS:
                value = fields.get(name)
                if isinstance(value, str):
                    # Redacted first: a cut or a collapsed space never leaves part of a secret behind.
                    value = self._redact(value) if self._redact is not None else value
                    limit = _LIMITS.get(name)
                    fields[name] = value if limit is None else excerpt(value, limit)
        if type_ is _CRASH_POINT and self._redact is not None:
            for name in CAPTURED_FIELDS:
                if name in fields:
                    fields[name] = _redacted(fields[name], self._redact)
        seq = self._seq
        self._seq = seq + 1
        # Microseconds, rounded by hand: round(x, 6) costs three times as much, on every event.
        t = int((self._clock() - self._t0) * 1e6 + 0.5) / 1e6
        return orjson.dumps({"seq": seq, "t": t, "type": type_, **fields}, option=orjson.OPT_APPEND_NEWLINE)

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None
            if self._check is not None:
                self._check(self.path)

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CLIP_LIMIT = 1 << 16
"""How much of a server's text a result keeps before it is redacted and cut for people."""
_CONTROL = dict.fromkeys([*range(0x20), 0x7F], "?")


def clip(text: str) -> str:
    """A server's or the OS's text as a result carries it: bounded, otherwise as it was said.

    Not yet made one line nor cut to MESSAGE_LIMIT: that happens after secrets are
    redacted (:mod:`harness.redaction`), so neither a cut nor a collapsed space can
    leave part of a secret behind.
    """
    return text[:CLIP_LIMIT]


def excerpt(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Text for people: one line, no control bytes, at most ``limit`` characters."""
    if len(text) <= limit and text.isprintable() and "  " not in text and text.strip(" ") == text:
        return text  # already one line of single spaces (most replies): nothing to do, checked in C
    line = " ".join(text[:CLIP_LIMIT].split()).translate(_CONTROL)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def log_end(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The end of a log as one line of at most ``limit`` characters (``…`` where it was cut): what a
    server said last, its error after its traceback, which :func:`excerpt` (the start) cuts away."""
    line = " ".join(text[-CLIP_LIMIT:].split()).translate(_CONTROL)
    return line if len(line) <= limit else "…" + line[-(limit - 1) :]


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the events of a history file in order, each checked to be an event object."""
    seq = 0
    for batch in read_batches(path):
        for event in batch:
            if type(event) is not dict or "type" not in event:
                raise HistoryError(f"{path}: event #{seq} is not an object with a 'type'")
            seq += 1
            yield event


def has_events(path: Path) -> bool:
    """Whether the history holds one whole line at least: an empty one (or one torn line) is a damaged
    run, never a run that passed with nothing in it. A history that is missing (or no regular file: a
    FIFO would block the read) is not this question: :func:`read_batches` says what it is."""
    if not path.is_file():
        return True
    try:
        with open(path, "rb") as f:
            return f.readline().endswith(b"\n")
    except OSError as exc:
        raise HistoryError(f"{path} cannot be read: {exc.strerror or exc}") from None


def read_batches(path: Path) -> Iterator[list[Any]]:
    """Yield the parsed lines of a history file in order, 64 KiB of lines at a time.

    This is the audit's input: batches spare its fold a generator step per event
    (millions for a large run), and small ones keep the parsed events in cache
    (1 MiB batches were 30% slower). Lines are not checked to be event objects
    here; :func:`read_history` and the fold do that. A final line that is not
    valid JSON and lacks its newline is the trace of a harness killed mid-write
    and is skipped; any other unreadable line is a HistoryError naming it.
    """
    if not path.is_file():
        raise HistoryError(f"no history at {path} (is this a run directory made by `mcp-chaos run`?)")
    loads = orjson.loads
    first_line = 1
    with open(path, "rb") as f:
        while lines := f.readlines(1 << 16):
            try:
                batch = [loads(raw) for raw in lines]
            except orjson.JSONDecodeError:
                batch = _parse_carefully(path, lines, first_line)
            first_line += len(lines)
            yield batch


def _parse_carefully(path: Path, lines: list[bytes], first_line: int) -> list[Any]:
    """The slow path for a batch with a bad line: tolerate a torn last write, name any other."""
    events = []
    for offset, raw in enumerate(lines):
        try:
            events.append(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            if not raw.endswith(b"\n"):
                break  # torn last write
            raise HistoryError(f"{path}:{first_line + offset}: not a JSON event ({exc})") from None
    return events
