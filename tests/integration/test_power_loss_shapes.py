"""What a power loss leaves, shape by shape, checked against the files on disk.

Each shape is a small program doing one thing servers do with their files: in a forked child, in
threads, in a shell it execs; renames across directories and across the data directory's edge; hard
and symbolic links; FIFOs; sockets; mmap. It runs traced as a run's power losses trace a pod (the
seccomp launcher, ``--no-holds``: the model kept, nothing held), is killed, and the data directory is
rolled back. The data directory, and the directory beside it that the program also used, must then
be exactly what a power loss keeps (:mod:`harness.crashpoints.durable`): bytes that were fsynced,
names whose directory was fsynced, a file renamed in from outside and never made durable back where
it came from, nothing outside removed or made up, and every entry that is not a file (a link, a
FIFO, a socket) kept as an entry, never opened.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

FILTERED = [sys.executable, "-m", "harness.crashpoints.filtered", "--"]
ANSWER_S = 20.0
"""How long the tracer may take to answer: a read that blocks (a FIFO) never answers."""
TRACER_MEMORY = 1 << 30
"""The tracer's address space: a read without end (a link to /dev/zero) fails at it, not the machine."""

PRELUDE = """
import mmap, os, socket, subprocess, sys, threading
d, o = sys.argv[1], sys.argv[2]

def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)

def write(path, text, sync=False):
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())

def bind(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    return s

sys.stdin.readline()  # traced from here
"""
EPILOGUE = """
print("done", flush=True)
sys.stdin.readline()
"""


def nothing(data: Path, outside: Path) -> None:
    """No files before the program runs."""


@dataclass(frozen=True)
class Shape:
    """A program (with ``d`` the data directory and ``o`` the one beside it) and what a power loss
    leaves after it: each path as :func:`tree` describes it (``{o}`` stands for the one beside)."""

    program: str
    data: dict[str, str]
    outside: dict[str, str] = field(default_factory=dict)
    before: Callable[[Path, Path], None] = nothing


