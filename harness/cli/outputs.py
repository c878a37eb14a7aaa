"""Output paths, checked before any work, and the CI job's summary page."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from harness import rundir
from harness.errors import UsageError


def output_dir(value: str | None, flag: str) -> Path | None:
    """An output directory made and checked before any work (found bad after an exploration, it cost
    the exploration's table and ended in a traceback)."""
    if not value:
        return None
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value}: is a file, not a directory; name a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {value}: cannot be made ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {value}: cannot be written (permissions)")
    return path


def output_file(value: str | None, flag: str, *, makes_dirs: bool = False) -> Path | None:
    """An output path checked before any work: a file that can be written in a directory that exists
    (or, with ``makes_dirs``, that the writer creates: its nearest existing ancestor must be writable).

    Found after a run, a bad path would cost the run and end in a traceback (exit 1,
    which reads as "gate failed"); here it is a usage error (exit 2).
    """
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value}: is a directory; name a file")
    parent = path.parent if str(path.parent) else Path(".")
    if makes_dirs:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {value}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {value}: cannot be written (permissions)")
    if (own := rundir.own_file(path)) is not None:
        raise UsageError(f"{flag} {value}: is {own}, a file of the run this would destroy; write elsewhere")
    return path


@contextlib.contextmanager
def writing(path: Path, flag: str) -> Iterator[None]:
    """Around the write of an output a command was asked for (its path checked before any work): a
    disk that refuses it once the work is done (full, read-only, gone) is a one-line usage error,
    exit 2, where it was a traceback (exit 1, which reads as a failed gate)."""
    try:
        yield
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from None


def step_summary_path() -> Path | None:
    """``$GITHUB_STEP_SUMMARY``, checked like any output path, or None where the CI offers none."""
    return output_file(os.environ.get("GITHUB_STEP_SUMMARY"), "GITHUB_STEP_SUMMARY")


def append_step_summary(path: Path | None, markdown: str) -> None:
    """Append to the CI job's summary page when the CI offers one (GitHub Actions does); the
    Markdown's server text is escaped by its renderer (:func:`harness.report.text.in_markdown`)."""
    if path is not None:
        with writing(path, "GITHUB_STEP_SUMMARY"), open(path, "a", encoding="utf-8") as summary:
            summary.write(markdown)
