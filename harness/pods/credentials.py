"""A kubeconfig's exec credential plugin, run so that it cannot hold or outlive the harness.

The official client runs the plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``,
any command a kubeconfig names) with ``Popen(...).communicate()``: no deadline, in
the harness's own process group, from a worker thread. A plugin that hangs (waiting
for a login, a network that does not answer) held the run forever, ignored Ctrl-C
(the thread cannot be interrupted, and the interpreter waits for it on the way
out) and survived a SIGKILLed harness. The client also catches whatever the plugin
raises and only logs it, so a plugin that fails became a 401 later, far from its
cause.

:func:`install` swaps the ``subprocess`` the client's exec provider uses for one
whose ``Popen`` is :class:`PluginProcess`: the plugin runs in its own session (so
it can be killed as a group) and is handed to the watchdog, dies with the harness
(``PR_SET_PDEATHSIG``), and must answer within :data:`PLUGIN_TIMEOUT_S` or what is
left of the deadline its caller set (:func:`deadline`). A plugin that times out or
fails raises :class:`PluginFailed`, a ``BaseException`` so that it passes the
client's ``except Exception`` and reaches the runtime, which turns it into a
one-line error. :func:`kill_all` kills the groups of the plugins still running:
on Ctrl-C, at the end of the runtime, and at the interpreter's exit. The swap is
global, but the harness is the client's only user in its process, and the
provider's behaviour is otherwise the client's own (token refreshes included).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import signal
import subprocess
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

from kubernetes.config import exec_provider

from harness.pods.watchdog import guard
from harness.proctree import die_with_parent

PLUGIN_TIMEOUT_S = 30.0
"""How long a plugin may take when no deadline is set (a token refresh in the middle of a run)."""
STDERR_LIMIT = 300
"""Characters of a failed plugin's standard error quoted in the error."""

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("plugin_deadline", default=None)
_running: set[PluginProcess] = set()
_lock = threading.Lock()


class PluginFailed(BaseException):
    """The exec credential plugin timed out, or exited with an error: the message says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Plugins started inside (in this thread, or a thread this context is copied to) end by ``at``
    (``time.monotonic()``)."""
    token = _deadline.set(at)
    try:
        yield
    finally:
        _deadline.reset(token)


def _timeout() -> float:
    at = _deadline.get()
    return PLUGIN_TIMEOUT_S if at is None else max(0.0, min(PLUGIN_TIMEOUT_S, at - time.monotonic()))


class PluginProcess(subprocess.Popen[str]):
    """The plugin, in its own session, watched, and answering within its deadline."""

    def __init__(self, args: list[str], **kwargs: Any) -> None:
        kwargs.pop("start_new_session", None)
        super().__init__(args, start_new_session=True, preexec_fn=die_with_parent, **kwargs)
        self.command = str(args[0])
        with _lock:
            _running.add(self)
        guard.group(self.pid)

    def communicate(self, input: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        limit = _timeout()
        try:
            out, err = super().communicate(input, timeout=limit)
        except subprocess.TimeoutExpired:
            raise PluginFailed(
                f"the kubeconfig's credential plugin {self.command!r} did not answer within {limit:.1f}s"
            ) from None
        finally:
            self._end()
        if self.returncode != 0:
            said = " ".join((err or "").split())[-STDERR_LIMIT:]
            raise PluginFailed(
                f"the kubeconfig's credential plugin {self.command!r} exited with {self.returncode}"
                + (f": {said}" if said else "")
            )
        return out, err

    def _end(self) -> None:
        """Kill what is left of the plugin's group (a plugin may leave children), and forget it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(timeout=5)
        guard.ungroup(self.pid)
        with _lock:
            _running.discard(self)


def kill_all() -> None:
    """Kill every plugin still running (its thread's ``communicate`` then returns at once)."""
    with _lock:
        running = list(_running)
    for process in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def install() -> None:
    """Have the client's exec provider start plugins as :class:`PluginProcess` (once; idempotent)."""
    namespace = exec_provider.__dict__
    if getattr(namespace.get("subprocess"), "Popen", None) is PluginProcess:
        return
    namespace["subprocess"] = types.SimpleNamespace(Popen=PluginProcess, PIPE=subprocess.PIPE)
    atexit.register(kill_all)
