"""The command line in tests.

``main()`` in this process wherever no process lifecycle is under test (``mcp_chaos``): a child
interpreter costs about a second of start-up and imports per call. A real process
(``mcp_chaos_process``, ``start_cli_run``, or ``CLI`` for Popen) where a test is about signals,
process groups, a SIGKILLed harness, a deadline on a run that could hang, or what a real process
prints.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "harness.cli"]
"""``mcp-chaos`` as a child process runs it (the console script is a wrapper around the same main)."""


def mcp_chaos_process(
    *args: str | os.PathLike[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``mcp-chaos ARGS`` as a real process; ``env`` is added to this process's environment."""
    return subprocess.run(
        [*CLI, *(os.fspath(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def mcp_chaos(
    *args: str | os.PathLike[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mcp-chaos ARGS`` in this process: ``main()``, with what it prints captured as a process's would be.

    Standard output and error are swapped for buffers during the call, as capsys does; a plain
    function rather than a fixture, so that a test's helpers (``contract()``, ``gated()``) call it
    as they called the process. ``cwd`` and ``env`` (added to the environment) hold for the call
    only. Whatever the command changed of the process is put back (the environment, which a
    command may write to, as ``contract`` does for tiktoken's cache) or must already be back (the
    working directory, the handlers of the signals a run catches): the next test finds the
    process as this one did.
    """
    from harness.cli import main

    argv = [os.fspath(a) for a in args]
    out, err = _Captured(), _Captured()
    environ, cwd_before, handlers = dict(os.environ), os.getcwd(), _stop_handlers()
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.update(env or {})
        inside = os.getcwd()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, --help and --version
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)  # as the interpreter does on its way out
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        changed = os.getcwd() != inside
    finally:
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(environ)
    assert not changed, "mcp-chaos changed the working directory"
    assert _stop_handlers() == handlers, "mcp-chaos left its signal handlers installed"
    return subprocess.CompletedProcess(["mcp-chaos", *argv], code, out.text(), err.text())


class _Captured(io.TextIOWrapper):
    """A text stream over bytes, as a process's standard output is (``.buffer`` included)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="", write_through=True)

    def text(self) -> str:
        self.flush()
        assert isinstance(self.buffer, io.BytesIO)
        return self.buffer.getvalue().decode("utf-8", "replace")


def _stop_handlers() -> tuple[object, ...]:
    import signal

    return tuple(signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))


def _hangup_not_ignored() -> None:
    """A run started as a terminal starts it, whatever started the tests: under ``nohup`` the harness
    (rightly) leaves SIGHUP ignored, and a test that hangs up on it would find it still running."""
    import signal

    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_cli_run(
    tmp_path: Path, data: dict[str, Any], *, run_id: str, attempts: int = 30, timeout: float = 60
) -> tuple[subprocess.Popen[str], Path]:
    """``mcp-chaos run`` as a child process, returned once ``attempts`` attempts have ended."""
    import yaml

    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(data))
    results = tmp_path / "r"
    argv = [*CLI, "run", str(path), "--results", str(results), "--run-id", run_id]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_hangup_not_ignored
    )
    history = results / run_id / "history.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if history.exists() and history.read_bytes().count(b"attempt_ended") >= attempts:
            return proc, results / run_id
        time.sleep(0.1)
    proc.kill()
    proc.communicate()
    raise AssertionError(f"the run did not get going in {timeout:g}s")
