"""The scenario: everything one run needs, as a typed and validated model.

A scenario is a YAML file (see ``scenarios/``). It is validated here once, with
errors that name the field and the fix, so that no other module ever sees an
untyped dict. The model knows nothing of processes, sockets or files beyond
loading itself: the runner turns it into pods, a driver and an injector.

Placeholders are written ``{name}`` (see :mod:`harness.template`; every string
that may hold one is parsed here, so a valid scenario always renders).
``{scenario_dir}`` is resolved when the file is loaded (so a copy of the
scenario in a run directory still points at the same target); the others are
resolved when they are used:

* target command and env: ``{python}`` (process runtime only), ``{port}``, ``{data_dir}``
  (for an image: its mount point inside the container), ``{run_dir}``, ``{pod}``,
  ``{postgres_url}`` (with ``services.postgres``), ``{sink_url}`` (with ``audit.effects.sink``)
* audit URLs: ``{data_dir}``, ``{run_dir}``, ``{postgres_url}``
* read-tool arguments: ``{namespace}`` (what every marker of the run starts with)
* tool arguments: ``{marker}``, ``{key}``, ``{index}``, ``{seed}``, and generators
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from harness import bounded_yaml
from harness.crashpoints.points import PointKind, parse_path
from harness.errors import ScenarioError
from harness.history import StreamFaultKind
from harness.template import Template, parse_template, parse_text

TARGET_PLACEHOLDERS = frozenset(
    {"python", "port", "data_dir", "run_dir", "pod", "scenario_dir", "postgres_url", "sink_url"}
)
AUDIT_PLACEHOLDERS = frozenset({"data_dir", "run_dir", "scenario_dir", "postgres_url"})
READ_TOOL_PLACEHOLDERS = frozenset({"namespace"})


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "upgrade",
        "accept",
        "last-event-id",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
    }
)
"""Headers the harness's client writes itself: a scenario cannot set them (or carry a key in them)."""


def _check_placeholders(text: str, allowed: frozenset[str], where: str, *, env_refs: bool = False) -> None:
    parse_text(text, allowed, where, env_refs=env_refs)


def _as_shell_word(value: Any) -> Any:
    """A YAML scalar as the string a shell would pass (true, 3, 0.3, 2026-07-28); others unchanged."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class KubernetesTarget(_Model):
    """Pods that already run in a Kubernetes cluster, behind a Service the driver calls.

    The harness starts nothing: it finds the Ready pods that ``selector`` matches,
    kills one at each kill fault (through the API, or by creating a Chaos Mesh
    ``PodChaos``), waits for the replacement to be Ready, and collects the pods'
    logs at the end. See :mod:`harness.pods.kubernetes`.
    """

    context: str | None = Field(default=None, min_length=1)
    """The kubeconfig context (default: its current context)."""
    namespace: str = Field(default="default", pattern=_DNS_LABEL)
    selector: str = Field(min_length=1, max_length=1000)
    """A label selector (``app=invoices,tier=mcp``): the pods behind the Service."""
    url: str
    """The MCP endpoint the driver calls, through the Service: ``http://HOST:PORT/PATH``."""
    kill: Literal["api", "chaos_mesh"] = "api"
    """``api``: delete the victim pod; ``chaos_mesh``: create a PodChaos (pod-kill) naming it."""
    grace_period_s: int | None = Field(default=0, ge=0, le=3600)
    """Seconds the victim gets after SIGTERM (0: none, a SIGKILL); null: the pod's own
    ``terminationGracePeriodSeconds`` (API kills only: a PodChaos always names its grace period)."""
    kubeconfig: str | None = Field(default=None, min_length=1)
    """The kubeconfig file (default: ``$KUBECONFIG``, then ``~/.kube/config``)."""

    @field_validator("selector")
    @classmethod
    def _one_line_selector(cls, v: str) -> str:
        if any(ord(c) < 32 for c in v) or not v.strip():
            raise ValueError("target.kubernetes.selector must be one line of labels (app=invoices)")
        return v

    @field_validator("url")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        parts = urlsplit(v)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "http" or not parts.hostname or port is None or not parts.path.startswith("/"):
            raise ValueError(
                "target.kubernetes.url must be http://HOST:PORT/PATH (the Service's MCP endpoint)"
            )
        return v

    @model_validator(mode="after")
    def _grace_for_chaos_mesh(self) -> KubernetesTarget:
        if self.kill == "chaos_mesh" and self.grace_period_s is None:
            raise ValueError(
                "target.kubernetes.grace_period_s: a PodChaos has no 'the pod's own' grace period; "
                "give seconds (0 kills at once)"
            )
        return self


_NOT_FOR_KUBERNETES: dict[str, Any] = {
    "command": None,
    "image": None,
    "env": {},
    "port_env": "PORT",
    "data_mount": "/data",
    "path": "/mcp",
}
"""Fields of a target the harness starts, at their defaults; with ``kubernetes`` the pods already run.
(Compared by value, not by whether they were written: the scenario as run is dumped with every default.)"""


