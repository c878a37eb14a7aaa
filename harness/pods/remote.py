"""The url runtime: a server that already runs, killed and restarted by the user's commands.

For a server the harness does not start (``target.url``): a staging deployment,
a docker compose stack, a server a test fixture started. There is nothing to
start, so the first :meth:`UrlPod.start` does nothing and the supervisor's
readiness check calls the URL. A kill runs ``target.kill_command`` (``docker
compose kill app``, ``systemctl kill``, a cloud CLI); the pod has "exited" once
that command exits 0, and the next :meth:`UrlPod.start` runs
``target.restart_command``, if there is one, before the supervisor waits for the
URL to answer again. A command that fails or outlives ``target.command_timeout_s``
fails the run with its output: a kill that did not happen would make every
later verdict about kills wrong. A kill command still running when the run ends
is killed, and the kill is a fault that did not finish (:class:`FaultUnfinished`:
the supervisor records it, and the run is inconclusive), never a kill that happened.

Each command is a child of the harness in a session of its own, with the
harness's environment, its output appended to the pod's log in the run
directory. Its values are data (:func:`harness.pods.factory.user_command`): an
argv list gets each as one word, a shell line refers to each through its
environment. When a command exits, what it left in its process group is killed:
a kill's background child must not strike later, unrecorded. A restart that
exits 0 is the one exception: it may leave the server it started running in the
background (``server &``, or detached in a session of its own, which no group
kill reaches anyway). A timeout, Ctrl-C or the end of the run kills the whole
group of a command still running, and the watchdog does if the harness is
SIGKILLed. The kill is started synchronously, so the fault's event precedes what
it breaks; it is waited for asynchronously, so the driver goes on meanwhile (an
attempt in flight when the server dies is broken by the kill, and the history
says so).

What the harness cannot see here is a server that dies on its own: it has no
process to watch. A server that stops answering after a fault is still caught by
the liveness watch (``pod_unavailable``). At the end of a run, a server left down
by a kill (the run stopped before its restart) is started again with the restart
command, so the harness leaves it as it found it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import FaultUnfinished, TargetError, TargetStartError
from harness.pods.process import append_log
from harness.pods.watchdog import guard
from harness.proctree import die_with_parent
from harness.redaction import mask_url_passwords

POLL_S = 0.02
"""How often a running command is looked at (it is not an asyncio child: the kill starts it synchronously)."""


@dataclass(frozen=True, slots=True)
class UserCommand:
    """A command of the scenario, ready to run: its argv (placeholders and ``${VAR}`` filled in) and how
    the scenario wrote it (what the log and errors show: the expanded words may hold secrets)."""

    field: str
    """``target.kill_command`` or ``target.restart_command``."""
    argv: list[str]
    written: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """What a shell line's references hold (its values, secrets among them: the line holds none)."""


