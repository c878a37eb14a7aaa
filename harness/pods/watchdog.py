"""A watchdog process that cleans up after a harness that was SIGKILLed.

Nothing in a SIGKILLed process runs, and ``PR_SET_PDEATHSIG`` reaches only its
direct children: a target started through a wrapper (``sh -c "python
server.py"``) kept its server listening, and PostgreSQL's temporary cluster
(41 MB) stayed on disk. So the harness starts one small process of its own, in
its own session (a closed terminal or Ctrl-C does not reach it), and tells it
over a pipe what to clean: process groups of pods (with their descendants that
left the group, remembered once a second), and directories to delete once a
given process has exited. When the pipe reaches end of file, the harness is
gone, however it ended; the watchdog then does what is still registered and
exits. A harness that ends normally releases everything first, so its watchdog
does nothing. Containers are not its business: ``mcp-chaos cleanup`` finds
those by label.

Logs: the target and the services write their logs themselves, and a target may
log its token; a harness redacts them once they stop (``TargetWiring.redact_logs``).
A SIGKILLed one cannot, so it tells the watchdog the secrets and the logs too, and
the watchdog redacts them (:mod:`harness.redaction`) once it has killed the writers.

The protocol is one line per order: ``group PGID``, ``ungroup PGID``,
``dir PID PATH`` (delete PATH once PID has exited), ``undir PATH``, ``secret HEX``
(a secret's UTF-8 in hex: a secret may hold any character), ``logs PATH`` (redact
the ``*.log`` files of directory PATH, or file PATH), ``unlogs PATH``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from harness.proctree import Process, descendants, signal_if_same
from harness.redaction import Redactor

POLL_S = 1.0
"""How often the watchdog notes the descendants of each guarded group (escapers are seen by then)."""
DIR_WAIT_S = 15.0
"""How long the watchdog waits for a directory's process to exit before deleting the directory anyway."""


class _Guard:
    """Parent side: a pipe to the watchdog, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def _send(self, line: str) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "harness.pods.watchdog"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            atexit.register(self.close)
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
            self._proc.stdin.flush()

    def close(self) -> None:
        """End the watchdog (it cleans whatever is still registered, normally nothing) and reap it."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(DIR_WAIT_S + 5)

    def group(self, pgid: int) -> None:
        self._send(f"group {pgid}")

    def ungroup(self, pgid: int) -> None:
        self._send(f"ungroup {pgid}")

    def directory(self, pid: int, path: Path) -> None:
        self._send(f"dir {pid} {path}")

    def undirectory(self, path: Path) -> None:
        self._send(f"undir {path}")

    def logs(self, secrets: list[str], paths: list[Path]) -> None:
        """Redact the logs at ``paths`` of ``secrets`` should the harness die before it does."""
        for secret in secrets:
            self._send(f"secret {secret.encode('utf-8', 'surrogatepass').hex()}")
        for path in paths:
            self._send(f"logs {path}")

    def unlogs(self, paths: list[Path]) -> None:
        if self._proc is not None:
            for path in paths:
                self._send(f"unlogs {path}")


guard = _Guard()
"""The harness's one watchdog."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def redact_logs(paths: list[Path], redactor: Redactor) -> None:
    """Rewrite each log (a file, or the ``*.log`` of a directory) with the secrets hidden."""
    if not redactor:
        return
    for path in paths:
        if path.is_symlink():  # a folder linked elsewhere by what ran: its files are not the run's logs
            continue
        for log in sorted(path.glob("*.log")) if path.is_dir() else [path]:
            with contextlib.suppress(OSError):
                # A link (a file outside the run) is never read nor rewritten; a FIFO would block.
                if not stat.S_ISREG(log.lstat().st_mode):
                    continue
                text = log.read_text(encoding="utf-8", errors="surrogateescape")
                redacted = redactor.text(text)
                if redacted != text:
                    log.write_text(redacted, encoding="utf-8", errors="surrogateescape")


def _clean(groups: dict[int, set[Process]], dirs: dict[str, int]) -> None:
    for pgid, seen in groups.items():
        seen.update(descendants(pgid))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        for process in seen:
            signal_if_same(process, signal.SIGKILL)
    for path, pid in dirs.items():
        deadline = time.monotonic() + DIR_WAIT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:  # pragma: no cover - runs as its own process; tested through a SIGKILLed harness
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the harness's end ends the watchdog
    groups: dict[int, set[Process]] = {}
    dirs: dict[str, int] = {}
    secrets: set[str] = set()
    logs: dict[str, None] = {}
    pending = b""
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if not ready:
            for pgid, seen in groups.items():
                seen.update(descendants(pgid))
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            order, _, rest = raw.decode("utf-8", "surrogateescape").partition(" ")
            if order == "group":
                groups.setdefault(int(rest), set())
            elif order == "ungroup":
                groups.pop(int(rest), None)
            elif order == "dir":
                pid, _, path = rest.partition(" ")
                dirs[path] = int(pid)
            elif order == "undir":
                dirs.pop(rest, None)
            elif order == "secret":
                secrets.add(bytes.fromhex(rest).decode("utf-8", "surrogatepass"))
            elif order == "logs":
                logs[rest] = None
            elif order == "unlogs":
                logs.pop(rest, None)
    _clean(groups, dirs)  # the writers are dead: their logs are whole
    redact_logs([Path(p) for p in logs], Redactor(secrets))


if __name__ == "__main__":
    main()