class TargetSpec(_Model):
    """How to start one pod of the system under test: a local command, or a Docker image
    (or, with ``kubernetes``, where to find pods that already run in a cluster).

    With ``image`` the pod is a container on host networking (it must listen on
    127.0.0.1:$PORT); ``command`` then overrides the image's command. Without it,
    ``command`` is run as a child process (the embedded runtime).

    ``transport: stdio`` runs a server that speaks MCP on its stdin and stdout
    instead (a local command, or an image's, attached through the engine; the
    harness is its host).
    """

    command: list[str] | None = Field(default=None, min_length=1)
    image: str | None = Field(default=None, min_length=1)
    transport: Literal["http", "stdio"] = "http"
    data_mount: str = "/data"
    """Docker runtime: where the run's data directory is mounted inside the container."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of the target; values may use placeholders and ``${VAR}`` of the harness's own."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers on every request (``Authorization: "Bearer ${TOKEN}"``); ``${VAR}`` is expanded
    from the harness's environment when the run starts and never written anywhere."""
    port_env: str = Field(default="PORT", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    path: str = "/mcp"
    ready_timeout_s: float = Field(default=30.0, gt=0, le=600)
    stop_timeout_s: float = Field(default=5.0, gt=0, le=120)
    restart_delay_s: float = Field(default=0.5, ge=0, le=600)
    """After the pod dies (killed or crashed), wait this long before starting it again."""
    max_restarts: int = Field(default=100, ge=0, le=100_000)
    """A pod that needs more restarts than this in one run fails the run (a crash loop)."""
    replicas: int = Field(default=1, ge=1, le=16)
    """Pods of this target running side by side (``pod-0`` ...), each on its own port, sharing the
    run's data directory and services: a deployment's replicas. ``client.balance`` spreads the
    attempts over them."""
    kubernetes: KubernetesTarget | None = None

    @field_validator("command")
    @classmethod
    def _command_placeholders(cls, v: list[str] | None) -> list[str] | None:
        for part in v or ():
            if "\0" in part:
                raise ValueError("it contains a NUL byte, which no command line can carry")
            _check_placeholders(part, TARGET_PLACEHOLDERS, "target.command")
        return v

    @field_validator("headers")
    @classmethod
    def _header_fields(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"target.headers: {name!r} is not an HTTP header name")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(
                    f"target.headers: {name} is set by the harness itself (it frames every request)"
                )
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"target.headers.{name}: a header value cannot hold a line break or NUL")
            _check_placeholders(value, frozenset(), f"target.headers.{name}", env_refs=True)
        return v

    @model_validator(mode="after")
    def _runtime(self) -> TargetSpec:
        if self.kubernetes is not None:
            for name, default in _NOT_FOR_KUBERNETES.items():
                if getattr(self, name) != default:
                    raise ValueError(
                        f"target.{name} does not go with target.kubernetes: the harness starts nothing, "
                        "the pods already run (the endpoint's path is part of target.kubernetes.url)"
                    )
            if self.transport == "stdio":
                raise ValueError("target.kubernetes needs transport: http (the driver calls the Service)")
            return self
        if self.command is None and self.image is None:
            raise ValueError("target needs a command (a local server) or an image (a Docker image)")
        if self.transport == "stdio" and self.headers:
            raise ValueError("target.headers are HTTP headers; a stdio target has none")
        if self.transport == "stdio" and self.replicas > 1:
            raise ValueError(
                "target.replicas needs an HTTP target: a stdio server has exactly one client, its host"
            )
        if self.image is not None:
            uses_python = any("{python}" in part for part in self.command or ())
            if uses_python or any("{python}" in v for v in self.env.values()):
                raise ValueError(
                    "{python} is the harness's own interpreter; it does not exist inside an image"
                )
            if not self.data_mount.startswith("/"):
                raise ValueError(f"target.data_mount must be an absolute path, got {self.data_mount!r}")
        return self

    @property
    def runtime(self) -> Literal["process", "docker", "kubernetes"]:
        if self.kubernetes is not None:
            return "kubernetes"
        return "docker" if self.image is not None else "process"

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars_are_strings(cls, v: Any) -> Any:
        """``INVOICES_MODE: 3`` or ``--set target.env.X=0.3`` mean the string, as in a shell."""
        if isinstance(v, dict):
            return {k: _as_shell_word(x) for k, x in v.items()}
        return v

    @field_validator("env")
    @classmethod
    def _env_placeholders(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} cannot be an environment variable's name")
            if "\0" in value:
                raise ValueError(f"{name} contains a NUL byte, which no environment can carry")
            _check_placeholders(value, TARGET_PLACEHOLDERS, f"target.env.{name}", env_refs=True)
        return v

    @field_validator("path")
    @classmethod
    def _path_absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"target.path must start with '/', got {v!r}")
        return v