def tree(root: Path) -> dict[str, str]:
    """Everything under ``root`` as what it is: a file's text (``(x2)``: one of two hard links), ``dir``,
    ``-> target``, ``fifo``, ``socket``. Nothing followed, nothing opened but regular files."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            mode = path.lstat().st_mode
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(mode):
                found[rel] = f"-> {os.readlink(path)}"
            elif stat.S_ISDIR(mode):
                found[rel] = "dir"
            elif stat.S_ISREG(mode):
                links = path.lstat().st_nlink
                found[rel] = path.read_text() + (f" (x{links})" if links > 1 else "")
            else:
                found[rel] = "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
    return found


def files(**contents: str) -> Callable[[Path, Path], None]:
    """Files made before the program runs: ``data__name`` in the data directory, ``out__name`` beside."""

    def make(data: Path, outside: Path) -> None:
        for key, text in contents.items():
            where, _, name = key.partition("__")
            path = (data if where == "data" else outside) / name.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    return make


def symlink_to_store(data: Path, outside: Path) -> None:
    (outside / "store.txt").write_text("s")
    (data / "store").symlink_to(outside / "store.txt")


def symlink_to_directory(data: Path, outside: Path) -> None:
    (outside / "dir").mkdir()
    (outside / "dir" / "f.txt").write_text("f")
    (data / "current").symlink_to(outside / "dir")


def bound_socket(data: Path, outside: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(data / "ctl.sock"))


SHAPES = {
    "forked child": Shape(
        """
        pid = os.fork()
        if pid == 0:
            write(f"{d}/child.txt", "child", sync=True)
            fsync(d)
            os._exit(0)
        os.waitpid(pid, 0)
        write(f"{d}/parent.txt", "parent")
        """,
        {"child.txt": "child"},
    ),
    "threads": Shape(
        """
        def durable():
            write(f"{d}/kept.json.tmp", "kept", sync=True)
            os.rename(f"{d}/kept.json.tmp", f"{d}/kept.json")
            fsync(d)
        def unsynced():
            write(f"{d}/lost.json", "lost")
        for work in (durable, unsynced):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        """,
        {"kept.json": "kept"},
    ),
    "exec'd shell that syncs": Shape(
        """
        subprocess.run(["sh", "-c", f"mkdir {d}/logs && echo one > {d}/logs/one.txt && sync -f {d}/logs "
                        f"&& echo two > {d}/two.txt"], check=True)
        """,
        {"logs": "dir", "logs/one.txt": "one\n"},
    ),
    "renamed in from outside, never made durable": Shape(
        """
        for i in range(3):
            os.rename(f"{o}/in-{i}.txt", f"{d}/in-{i}.txt")
        """,
        {},
        {"in-0.txt": "zero", "in-1.txt": "one", "in-2.txt": "two"},
        files(**{"out__in-0.txt": "zero", "out__in-1.txt": "one", "out__in-2.txt": "two"}),
    ),
    "renamed in from outside, then fsynced but not its directory": Shape(
        """
        os.rename(f"{o}/log.txt", f"{d}/log.txt")
        with open(f"{d}/log.txt", "a") as f:
            f.write("b")
            f.flush()
            os.fsync(f.fileno())
        """,
        {},
        {"log.txt": "ab"},
        files(**{"out__log.txt": "a"}),
    ),
    "renamed in from outside, its directory fsynced": Shape(
        """
        os.rename(f"{o}/f.txt", f"{d}/f.txt")
        fsync(d)
        """,
        {"f.txt": "from outside"},
        {},
        files(**{"out__f.txt": "from outside"}),
    ),
    "a directory renamed in from outside": Shape(
        """
        os.rename(f"{o}/batch", f"{d}/batch")
        """,
        {},
        {"batch": "dir", "batch/a.txt": "a", "batch/sub": "dir", "batch/sub/b.txt": "b"},
        files(**{"out__batch__a.txt": "a", "out__batch__sub__b.txt": "b"}),
    ),
    "renamed out, never made durable": Shape(
        """
        os.rename(f"{d}/out.txt", f"{o}/out.txt")
        """,
        {"out.txt": "durable"},
        {"out.txt": "durable"},
        files(**{"data__out.txt": "durable"}),
    ),
    "renamed out, its directory fsynced": Shape(
        """
        os.rename(f"{d}/out.txt", f"{o}/out.txt")
        fsync(d)
        """,
        {},
        {"out.txt": "durable"},
        files(**{"data__out.txt": "durable"}),
    ),
    "renamed across directories, the source fsynced": Shape(
        """
        os.rename(f"{d}/a/x.txt", f"{d}/b/x.txt")
        fsync(f"{d}/a")
        """,
        {"a": "dir", "b": "dir", "b/x.txt": "x", "b/keep.txt": ""},
        {},
        files(**{"data__a__x.txt": "x", "data__b__keep.txt": ""}),
    ),
    "renamed across directories, the target fsynced": Shape(
        """
        os.rename(f"{d}/a/x.txt", f"{d}/b/x.txt")
        fsync(f"{d}/b")
        """,
        {"a": "dir", "b": "dir", "b/x.txt": "x", "b/keep.txt": ""},
        {},
        files(**{"data__a__x.txt": "x", "data__b__keep.txt": ""}),
    ),
    "renamed across directories, neither fsynced": Shape(
        """
        os.rename(f"{d}/a/x.txt", f"{d}/b/x.txt")
        """,
        {"a": "dir", "a/x.txt": "x", "b": "dir", "b/keep.txt": ""},
        {},
        files(**{"data__a__x.txt": "x", "data__b__keep.txt": ""}),
    ),
    "a directory renamed, its parent fsynced": Shape(
        """
        os.rename(f"{d}/v1", f"{d}/v2")
        fsync(d)
        """,
        {"v2": "dir", "v2/n.txt": "n"},
        {},
        files(**{"data__v1__n.txt": "n"}),
    ),
    "a hard link, its directory fsynced": Shape(
        """
        os.link(f"{d}/h1.txt", f"{d}/h2.txt")
        fsync(d)
        """,
        {"h1.txt": "h (x2)", "h2.txt": "h (x2)"},
        {},
        files(**{"data__h1.txt": "h"}),
    ),
    "a hard link, never made durable": Shape(
        """
        os.link(f"{d}/h1.txt", f"{d}/h2.txt")
        """,
        {"h1.txt": "h"},
        {},
        files(**{"data__h1.txt": "h"}),
    ),
    "a hard link to a file outside": Shape(
        """
        os.link(f"{o}/l.txt", f"{d}/l.txt")
        fsync(d)
        """,
        {"l.txt": "linked (x2)"},
        {"l.txt": "linked (x2)"},
        files(**{"out__l.txt": "linked"}),
    ),
    "a hard link to a file outside, its old name then removed": Shape(
        """
        os.link(f"{o}/m.txt", f"{d}/m.txt")
        os.unlink(f"{o}/m.txt")
        """,
        {},
        {"m.txt": "moved"},
        files(**{"out__m.txt": "moved"}),
    ),
    "renamed in from outside and back out": Shape(
        """
        os.rename(f"{o}/r.txt", f"{d}/r.txt")
        os.rename(f"{d}/r.txt", f"{o}/r.txt")
        """,
        {},
        {"r.txt": "r"},
        files(**{"out__r.txt": "r"}),
    ),
    "a symbolic link to a store outside, written through": Shape(
        """
        with open(f"{d}/store", "a") as f:
            f.write("+")
            f.flush()
            os.fsync(f.fileno())
        """,
        {"store": "-> {o}/store.txt"},
        {"store.txt": "s+"},
        symlink_to_store,
    ),
    "a symbolic link to a directory": Shape(
        """
        write(f"{d}/current/g.txt", "g", sync=True)
        """,
        {"current": "-> {o}/dir"},
        {"dir": "dir", "dir/f.txt": "f", "dir/g.txt": "g"},
        symlink_to_directory,
    ),
    "symbolic links made": Shape(
        """
        os.symlink("target", f"{d}/kept")
        fsync(d)
        os.symlink("target", f"{d}/lost")
        """,
        {"kept": "-> target"},
    ),
    "a symbolic link to /dev/zero": Shape(
        """
        write(f"{d}/new.txt", "new")
        """,
        {"zero": "-> /dev/zero"},
        {},
        lambda data, outside: (data / "zero").symlink_to("/dev/zero"),
    ),
    "a FIFO there from the start": Shape(
        """
        write(f"{d}/new.txt", "new")
        """,
        {"pipe": "fifo"},
        {},
        lambda data, outside: os.mkfifo(data / "pipe"),
    ),
    "FIFOs made": Shape(
        """
        os.mkfifo(f"{d}/kept")
        fsync(d)
        os.mkfifo(f"{d}/lost")
        """,
        {"kept": "fifo"},
    ),
    "a socket there from the start": Shape(
        """
        write(f"{d}/new.txt", "new")
        """,
        {"ctl.sock": "socket"},
        {},
        bound_socket,
    ),
    "sockets bound": Shape(
        """
        kept = bind(f"{d}/kept.sock")
        fsync(d)
        lost = bind(f"{d}/lost.sock")
        """,
        {"kept.sock": "socket"},
    ),
    "mmap, msync'd": Shape(
        """
        with open(f"{d}/m.bin", "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 16)
            mapped[0:5] = b"saved"
            mapped.flush()  # msync(MS_SYNC)
            mapped[5:10] = b"later"
        """,
        {"m.bin": "saved..........."},
        {},
        files(**{"data__m.bin": "." * 16}),
    ),
    "mmap, fsynced": Shape(
        """
        with open(f"{d}/m.bin", "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 16)
            mapped[0:5] = b"fsync"
            os.fsync(f.fileno())
            mapped[5:10] = b"later"
        """,
        {"m.bin": "fsync..........."},
        {},
        files(**{"data__m.bin": "." * 16}),
    ),
    "O_TMPFILE linked by /proc/self/fd, its bytes never fsynced": Shape(
        """
        fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o644)
        os.write(fd, b"anonymous")
        os.link(f"/proc/self/fd/{fd}", f"{d}/named.txt", src_dir_fd=fd, follow_symlinks=True)  # linkat
        fsync(d)
        """,
        {"named.txt": ""},
    ),
    "O_TMPFILE fsynced, then linked": Shape(
        """
        fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o644)
        os.write(fd, b"anonymous")
        os.fsync(fd)
        os.link(f"/proc/self/fd/{fd}", f"{d}/named.txt", src_dir_fd=fd, follow_symlinks=True)  # linkat
        fsync(d)
        """,
        {"named.txt": "anonymous"},
    ),
}


class PowerLoss:
    """A program run traced under a power loss: the tracer (bounded in memory), the program through the
    seccomp launcher, a kill once it has done its work, and the rollback."""

    def __init__(self, tmp_path: Path) -> None:
        self.data, self.outside = tmp_path / "d", tmp_path / "o"
        self.data.mkdir()
        self.outside.mkdir()
        self.procs: list[subprocess.Popen[str]] = []
        self.shadow = tmp_path / "shadow"

    def start(self, program: str) -> None:
        tracer = self._spawn(
            [sys.executable, "-m", "harness.crashpoints.fstrace", "--watch", str(self.data), "--shadow",
             str(self.shadow), "--no-holds"]
        )  # fmt: skip
        resource.prlimit(tracer.pid, resource.RLIMIT_AS, (TRACER_MEMORY, TRACER_MEMORY))
        assert "ready" in self.read()
        code = PRELUDE + textwrap.dedent(program) + EPILOGUE
        writer = self._spawn([*FILTERED, sys.executable, "-c", code, str(self.data), str(self.outside)])
        self.send({"cmd": "attach", "pid": writer.pid})
        assert self.read() == {"attached": writer.pid}
        self.say(writer, "go")
        assert writer.stdout is not None
        assert writer.stdout.readline() == "done\n"

    def power_loss(self) -> dict[str, Any]:
        """The program killed, then the rollback: the tracer's answer."""
        writer = self.procs[1]
        writer.kill()
        writer.wait()
        self.send({"cmd": "rollback"})
        return self.read()

    def _spawn(self, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def say(self, proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def send(self, command: dict[str, Any]) -> None:
        self.say(self.procs[0], json.dumps(command))

    def read(self) -> dict[str, Any]:
        """The tracer's next line; a failure when none comes in ANSWER_S (it is stuck) or it exited."""
        out = self.procs[0].stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], ANSWER_S)
        assert ready, f"the file tracer did not answer in {ANSWER_S:.0f} s"
        line = out.readline()
        assert line, "the file tracer exited"
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[PowerLoss]:
    one = PowerLoss(tmp_path)
    try:
        yield one
    finally:
        one.close()


@pytest.mark.parametrize("name", SHAPES)
def test_a_power_loss_leaves_what_the_shape_made_durable(traced: PowerLoss, name: str) -> None:
    shape = SHAPES[name]
    shape.before(traced.data, traced.outside)
    traced.start(shape.program)
    answer = traced.power_loss()
    assert "rolled_back" in answer, answer
    expected = {k: v.replace("{o}", str(traced.outside)) for k, v in shape.data.items()}
    assert tree(traced.data) == expected
    assert tree(traced.outside) == shape.outside


def test_a_put_back_that_would_overwrite_is_refused_in_one_line(traced: PowerLoss) -> None:
    (traced.outside / "in.txt").write_text("moved in")
    traced.start(
        """
        os.rename(f"{o}/in.txt", f"{d}/in.txt")
        write(f"{o}/in.txt", "made after")
        """
    )
    answer = traced.power_loss()
    assert answer == {
        "error": f"cannot put back {traced.outside / 'in.txt'}, moved into the data directory and not "
        "durable there (the directory it went into was not fsynced after): something else is there now; "
        "nothing was rolled back"
    }
    assert tree(traced.data) == {"in.txt": "moved in"}
    assert tree(traced.outside) == {"in.txt": "made after"}
