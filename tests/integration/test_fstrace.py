"""The file tracer against real processes: what it stops a process at, in every way a server writes its
files (threads, a child process), what a power loss leaves, and that it never leaves a process stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.crashpoints.fsholds import LINE_LIMIT
from tests.helpers.processes import alive

pytestmark = pytest.mark.integration

WRITER = textwrap.dedent(
    """
    import os, sys, threading, subprocess
    d = sys.argv[1]
    sys.stdin.readline()  # traced from here
    def save(name, text, sync):
        with open(os.path.join(d, name + ".tmp"), "w") as f:
            f.write(text)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))
    save("main.json", "main", True)
    fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
    worker = threading.Thread(target=save, args=("thread.json", "thread", False))
    worker.start(); worker.join()
    subprocess.run([sys.executable, "-c", f"open({os.path.join(d, 'child.txt')!r}, 'w').write('child')"])
    os.mkdir(os.path.join(d, "sub"))
    os.unlink(os.path.join(d, "old.txt"))
    open("/tmp/not-watched-%d" % os.getpid(), "w").write("elsewhere")
    print("done", flush=True)
    sys.stdin.readline()
    """
)


FILTERED = [sys.executable, "-m", "harness.crashpoints.filtered", "--"]
"""The launcher of a traced process pod: once seized, a seccomp filter stops it at watched calls only."""


class Traced:
    """A writer under the tracer: events are answered ``go`` as they come. ``launcher``: started through
    it (the seccomp filter of :mod:`harness.crashpoints.filtered`), or stopped at every system call."""

    def __init__(self, tmp_path: Path, launcher: list[str] | None = None, writer: str = WRITER) -> None:
        self.data = tmp_path / "data"
        self.data.mkdir()
        (self.data / "old.txt").write_text("old")
        (self.data / "main.json").write_text("before")
        self.tracer = subprocess.Popen(
            [sys.executable, "-m", "harness.crashpoints.fstrace", "--watch", str(self.data), "--shadow",
             str(tmp_path / "shadow")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert "ready" in self.read()
        self.writer = subprocess.Popen(
            [*(launcher or []), sys.executable, "-c", writer, str(self.data)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.send({"cmd": "attach", "pid": self.writer.pid})
        assert self.read() == {"attached": self.writer.pid}

    def send(self, command: dict[str, Any]) -> None:
        assert self.tracer.stdin is not None
        self.tracer.stdin.write(json.dumps(command) + "\n")
        self.tracer.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.tracer.stdout is not None
        message: dict[str, Any] = json.loads(self.tracer.stdout.readline())
        return message

    def run(self) -> list[tuple[str, list[str]]]:
        """Let the writer write everything, answering ``go``; the operations seen."""
        assert self.writer.stdin is not None
        self.writer.stdin.write("go\n")
        self.writer.stdin.flush()
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            event = self.read()
            seen.append((event["op"], event["paths"]))
            self.send({"cmd": "go", "event": event["event"]})
            if event["op"] == "unlink":
                break
        assert self.writer.stdout is not None
        assert self.writer.stdout.readline() == "done\n"
        return seen

    def close(self) -> None:
        for proc in (self.writer, self.tracer):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


@pytest.fixture(params=["every_call", "filtered"])
def traced(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Traced]:
    one = Traced(tmp_path, FILTERED if request.param == "filtered" else None)
    try:
        yield one
    finally:
        one.close()


def test_every_durable_operation_is_seen_from_every_thread_and_child(traced: Traced) -> None:
    seen = traced.run()
    assert seen == [
        ("truncate", ["main.json.tmp"]),
        ("write", ["main.json.tmp"]),
        ("fsync", ["main.json.tmp"]),
        ("rename", ["main.json.tmp", "main.json"]),
        ("fsync", ["."]),
        ("truncate", ["thread.json.tmp"]),  # a thread of the process
        ("write", ["thread.json.tmp"]),
        ("rename", ["thread.json.tmp", "thread.json"]),
        ("truncate", ["child.txt"]),  # a child it started
        ("write", ["child.txt"]),
        ("create", ["sub/"]),
        ("unlink", ["old.txt"]),
    ]  # and nothing of the file outside the watched directory


LONG_TEXT = '"\\n\x01' * 16000 + "ns-m0000001"
"""64,011 characters of text that JSON escapes to 6 and more a character: a save of a file store."""
LONG_WRITER = textwrap.dedent(
    f"""
    import os, sys
    sys.stdin.readline()  # traced from here
    with open(os.path.join(sys.argv[1], "notes.jsonl"), "w") as f:
        f.write({LONG_TEXT!r})
    print("done", flush=True)
    sys.stdin.readline()
    """
)


def test_a_long_writes_text_comes_whole_in_a_line_the_harness_reads(tmp_path: Path) -> None:
    """A write's text is sent whole (up to 64 KiB), JSON-escaped: its line is longer than asyncio reads
    by default, and the harness reads it with a limit of its own (a longer line killed its reader and
    the pod waited at the write for ever)."""
    traced = Traced(tmp_path, writer=LONG_WRITER)
    try:
        assert traced.writer.stdin is not None
        traced.writer.stdin.write("go\n")
        traced.writer.stdin.flush()
        assert traced.tracer.stdout is not None
        while True:
            line = traced.tracer.stdout.readline()
            event = json.loads(line)
            traced.send({"cmd": "go", "event": event["event"]})
            if event["op"] == "write":
                break
        assert len(line.encode()) > 65536  # what asyncio's StreamReader takes at most by default
        assert len(line.encode()) < LINE_LIMIT
        assert event["text"] == LONG_TEXT
    finally:
        traced.close()


def test_the_launcher_filters_the_process_it_runs_once_seized(tmp_path: Path) -> None:
    traced = Traced(tmp_path, FILTERED)
    try:
        traced.run()
        status = Path(f"/proc/{traced.writer.pid}/status").read_text()
        assert "Seccomp:\t2" in status  # the writer runs under the filter (mode 2), with its own pid
    finally:
        traced.close()
    # Not seized within its wait, the launcher runs the command as it is, unfiltered.
    launcher = [sys.executable, "-m", "harness.crashpoints.filtered", "--wait-s", "0.2", "--"]
    alone = subprocess.run(
        [*launcher, sys.executable, "-c", "print(open('/proc/self/status').read())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "Seccomp:\t0" in alone.stdout


def test_a_power_loss_keeps_only_what_was_made_durable(traced: Traced) -> None:
    traced.run()
    traced.writer.kill()
    traced.writer.wait()
    traced.send({"cmd": "rollback"})
    changed = traced.read()["rolled_back"]
    data = traced.data
    assert (data / "main.json").read_text() == "main"  # fsynced, renamed, the directory fsynced
    assert (data / "old.txt").read_text() == "old"  # its unlink was never made durable
    assert not (data / "thread.json").exists()  # renamed after the directory's last fsync
    assert not (data / "child.txt").exists()
    assert not (data / "sub").exists()
    assert changed == ["child.txt", "old.txt", "sub/", "thread.json"]  # a directory ends in /


def test_a_tracer_that_dies_takes_the_stopped_process_with_it(traced: Traced) -> None:
    assert traced.writer.stdin is not None
    traced.writer.stdin.write("go\n")
    traced.writer.stdin.flush()
    traced.read()  # the writer is stopped at its first operation, waiting for an answer
    os.kill(traced.tracer.pid, signal.SIGKILL)
    traced.tracer.wait()
    deadline = time.monotonic() + 10
    while alive(traced.writer.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(traced.writer.pid)  # PTRACE_O_EXITKILL: never left stopped


def test_a_process_it_cannot_trace_is_one_line(tmp_path: Path) -> None:
    tracer = subprocess.Popen(
        [sys.executable, "-m", "harness.crashpoints.fstrace", "--watch", str(tmp_path), "--shadow",
         str(tmp_path / "shadow")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert tracer.stdout is not None
        assert tracer.stdin is not None
        tracer.stdout.readline()
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
        pid = int(gone.stdout)  # a process that has ended: nothing to seize
        tracer.stdin.write(json.dumps({"cmd": "attach", "pid": pid}) + "\n")
        tracer.stdin.flush()
        answer = json.loads(tracer.stdout.readline())
        assert answer["error"].startswith(f"cannot trace pid {pid}: ")
        assert "\n" not in answer["error"]
    finally:
        tracer.kill()
        tracer.wait()
        for pipe in (tracer.stdin, tracer.stdout):
            if pipe is not None:
                pipe.close()


def test_this_machine_lets_the_tracer_trace() -> None:
    """Where ptrace is refused the tracer says so at its start and the run goes on without file points
    (and an exploration that needed them is inconclusive, saying why); here it is allowed."""
    from harness.crashpoints.fstrace import may_trace

    assert may_trace() is None
