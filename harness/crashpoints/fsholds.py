"""File hold points: the harness's side of the file tracer (:mod:`harness.crashpoints.fstrace`).

A run whose crash points trace files starts one tracer for its pod's data directory
(a part of the run, started before the pods and stopped after them). Each time the
supervisor starts the pod, the tracer seizes it before anything else happens
(:meth:`FileTracer.attach`, when the run's bus says ``PodStarted``). Every durable file
operation the pod then makes there comes in as an event while the pod waits at its
entry; it is reported to the run's decision router (``fs_write#3``, labelled by its
path), which counts it in the call's window and may kill the pod right there, as at
a held commit. The tracer is then answered ``killed`` (the pod died before the
operation), else ``go``. In an ordinary run (``faults.kill.power_loss``) nothing is
held: the tracer only keeps its model of what is durable.

A crash planned as a power loss (``...@power_loss``) is a kill at the point and
then, before the supervisor starts the pod again (``PodDied``), the data
directory rolled back to what the tracer's model says was durable
(:meth:`FileTracer.after_crash`): the history records what the rollback changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from harness import leftovers
from harness.crashpoints.decisions import Decision, Reached, Site
from harness.crashpoints.points import PointKind, file_label, file_op
from harness.crashpoints.router import Router
from harness.errors import TargetStartError
from harness.events import DataRolledBack, ServiceStarted
from harness.history import HistoryWriter
from harness.pods.watchdog import guard
from harness.run.bus import Bus, PodDied, PodStarted

LINE_LIMIT = 1 << 20
"""The longest line the tracer's pipe is read in: a write's text (up to ``fstrace.TEXT_SENT``, 64 KiB) is
JSON-escaped in its event, up to 6 characters a byte (a control character), beside paths of up to 4 KiB.
asyncio's default of 64 KiB raised at such a line, the reading task died, and the pod waited at its
write for ever."""

SHADOW_PREFIX = "mcp-chaos-durable-"
"""The tracer's copy of what is durable (a file's bytes as of its last fsync): a temporary directory
named for its harness, removed with the run, and by ``cleanup`` after a harness that was killed."""
SERVICE = "file_tracer"
"""Its name in ``service_started`` events (``traced: false`` and the reason, where ptrace is refused)."""
ANSWER_TIMEOUT_S = 30.0
"""How long the harness waits for the tracer to attach or roll back before it gives up on it."""


class PowerLosses(Protocol):
    """Who knows whether the last kill was a power loss: the router (a kill at a point planned so) or, in
    an ordinary run, the supervisor (``faults.kill.power_loss``)."""

    def take_power_loss(self) -> bool:
        """Whether the last crash was a power loss (once: it is taken)."""
        ...


def file_point(
    op: str, paths: list[str], info: dict[str, Any] | None = None, text: str | None = None
) -> Reached:
    """A durable file operation (``write``, ``fsync``, ...) on ``paths`` of the data directory as the point it
    is: labelled by its paths with their random parts starred (a temporary file named anew each call), so
    the same operation is found in every call; with what the tracer said of its effect (``info``), from
    which an exploration tells the points that leave the same crash state. A write's ``text`` is what the
    router searches for markers when two calls are at work (a store's save names the notes it holds)."""
    return Reached(
        Site.FILES,
        PointKind(f"fs_{op}"),
        label=" -> ".join(file_label(p) for p in paths),
        detail={"paths": paths},
        payload=text.encode() if text else b"",
        op=file_op(paths, info or {}),
    )


def remove_stale_shadows(run_id: str | None = None) -> list[Path]:
    """Delete the durable copies of tracers whose harness is gone (``mcp-chaos cleanup``)."""
    return leftovers.remove_stale(SHADOW_PREFIX, run_id)


@dataclass(eq=False)
class FileTracer:
    """One run's file tracer: started once, attached to each pod as it starts."""

    data_dir: Path
    router: Router
    losses: PowerLosses
    history: HistoryWriter
    run_id: str
    _: KW_ONLY
    bus: Bus
    """Where it hears that the pod started (it seizes it) and died (it rolls the data back if planned)."""
    pod: str = "pod-0"
    """The pod it traces, by name (a run traces one)."""
    seen_as: str | None = None
    """The data directory as the pod names it (a container's ``target.data_mount``), if not as here."""
    refused: str | None = field(default=None, init=False)
    """Why ptrace is not allowed here, if it is not: the run has no file points then."""
    events: int = field(default=0, init=False)
    """File operations the tracer stopped the pod at (every one, in a call's window or not)."""
    _proc: asyncio.subprocess.Process | None = field(default=None, init=False)
    _pump: asyncio.Task[None] | None = field(default=None, init=False)
    _answers: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue, init=False)
    _shadow: Path | None = field(default=None, init=False)
    _deciding: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.bus.subscribe(PodStarted, self._started)
        self.bus.subscribe(PodDied, self._died)

    async def _started(self, event: PodStarted) -> None:
        if event.pod == self.pod:
            await self.attach(event.pid)

    async def _died(self, event: PodDied) -> None:
        if event.pod == self.pod:
            await self.after_crash()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FileTracer]:
        """The tracer, from before the pod starts until after it stopped."""
        remove_stale_shadows()
        self._shadow = leftovers.make(SHADOW_PREFIX, self.run_id)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "harness.crashpoints.fstrace",
            "--watch",
            str(self.data_dir),
            "--shadow",
            str(self._shadow / "durable"),
            *(["--seen-as", self.seen_as] if self.seen_as is not None else []),
            *(["--no-holds"] if not self.router.plan.decides else []),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        guard.directory(self._proc.pid, self._shadow)  # deleted once the tracer exits, should the harness die
        try:
            ready = await self._line()
            if "refused" in ready:  # no file points here: the run goes on without them, and says so
                self.refused = str(ready["refused"])
                self.history.emit(ServiceStarted(service=SERVICE, traced=False, reason=self.refused))
            elif "ready" not in ready:
                raise TargetStartError(f"the file tracer did not start: {ready.get('error', ready)}")
            else:
                self.history.emit(ServiceStarted(service=SERVICE, pid=self._proc.pid, traced=True))
                self._pump = asyncio.create_task(self._serve())
            yield self
        finally:
            await self._stop()

    async def attach(self, pid: int) -> None:
        """Seize the pod that just started (``PodStarted``); TargetStartError when it
        cannot be, which no retry changes. Nothing where ptrace is not allowed at all (``refused``)."""
        if self.refused is not None:
            return
        answer = await self._ask({"cmd": "attach", "pid": pid})
        if "error" in answer:
            raise TargetStartError(
                f"{answer['error']}: file hold points need ptrace (root, or the same user with "
                "kernel.yama.ptrace_scope 0 or 1; a container needs CAP_SYS_PTRACE); set "
                "faults.crash_points.files: false to explore without them"
            )

    async def after_crash(self) -> None:
        """Before the pod starts again (``PodDied``): a crash planned as a power
        loss rolls the data directory back to what was durable."""
        if not self.losses.take_power_loss() or self.refused is not None:
            return
        answer = await self._ask({"cmd": "rollback"})
        if "error" in answer:
            raise TargetStartError(str(answer["error"]))
        self.history.emit(DataRolledBack(changed=answer.get("rolled_back", [])))

    async def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self._send(command)
        try:
            return await asyncio.wait_for(self._answers.get(), ANSWER_TIMEOUT_S)
        except TimeoutError:
            raise TargetStartError(f"the file tracer did not answer {command['cmd']!r} in time") from None

    async def _serve(self) -> None:
        """Answer the tracer's events as they come; pass its answers to commands on."""
        while True:
            message = await self._line()
            if not message:
                await self._answers.put({"error": "the file tracer exited"})
                return
            if "event" not in message:
                await self._answers.put(message)
                continue
            self.events += 1
            self._deciding.add(asyncio.create_task(self._decide(message)))  # a hold must not stop the pump

    async def _decide(self, message: dict[str, Any]) -> None:
        """Tell the router the file operation the pod stopped at; answer the tracer with its decision."""
        text = message.get("text")
        point = file_point(
            str(message["op"]),
            [str(p) for p in message["paths"]],
            message.get("info"),
            text if isinstance(text, str) else None,
        )
        task = asyncio.current_task()
        try:
            killed = await self.router.reached(point) is not Decision.PASS
        finally:
            if task is not None:
                self._deciding.discard(task)
        self._send({"cmd": "killed" if killed else "go", "event": message["event"]})

    async def _line(self) -> dict[str, Any]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        raw = await self._proc.stdout.readline()
        return orjson.loads(raw) if raw else {}

    def _send(self, command: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return
        proc.stdin.write(orjson.dumps(command) + b"\n")

    async def _stop(self) -> None:
        for task in [self._pump, *self._deciding]:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._send({"cmd": "quit"})
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._shadow is not None:
            shutil.rmtree(self._shadow, ignore_errors=True)
            guard.undirectory(self._shadow)