def _exit_code(proc: subprocess.Popen[bytes]) -> int | None:
    """A command's exit code (negative: the signal that ended it) once it exited, None while it runs;
    its leader stays unreaped (``WNOWAIT``), so its group's id stays its own."""
    info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL what is left of a command's process group (its leader not reaped yet)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class UrlPod:
    """A server at a URL, killed and restarted only by the scenario's commands."""

    def __init__(
        self,
        name: str,
        *,
        url: str,
        kill: UserCommand | None,
        restart: UserCommand | None,
        env: Mapping[str, str],
        log_path: Path,
        timeout_s: float,
    ) -> None:
        self.name = name
        self.url = url
        self.kill_command = kill
        self.restart_command = restart
        self.env = dict(env)
        self.log_path = log_path
        self.timeout_s = timeout_s
        self._started = False
        self._down = False
        """A kill ran, and no start since: the server is (meant to be) down."""
        self._killing: tuple[subprocess.Popen[bytes], float] | None = None
        """The kill command while it runs, with when it started."""
        self._running: set[subprocess.Popen[bytes]] = set()
        """Every command still running: what :meth:`stop` kills."""
        self._cut: set[subprocess.Popen[bytes]] = set()
        """Commands :meth:`stop` killed before they exited: they did not finish."""
        self._stopped = asyncio.Event()
        """Set by :meth:`stop`: the supervisor's wait ends (the server itself runs on)."""

    @property
    def pid(self) -> int | None:
        """0 once the server was first reached: it runs somewhere, with no pid on this machine."""
        return 0 if self._started else None

    # -- running a command
    def _spawn(self, command: UserCommand, why: str) -> subprocess.Popen[bytes]:
        """Start ``command`` in a session of its own, its output appended to the pod's log."""
        with append_log(self.log_path) as log:
            log.write(f"--- {why}: {command.written}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    command.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**self.env, **command.env},
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            except OSError as exc:
                raise TargetError(
                    f"{command.field} cannot be run: {command.argv[0]!r}: {exc.strerror or exc}"
                ) from None
        self._running.add(proc)
        guard.group(proc.pid)
        return proc

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill a command's whole group and reap it (a timeout, Ctrl-C, the end of the run).

        Its leader is reaped last: until then its pid, the group's id, is given to no other process."""
        if proc.returncode is None:
            _kill_group(proc)
            proc.wait()
        self._forget(proc)

    def _forget(self, proc: subprocess.Popen[bytes]) -> None:
        if proc in self._running:
            self._running.discard(proc)
            guard.ungroup(proc.pid)

    async def _finish(
        self, proc: subprocess.Popen[bytes], command: UserCommand, since: float, *, may_leave: bool = False
    ) -> None:
        """Until ``proc`` exits 0; TargetError with its log's tail if it fails, outlives the timeout or is
        ended by :meth:`stop` first.

        Once it exits, what it left in its group is killed, unless ``may_leave`` and it exited 0 (a
        restart may start the server in the background)."""
        try:
            rc = await self._exited(proc, command, since)
        except BaseException:
            self._end(proc)  # timed out, ended by stop, cancelled (Ctrl-C): the command must not outlive it
            raise
        if proc.returncode is None and not (may_leave and rc == 0):
            _kill_group(proc)
        proc.wait()
        self._forget(proc)
        with append_log(self.log_path) as log:
            log.write(f"--- exit {rc}\n".encode())
        if rc != 0:
            raise TargetError(
                f"{command.field} ({command.written}) exited with code {rc} (log: {self.log_path})",
                details=self.log_tail(),
            )

    async def _exited(self, proc: subprocess.Popen[bytes], command: UserCommand, since: float) -> int:
        """Its exit code once it exited, the leader left unreaped; TargetError if it is first timed out
        or ended by :meth:`stop`."""
        while True:
            if proc in self._cut:
                self._cut.discard(proc)
                raise TargetError(
                    f"{command.field} ({command.written}) had not finished when the run ended; it was "
                    f"killed (log: {self.log_path})",
                    details=self.log_tail(),
                )
            if proc.returncode is not None:  # it had exited when stop() reaped it
                return proc.returncode
            if (rc := _exit_code(proc)) is not None:
                return rc
            if time.monotonic() - since > self.timeout_s:
                raise TargetError(
                    f"{command.field} ({command.written}) was still running after "
                    f"{self.timeout_s:g}s (target.command_timeout_s); it was killed "
                    f"(log: {self.log_path})",
                    details=self.log_tail(),
                )
            await asyncio.sleep(POLL_S)

    # -- the Pod protocol
    async def start(self) -> int:
        """Nothing the first time (the server runs); after a kill, the restart command, if any."""
        if self._down and self.restart_command is not None:
            proc = self._spawn(self.restart_command, "restart")
            try:
                await self._finish(proc, self.restart_command, time.monotonic(), may_leave=True)
            except TargetError as exc:
                raise TargetStartError(exc.message, details=exc.details) from None
        self._down = False
        self._started = True
        return 0

    def kill(self, sig: str = "SIGKILL") -> bool:
        """Start the kill command (the server dies however it says); False without one, or while one runs."""
        if self.kill_command is None or not self._started or self._killing is not None:
            return False
        self._killing = (self._spawn(self.kill_command, "kill"), time.monotonic())
        self._down = True
        return True

    def pause(self) -> bool:
        return False  # the scenario refuses faults.pause with target.url

    def resume(self) -> bool:
        return False

    async def wait(self) -> int:
        """Until a kill command has exited 0 (-1: the server's own exit code is not known here).

        A server that dies on its own is not seen: there is no process of it to watch. Ends (0) when
        :meth:`stop` is called: the harness lets go of the server, which runs on."""
        while self._killing is None:
            if self._stopped.is_set():
                return 0
            await asyncio.sleep(POLL_S)
        proc, since = self._killing
        assert self.kill_command is not None, "a kill runs only with a kill command"
        try:
            await self._finish(proc, self.kill_command, since)
        except TargetError as exc:
            raise FaultUnfinished(exc.message, details=exc.details) from None
        finally:
            self._killing = None
        return -1

    async def stop(self, timeout: float) -> None:
        """End any command still running; the server stays as it is, started again if a kill left it down.

        The restart at the end runs under ``target.command_timeout_s``; if it fails, TargetError says so
        (the server is down, and the user must know)."""
        self._stopped.set()
        for proc in list(self._running):
            if proc.returncode is None and _exit_code(proc) is None:
                self._cut.add(proc)  # it did not finish: its wait() or start() says so
            self._end(proc)
        if self._down and self.restart_command is not None:
            await self.start()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines the commands printed (:func:`append_log` keeps the file a regular one)."""
        if not self.log_path.is_file():
            return "(no log: no command ran)"
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def identity(self) -> dict[str, str]:
        return {"url": mask_url_passwords(self.url)}
