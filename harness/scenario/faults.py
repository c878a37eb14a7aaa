"""``faults``: what breaks the target during a run: kills, pauses, rollouts, the fault proxy's rules,
crash points (``crash_points``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, model_validator

from harness.history import StreamFaultKind
from harness.scenario.crash_points import CrashPoints
from harness.scenario.headers import ToolName
from harness.scenario.section import Section
from harness.scenario.window import Window

HoldDispatch = bool | Literal["auto"]
"""Whether a due pod fault that waits for its pod holds new intents back: never, at once, or only
when it would otherwise be late (``auto``: see :mod:`harness.faults.pacing`)."""


class KillFaults(Section):
    """SIGKILL the pod at seeded points of the run, then restart it (like a crashed pod)."""

    count: int | None = Field(default=None, ge=0, le=10_000)
    """This many kills, at seeded points spread over the workload's progress."""
    mean_interval_s: float | None = Field(default=None, gt=0, le=86_400)
    """Or: kills at seeded exponential intervals for as long as the run lasts."""
    window: Window = Window(0.05, 0.95)
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
    power_loss: bool = False
    """Each kill is a power loss, as a node failure is to a pod's volume: after the SIGKILL, the pod's
    data directory is rolled back to what it had made durable (file bytes as of their last fsync,
    names as of their directory's last fsync) before it restarts. The pod's file operations are
    traced for the whole run (ptrace: a process or a container, one replica), which slows them."""
    hold_dispatch: HoldDispatch = "auto"
    """Counted kills: while a kill is due but waits for the pod (down, or not up for min_uptime_s),
    start no new intent (retries go on). ``true``: from the kill's trigger on (it lands right after
    its intent). ``auto`` (the default): only once the workload would otherwise pass the next
    kill's trigger or come within ``concurrency`` intents of its end, so every planned kill happens
    in its turn, and a run whose kills all come in time is not touched. ``false``: never (a kill
    may then come late, or not at all: the run is inconclusive). A held kill whose pod is ready
    re-opens dispatch and waits (at most 1 s) for work in flight before it strikes."""

    @model_validator(mode="after")
    def _one_way(self) -> KillFaults:
        if (self.count is None) == (self.mean_interval_s is None):
            raise ValueError("faults.kill needs exactly one of count or mean_interval_s")
        self.window.check("faults.kill.window")
        return self


class PauseFaults(Section):
    """Freeze the pod (SIGSTOP / the cgroup freezer) for ``duration_s`` at seeded points, then resume it.

    A frozen pod keeps its connections: clients time out and retry, and when the pod
    thaws it serves the originals and the retries together.
    """

    count: int = Field(ge=0, le=10_000)
    """How many pauses, stratified over the workload's progress."""
    duration_s: float = Field(gt=0, le=600)
    """How long each pause lasts before the pod is thawed."""
    window: Window = Window(0.05, 0.95)
    """The part of the workload (fractions of intents dispatched) in which counted pauses land."""
    min_uptime_s: float = Field(default=0.0, ge=0, le=3600)
    """A pause waits until the pod has been ready this long."""
    hold_dispatch: HoldDispatch = False
    """As for kills: start no new intent while a due pause waits for the pod (``true``, or ``auto``
    when it would otherwise be late); by default the workload goes on."""
    victim: Literal["random", "all"] | StrictInt = "random"
    """With replicas: which pod each pause freezes (as for kills)."""

    @model_validator(mode="after")
    def _window(self) -> PauseFaults:
        self.window.check("faults.pause.window")
        return self


class StreamFault(Section):
    """One rule of the fault proxy: which exchanges it hits and what it does to them.

    An exchange is hit when it matches ``tool``/``method`` (and ``intent``/``attempt``
    when given) and a seeded draw per (rule, intent, attempt) falls under
    ``probability``: the same attempts are hit in every run with the same seed,
    however the run's timing falls out. The first rule that hits wins.
    """

    fault: StreamFaultKind
    """``sever_request``, ``sever_response`` (cut the connection), ``stall`` (hold past the client's
    timeout) or ``delay``."""
    tool: ToolName | None = None
    """Only exchanges calling this tool (``Mcp-Name``); default: any."""
    method: str = "tools/call"
    """The JSON-RPC method the rule matches."""
    intent: int | None = Field(default=None, ge=0)
    """An explicit plan: only this intent (``probability`` then defaults to 1)."""
    attempt: int | None = Field(default=None, ge=1)
    """An explicit plan: only this attempt number of each intent."""
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
    """``delay``: how long the request or the response is held."""
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


class RolloutFaults(Section):
    """Deploys: replace every replica one by one, as a Deployment's rolling update does.

    Each replica in turn stops getting new attempts, gets ``signal`` (SIGTERM: it may finish
    what it has), then SIGKILL after ``grace_s`` if it is still running; it is started again,
    and the next replica goes only once it is ready. Rollouts start at seeded points of the
    workload, like counted kills.
    """

    count: int = Field(default=1, ge=0, le=1000)
    """How many rollouts, at seeded points of the workload."""
    window: Window = Window(0.1, 0.6)
    """The part of the workload (a fraction of its intents, from and to) where rollouts start."""
    signal: Literal["SIGKILL", "SIGTERM"] = "SIGTERM"
    """The signal each replica gets: ``SIGTERM`` (a graceful stop) or ``SIGKILL`` (a crash)."""
    grace_s: float = Field(default=30.0, ge=0, le=600)
    """After the signal, SIGKILL once this long has passed."""

    @model_validator(mode="after")
    def _window(self) -> RolloutFaults:
        self.window.check("faults.rollout.window")
        return self


class Faults(Section):
    kill: KillFaults | None = None
    """SIGKILL (or SIGTERM) the pod at seeded points: counted over the workload or timed."""
    pause: PauseFaults | None = None
    """Freeze the pod (SIGSTOP or the cgroup freezer), then thaw it."""
    rollout: RolloutFaults | None = None
    """A rolling update: each replica in turn stopped and started again."""
    stream: list[StreamFault] = Field(default_factory=list)
    """Protocol-aware faults applied by the fault proxy between the driver and the pod."""
    crash_points: CrashPoints | None = None
    """Hold the target at a point of its call and kill it there (held, explored, or ordered)."""