class WorkloadSpec(_Model):
    """The business intents to replay and how many run at once."""

    intents: int = Field(gt=0, le=10_000_000)
    concurrency: int = Field(default=16, gt=0, le=4096)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any]
    request_progress: bool = False
    """Send a ``progressToken`` with each call: servers that report progress then answer with an
    event stream (the SSE response form), which stream faults can cut between events."""
    max_duration_s: float = Field(default=900.0, gt=0, le=86_400)
    """A hard bound: intents not started by then are not started at all."""
    answers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """MRTR: what to answer when the tool asks (``resultType: input_required``). Keyed by the name of
    the server's input request (its ``inputRequests`` key), the form's content: ``{customer:
    {customer_id: acme-inc}}`` accepts the elicitation ``customer`` with that content. Also what
    ``mcp-chaos contract``'s ``mrtr`` check answers with."""

    @field_validator("arguments")
    @classmethod
    def _arguments_template(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "marker" not in parse_template(v).placeholders:
            raise ValueError(
                "no argument holds the intent's {marker}: put it in a field the target stores "
                "(a memo, a description), so the audit can find each intent's effects"
            )
        return v

    @field_validator("answers")
    @classmethod
    def _answers_are_forms(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for request, form in v.items():
            if not request or not form or "" in form:
                raise ValueError(
                    "an answer names the server's input request and gives its form's fields: "
                    "{request: {field: value}}, no empty names or forms"
                )
            for name, value in form.items():
                # What JSON (and the client's encoder) can carry: 64-bit integers, finite numbers.
                scalar = isinstance(value, str | bool) or (
                    isinstance(value, int | float) and math.isfinite(value) and -(2**63) <= value < 2**63
                )
                if not (scalar or (isinstance(value, list) and all(isinstance(x, str) for x in value))):
                    raise ValueError(
                        f"answer {request}.{name}: a form field is a string, number, true/false or a "
                        f"list of strings (got {value!r})"
                    )
        return v

    @cached_property
    def template(self) -> Template:
        """The argument template, compiled (it was checked when the model was validated)."""
        return parse_template(self.arguments)


class Backoff(_Model):
    """Exponential backoff between attempts of one intent."""

    initial_s: float = Field(default=0.05, ge=0, le=60)
    max_s: float = Field(default=1.0, ge=0, le=600)
    multiplier: float = Field(default=2.0, ge=1, le=10)
    jitter: Literal["full", "equal", "none"] = "full"


class ClientPolicy(_Model):
    """What the client does when an attempt fails: the retry policy under test."""

    attempt_timeout_s: float = Field(default=5.0, gt=0, le=600)
    max_attempts: int = Field(default=20, ge=1, le=1000)
    backoff: Backoff = Field(default_factory=Backoff)
    key_reuse: Literal["same", "fresh"] = "same"
    """``same``: every attempt of an intent carries its key (correct). ``fresh``: a buggy client."""
    retry_tool_errors: Literal["retryable", "never"] = "retryable"
    """Retry a tool error whose contract says ``retryable: true`` (honouring ``retry_after_ms``)."""
    protocol: Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"] = "auto"
    """``auto`` asks ``server/discover`` (2026-07-28) and falls back to the 2025 ``initialize``
    handshake, as current clients do; a version pins it. stdio targets always use the handshake."""
    sessions: Literal["shared", "per_worker"] = "shared"
    """2025 protocol: one session for the whole driver, or one per concurrent worker."""
    resume: bool = False
    """2025 protocol: when an event stream with event ids breaks, first try to resume it (GET with
    ``Last-Event-ID``), and re-issue the call (with a new id) only if that fails."""
    key_in: Literal["argument", "meta", "header"] = "argument"
    """Where the intent's idempotency key travels: in an argument (the template's ``{key}``), in the
    request's ``_meta``, or in an HTTP header."""
    key_name: str | None = Field(default=None, min_length=1)
    """The ``_meta`` field or header name (defaults: ``idempotencyKey``, ``Idempotency-Key``)."""
    balance: Literal["round_robin", "random", "sticky"] = "round_robin"
    """With several replicas, which one an attempt goes to, as a health-checked load balancer
    sends it (replicas that are not ready get none): ``round_robin`` across attempts (a retry goes
    to the next replica), ``random`` (seeded), or ``sticky`` (an intent's attempts stay on one
    replica while it is ready, like session affinity)."""
    max_input_rounds: int = Field(default=3, ge=1, le=10)
    """MRTR: questions (``input_required`` answers) one intent may be asked before the client stops
    answering and ends it as rejected; the client's own bound on a server that never stops asking."""

    @field_validator("protocol", mode="before")
    @classmethod
    def _version_as_written(cls, v: Any) -> Any:
        """YAML reads an unquoted 2025-11-25 as a date; the version is meant."""
        return v.isoformat() if isinstance(v, dt.date) else v

    @property
    def key_meta(self) -> str | None:
        return (self.key_name or "idempotencyKey") if self.key_in == "meta" else None

    @property
    def key_header(self) -> str | None:
        return (self.key_name or "Idempotency-Key") if self.key_in == "header" else None

    @model_validator(mode="after")
    def _resume_needs_2025(self) -> ClientPolicy:
        if self.resume and self.protocol == "2026-07-28":
            raise ValueError("client.resume is a 2025-protocol feature; 2026-07-28 removed resumability")
        return self

    @model_validator(mode="after")
    def _key_name(self) -> ClientPolicy:
        if self.key_in == "argument" and self.key_name is not None:
            raise ValueError(
                "client.key_name names a _meta field or header; with key_in: argument the "
                "template's {key} says where the key goes"
            )
        header = self.key_name or "Idempotency-Key"
        if self.key_in == "header" and (not _HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS):
            raise ValueError(
                f"client.key_name {self.key_name!r} cannot be the key's header: use another name"
            )
        return self


class KillFaults(_Model):
    """SIGKILL the pod at seeded points of the run, then restart it (like a crashed pod)."""

    count: int | None = Field(default=None, ge=0, le=10_000)
    """This many kills, at seeded points spread over the workload's progress."""
    mean_interval_s: float | None = Field(default=None, gt=0, le=86_400)
    """Or: kills at seeded exponential intervals for as long as the run lasts."""
    window: tuple[float, float] = (0.05, 0.95)
    """The part of the workload (fractions of intents dispatched) in which counted kills land."""
    jitter_s: float = Field(default=0.0, ge=0, le=60)
    """A seeded extra delay, 0..jitter_s, between a kill's trigger and the kill."""
    min_uptime_s: float = Field(default=0.0, ge=0, le=3600)
    """A kill waits until the pod has been ready this long (kills in steady state, not at start-up)."""
    victim: Literal["random", "all"] | StrictInt = "random"
    """With replicas: which pod each kill hits: a seeded random one, all of them at once, or the
    replica with this index."""
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    """``SIGKILL``: a crash. ``SIGTERM``: a graceful stop as a deployment gives it: the pod stops
    getting new attempts, may finish what it has, and gets SIGKILL after ``grace_s``."""
    grace_s: float = Field(default=30.0, ge=0, le=600)
    """With ``signal: SIGTERM``: seconds before SIGKILL (Kubernetes' default grace period is 30 s)."""
    hold_dispatch: bool = False
    """Counted kills: while a kill is due but waits for the pod (down, or not up for min_uptime_s),
    start no new intent (retries go on). The kill then lands exactly after its intent, and a
    workload cannot end before every planned kill happened; fewer attempts may be in flight when
    it fires (see ``intents hit`` in the report)."""

    @model_validator(mode="after")
    def _one_way(self) -> KillFaults:
        if (self.count is None) == (self.mean_interval_s is None):
            raise ValueError("faults.kill needs exactly one of count or mean_interval_s")
        lo, hi = self.window
        if not 0 <= lo < hi <= 1:
            raise ValueError(f"faults.kill.window must satisfy 0 <= low < high <= 1, got {list(self.window)}")
        return self


class PauseFaults(_Model):
    """Freeze the pod (SIGSTOP / the cgroup freezer) for ``duration_s`` at seeded points, then resume it.

    A frozen pod keeps its connections: clients time out and retry, and when the pod
    thaws it serves the originals and the retries together.
    """

    count: int = Field(ge=0, le=10_000)
    duration_s: float = Field(gt=0, le=600)
    window: tuple[float, float] = (0.05, 0.95)
    min_uptime_s: float = Field(default=0.0, ge=0, le=3600)
    hold_dispatch: bool = False
    """As for kills: start no new intent while a due pause waits for the pod."""
    victim: Literal["random", "all"] | StrictInt = "random"
    """With replicas: which pod each pause freezes (as for kills)."""

    @model_validator(mode="after")
    def _window(self) -> PauseFaults:
        lo, hi = self.window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"faults.pause.window must satisfy 0 <= low < high <= 1, got {list(self.window)}"
            )
        return self


class StreamFault(_Model):
    """One rule of the fault proxy: which exchanges it hits and what it does to them.

    An exchange is hit when it matches ``tool``/``method`` (and ``intent``/``attempt``
    when given) and a seeded draw per (rule, intent, attempt) falls under
    ``probability``: the same attempts are hit in every run with the same seed,
    however the run's timing falls out. The first rule that hits wins.
    """

    fault: StreamFaultKind
    tool: str | None = None
    """Only exchanges calling this tool (``Mcp-Name``); default: any."""
    method: str = "tools/call"
    intent: int | None = Field(default=None, ge=0)
    attempt: int | None = Field(default=None, ge=1)
    probability: float | None = Field(default=None, ge=0, le=1)
    """Default: 1 when ``intent`` or ``attempt`` is given (an explicit plan)."""
    after_bytes: int = Field(default=0, ge=0)
    """sever_response: relay this many bytes of the response, then cut."""
    after_events: int | None = Field(default=None, ge=0)
    """sever_response: relay this many complete SSE events, then cut (instead of after_bytes)."""
    wait_for_server: bool = True
    """sever_response: cut only once the server has sent its whole response (it has finished,
    so any commit happened: the article's window). False cuts as soon as the bytes are relayed and
    closes the server's side too, which under 2026-07-28 SSE is cancellation of a running handler."""
    hold: Literal["request", "response"] = "request"
    """stall: hold the request (the server gets it only after the client gave up and retried, so two
    attempts with one key overlap) or the response (the server finished long before the retry)."""
    hold_s: float | None = Field(default=None, gt=0, le=600)
    """stall: at most this long; default: the client's attempt timeout plus 0.5 s."""
    delay_s: float = Field(default=0.05, ge=0, le=600)
    direction: Literal["request", "response"] = "request"
    """delay: before forwarding the request, or before relaying the response."""

    @model_validator(mode="after")
    def _probability(self) -> StreamFault:
        if self.probability is None and self.intent is None and self.attempt is None:
            raise ValueError(
                f"faults.stream rule {self.fault!r} needs a probability, or an intent/attempt to hit"
            )
        return self

    @property
    def chance(self) -> float:
        return 1.0 if self.probability is None else self.probability


class RolloutFaults(_Model):
    """Deploys: replace every replica one by one, as a Deployment's rolling update does.

    Each replica in turn stops getting new attempts, gets ``signal`` (SIGTERM: it may finish
    what it has), then SIGKILL after ``grace_s`` if it is still running; it is started again,
    and the next replica goes only once it is ready. Rollouts start at seeded points of the
    workload, like counted kills.
    """

    count: int = Field(default=1, ge=0, le=1000)
    window: tuple[float, float] = (0.1, 0.6)
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGTERM"
    grace_s: float = Field(default=30.0, ge=0, le=600)

    @model_validator(mode="after")
    def _window(self) -> RolloutFaults:
        lo, hi = self.window
        if not 0 <= lo < hi <= 1:
            raise ValueError(
                f"faults.rollout.window must satisfy 0 <= low < high <= 1, got {list(self.window)}"
            )
        return self


class CrashHold(_Model):
    """Hold the chosen intents at a point of their call and SIGKILL the pod there (``mcp-chaos crashpoints``
    writes these; ``harness.crashpoints.holds`` carries them out)."""

    at: str
    """A hold point (``request``, ``db_commit#N``, ``downstream#N``, ``response``), or a path of two:
    ``db_commit#1/db_commit#2`` holds the first attempt at the first, then the retry at the second."""
    intents: list[Annotated[int, Field(ge=0)]] | None = None
    """Which intents (default: every one)."""

    @field_validator("at")
    @classmethod
    def _path(cls, v: str) -> str:
        parse_path(v)
        return v

    def kinds(self) -> set[PointKind]:
        return {p.kind for p in parse_path(self.at)}


class CrashExplore(_Model):
    """Explore instead of a fixed plan: a clean call, then every point it passed (see
    ``harness.crashpoints.plan``)."""

    repeat: int = Field(default=3, ge=1, le=100)
    """Tries per point."""
    max_points: int = Field(default=8, ge=1, le=64)
    """Paths explored at most, single points first, then points of the retries (a crash in the recovery)."""
    only: list[str] | None = Field(default=None, min_length=1)
    """Explore only these points or paths (``db_commit#2``, ``db_commit#1/db_commit#1``)."""

    @field_validator("only")
    @classmethod
    def _paths(cls, v: list[str] | None) -> list[str] | None:
        for name in v or ():
            parse_path(name)
        return v


class CrashPoints(_Model):
    """Hold points wired into the run: every attempt's points are recorded (``crash_point`` events),
    and the holds listed kill the pod at theirs. The first hold that names an intent applies to it."""

    holds: list[CrashHold] = Field(default_factory=list)
    explore: CrashExplore | None = None

    @model_validator(mode="after")
    def _one_plan(self) -> CrashPoints:
        if self.explore is not None and self.holds:
            raise ValueError("faults.crash_points: give holds or explore, not both")
        return self


class Faults(_Model):
    kill: KillFaults | None = None
    pause: PauseFaults | None = None
    rollout: RolloutFaults | None = None
    stream: list[StreamFault] = Field(default_factory=list)
    """Protocol-aware faults applied by the fault proxy between the driver and the pod."""
    crash_points: CrashPoints | None = None


_SQL_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|;|[A-Za-z_]+", re.S)


def single_select(query: str) -> str:
    """Accept one SELECT (or WITH ... SELECT) statement; the audit must never run anything else.

    Stores are opened read-only as well; this check says what is wrong before a
    run starts instead of failing its audit. Quotes and comments are skipped, so
    a ``;`` or a keyword inside a string literal does not count.
    """
    words: list[str] = []
    statements = 1
    for token in _SQL_TOKENS.findall(query):
        if token == ";":
            statements += 1
        elif token[0].isalpha() or token[0] == "_":
            if statements > 1:
                raise ValueError("must be a single SELECT statement; it has more after a ';'")
            words.append(token.upper())
    if not words or words[0] not in ("SELECT", "WITH"):
        raise ValueError(
            "must be a single SELECT (or WITH ... SELECT) statement that reads effects; "
            f"got one starting with {words[0] if words else 'nothing'!r}"
        )
    writes = sorted(set(words) & {"INSERT", "UPDATE", "DELETE", "DROP", "ALTER", "CREATE", "ATTACH"})
    if writes:
        raise ValueError(f"must only read; it uses {', '.join(writes)}")
    return query


class SqlEffects(_Model):
    """Count effects with a SQL query; it must yield ``marker`` and optionally ``effects`` columns."""

    url: str
    """``sqlite:///PATH`` (read by the auditor) or ``postgresql://...`` (read at the end of the run)."""
    query: str

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        _check_placeholders(v, AUDIT_PLACEHOLDERS, "audit.effects.sql.url")
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://", "{postgres_url}")):
            raise ValueError(f"unsupported database URL {v!r}; use sqlite:///PATH or postgresql://...")
        return v

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        return single_select(v)

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite:///")


class SinkEffects(_Model):
    """The harness serves an HTTP endpoint (``{sink_url}``) on 127.0.0.1 that the target calls as its
    downstream (a payment or mail provider); every call is one effect of the marker in its JSON body.
    For black-box images whose store the harness cannot read."""

    marker_field: str = "marker"
    dedupe_by_key: bool = False
    """Answer a call whose idempotency key (``Idempotency-Key`` header, else an ``idempotency_key``
    field) was seen before as a replay, as a payment provider does: it is recorded, not counted."""


class ToolEffects(_Model):
    """After the run, call a read-only tool of the target for its effects per marker.

    The tool's structured result must hold ``effects``: an object marker -> count,
    or a list of ``{"marker", "effects"}`` objects.
    """

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name, value in v.items():
            if isinstance(value, str):
                _check_placeholders(value, READ_TOOL_PLACEHOLDERS, f"audit.effects.tool.arguments.{name}")
        return v


class CommandEffects(_Model):
    """After the run, run a command that prints the effects: one ``marker,effects`` CSV line each.

    For stores no SQL reaches (a file of the target's own format, a remote API): the
    command may use the target's placeholders, and a header line ``marker,effects`` is
    allowed. A failing command is an audit error with its stderr.
    """

    command: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @field_validator("command")
    @classmethod
    def _placeholders(cls, v: list[str]) -> list[str]:
        for part in v:
            _check_placeholders(part, AUDIT_PLACEHOLDERS | {"python"}, "audit.effects.command.command")
        return v


class JsonlEffects(_Model):
    """Count records per marker in a JSON-lines file the target writes (one effect per line)."""

    path: str
    marker_field: str = "marker"

    @field_validator("path")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        _check_placeholders(v, AUDIT_PLACEHOLDERS, "audit.effects.jsonl.path")
        return v


class Effects(_Model):
    """Where the auditor finds the effects: exactly one source."""

    sql: SqlEffects | None = None
    sink: SinkEffects | None = None
    tool: ToolEffects | None = None
    command: CommandEffects | None = None
    jsonl: JsonlEffects | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Effects:
        chosen = [
            name for name in ("sql", "sink", "tool", "command", "jsonl") if getattr(self, name) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                f"audit.effects needs exactly one of sql, sink, tool, command, jsonl (got {chosen or 'none'})"
            )
        return self

    @property
    def collected_at_end(self) -> bool:
        """Sources read once at the end of the run (into effects.json), not by the auditor."""
        return (
            self.tool is not None
            or self.command is not None
            or (self.sql is not None and not self.sql.is_sqlite)
        )


class PostgresService(_Model):
    """A PostgreSQL cluster the harness starts for the run (in the run directory, on 127.0.0.1)."""

    database: str = Field(default="mcp_chaos", pattern=r"^[a-z_][a-z0-9_]{0,62}$")


class BalancerService(_Model):
    """A real load balancer between the driver and the replicas, started by the harness.

    ``retry`` is its policy when a backend fails: ``default`` is nginx's own (``error timeout``:
    a POST goes to another replica only if it never reached one), ``non_idempotent`` also
    re-sends a POST that a replica got and never answered (a duplicate the application never
    asked for), ``off`` never re-sends.
    """

    server: Literal["nginx"] = "nginx"
    retry: Literal["default", "non_idempotent", "off"] = "default"
    max_fails: int = Field(default=1, ge=0, le=1000)
    """nginx's passive health check (its default, 1): after this many failed requests a replica gets
    none for ``fail_timeout_s``; 0 never takes one out. With the default, three kills within ten
    seconds leave no replica to send to ("no live upstreams": 502) though each is back in a second."""
    fail_timeout_s: float = Field(default=10.0, gt=0, le=3600)


class Services(_Model):
    postgres: PostgresService | None = None
    balancer: BalancerService | None = None


class Audit(_Model):
    effects: Effects


class Gate(_Model):
    """Thresholds that turn findings into a failing exit code (for CI). Unset = no gate."""

    max_duplicates: int | None = Field(default=None, ge=0)
    max_duplicate_rate: float | None = Field(default=None, ge=0, le=1)
    max_lost: int | None = Field(default=None, ge=0)
    fail_inconclusive: bool = False
    """Fail when the run did not test what it planned (a planned fault that never happened)."""
    fail_on: list[Literal["duplicate", "lost", "applied_despite_error", "inconclusive"]] = Field(
        default_factory=list
    )
    """Fail on any intent with one of these verdicts (or an inconclusive run)."""
    expect: list[Literal["duplicate", "lost", "applied_despite_error"]] = Field(default_factory=list)
    """A canary: fail unless the run shows each of these. A target known to be broken that looks
    fine means the harness is what broke."""


class Scenario(_Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    description: str = ""
    seed: int = 0
    target: TargetSpec
    workload: WorkloadSpec
    client: ClientPolicy = Field(default_factory=ClientPolicy)
    faults: Faults = Field(default_factory=Faults)
    services: Services = Field(default_factory=Services)
    audit: Audit
    gate: Gate = Field(default_factory=Gate)

    @model_validator(mode="after")
    def _services_used(self) -> Scenario:
        texts = [*(self.target.command or ()), *self.target.env.values()]
        if self.audit.effects.sql is not None:
            texts.append(self.audit.effects.sql.url)
        if self.services.postgres is None and any("{postgres_url}" in t for t in texts):
            raise ValueError("{postgres_url} is used but services.postgres is not set")
        if self.audit.effects.sink is None and any("{sink_url}" in t for t in texts):
            raise ValueError("{sink_url} is used but audit.effects.sink is not set")
        return self

    @model_validator(mode="after")
    def _victims_exist(self) -> Scenario:
        replicas = self.target.replicas
        for name, fault in (("kill", self.faults.kill), ("pause", self.faults.pause)):
            victim = None if fault is None else fault.victim
            if isinstance(victim, int) and not 0 <= victim < replicas:
                raise ValueError(
                    f"faults.{name}.victim: there is no replica {victim} "
                    f"(target.replicas is {replicas}: use 0..{replicas - 1}, random or all)"
                )
        return self

    @model_validator(mode="after")
    def _balancer_fits(self) -> Scenario:
        if self.services.balancer is None:
            return self
        if self.target.transport == "stdio" or self.target.kubernetes is not None:
            raise ValueError(
                "services.balancer goes in front of HTTP replicas the harness runs; not with a stdio "
                "or Kubernetes target"
            )
        return self

    @model_validator(mode="after")
    def _kubernetes_fits(self) -> Scenario:
        if self.target.kubernetes is None:
            return self
        if self.target.replicas > 1:
            raise ValueError(
                "target.replicas runs pods on this machine; with target.kubernetes the cluster's "
                "Deployment has the replicas (its Service spreads the calls)"
            )
        kill = self.faults.kill
        if kill is not None and (kill.signal != "SIGKILL" or kill.victim != "random"):
            raise ValueError(
                "faults.kill.signal and victim are for pods the harness runs; with target.kubernetes "
                "use target.kubernetes.grace_period_s (the victim is a seeded Ready pod)"
            )
        if self.faults.rollout is not None:
            raise ValueError(
                "faults.rollout is for pods the harness runs; with target.kubernetes roll out with "
                "kubectl rollout restart, outside the run"
            )
        if self.faults.pause is not None:
            raise ValueError(
                "faults.pause is not supported with target.kubernetes (the API cannot freeze a pod); "
                "use faults.kill"
            )
        if self.faults.stream:
            raise ValueError(
                "faults.stream is not supported with target.kubernetes yet (the fault proxy fronts a pod "
                "the harness runs on 127.0.0.1)"
            )
        if self.audit.effects.sink is not None:
            raise ValueError(
                "audit.effects.sink listens on the harness's 127.0.0.1, which pods in a cluster cannot "
                "call; use sql, tool, command or jsonl"
            )
        return self

    @model_validator(mode="after")
    def _transport_fits(self) -> Scenario:
        if self.target.transport == "stdio":
            if self.faults.stream:
                raise ValueError(
                    "faults.stream needs an HTTP target (the fault proxy sits between the driver and an "
                    "HTTP server); a stdio target can be killed and paused"
                )
            if self.client.key_in == "header":
                raise ValueError("client.key_in: header needs an HTTP target; use meta or argument")
            if self.audit.effects.tool is not None:
                raise ValueError(
                    "audit.effects.tool reads over HTTP; with a stdio target use sql, jsonl or command"
                )
        return self

    @model_validator(mode="after")
    def _crash_points_fit(self) -> Scenario:
        crash = self.faults.crash_points
        if crash is None:
            return self
        target = self.target
        if (
            self.workload.concurrency != 1
            or target.replicas != 1
            or target.transport != "http"
            or target.kubernetes is not None
            or self.services.balancer is not None
        ):
            raise ValueError(
                "faults.crash_points counts the points of one call at a time: it needs "
                "workload.concurrency 1 and one HTTP pod the harness runs (no replicas, balancer, "
                "stdio or Kubernetes target)"
            )
        f = self.faults
        if f.kill is not None or f.pause is not None or f.rollout is not None or f.stream:
            raise ValueError(
                "faults.crash_points kills the pod itself, at its points; it does not mix with "
                "faults.kill, pause, rollout or stream"
            )
        kinds = set().union(*(hold.kinds() for hold in crash.holds))
        if crash.explore is not None and crash.explore.only:
            kinds |= {p.kind for name in crash.explore.only for p in parse_path(name)}
        if PointKind.DB_COMMIT in kinds and self.services.postgres is None:
            raise ValueError("a db_commit hold point needs services.postgres (the harness holds its commits)")
        if PointKind.DOWNSTREAM in kinds and self.audit.effects.sink is None:
            raise ValueError("a downstream hold point needs audit.effects.sink (the sink holds its reply)")
        return self

    def dump_yaml(self) -> str:
        """The scenario as run, loadable again (placeholders other than scenario_dir kept).

        Passwords in URLs are replaced with ``***``: this text goes into the run
        directory and the report. The audit never needs them again, since live
        stores are read once, at the end of the run, into ``effects.json``.
        """
        data = _map_strings(self.model_dump(mode="json"), lambda s: _URL_PASSWORD.sub(r"\1***\3", s))
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def url_passwords(self) -> list[str]:
        """Passwords written into URLs anywhere in the scenario, as written and URL-decoded."""
        found: set[str] = set()

        def collect(text: str) -> str:
            for match in _URL_PASSWORD.finditer(text):
                found.update((match[2], unquote(match[2])))
            return text

        _map_strings(self.model_dump(mode="json"), collect)
        return sorted(found)


_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)([^@/\s]+)(@)")
"""``scheme://user:password@``: the password is group 2."""


def _map_strings(node: Any, change: Callable[[str], str]) -> Any:
    if isinstance(node, str):
        return change(node)
    if isinstance(node, dict):
        return {k: _map_strings(v, change) for k, v in node.items()}
    if isinstance(node, list):
        return [_map_strings(v, change) for v in node]
    return node


def _substitute_scenario_dir(node: Any, scenario_dir: str) -> Any:
    if isinstance(node, str):
        return node.replace("{scenario_dir}", scenario_dir)
    if isinstance(node, dict):
        return {k: _substitute_scenario_dir(v, scenario_dir) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute_scenario_dir(v, scenario_dir) for v in node]
    return node


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.path=value`` override (value parsed as YAML) in place."""
    path, sep, raw = assignment.partition("=")
    if not sep or not path:
        raise ScenarioError(f"override {assignment!r} is not PATH=VALUE (e.g. workload.intents=100)")
    try:
        value = bounded_yaml.load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    except bounded_yaml.YamlTooLarge as exc:
        raise ScenarioError(f"override {assignment!r}: {exc}") from None
    node: dict[str, Any] = data
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"override {assignment!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _format_validation_error(source: str, exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling; see scenarios/README.md for the fields)"
    elif first["type"] == "missing":
        msg = "required field is missing"
    elif "input" in first and not isinstance(first["input"], dict | list):
        msg = f"{msg} (got {first['input']!r})"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {loc}: {msg}{more}"


def _first_todo(node: Any, path: str = "") -> str | None:
    """The first field whose value is a ``TODO`` that ``mcp-chaos init`` left for the user."""
    if isinstance(node, str):
        return (path or "(top level)") if node.startswith("TODO") else None
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found = _first_todo(value, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def parse_scenario(
    data: Any, *, source: str = "<scenario>", scenario_dir: Path | None = None, overrides: Sequence[str] = ()
) -> Scenario:
    """Validate already-parsed YAML data into a :class:`Scenario`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (name, seed, target, workload, ...)")
    data = dict(data)
    for assignment in overrides:
        apply_override(data, assignment)
    if scenario_dir is not None:
        data = _substitute_scenario_dir(data, str(scenario_dir))
    todo = _first_todo({k: v for k, v in data.items() if k != "description"})
    if todo is not None:
        raise ScenarioError(f"{source}: {todo} still says TODO (left by mcp-chaos init): fill it in")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_validation_error(source, exc)) from None


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file; every failure is one ScenarioError line."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"scenario file not found: {p} (pass a YAML file, e.g. scenarios/pod-kill.yaml)")
    try:
        data = bounded_yaml.load(p.read_text(encoding="utf-8"))
    except bounded_yaml.YamlTooLarge as exc:
        raise ScenarioError(f"{p}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{p}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc}") from None
    return parse_scenario(data, source=str(p), scenario_dir=p.resolve().parent, overrides=overrides)
