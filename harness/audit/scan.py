"""A history read in seq order: the parse's batches put back in order, and the line of any seq.

The columnar fold (:mod:`harness.audit.columnar`) takes a history only as the
history writer writes it: one event per line, each line starting with its
``seq``, seqs consecutive. What here finds a history that is not one
(:class:`Declined`) hands it to the line-by-line fold, which names the damaged line.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from harness.audit.parse import Parse

REORDER_ROWS = 1 << 22
"""Events parsed ahead of a stretch of the file not parsed yet, at most (see in_order)."""


_SEQ = re.compile(rb'\{"seq":(-?\d+),')


class Declined(Exception):
    """This history is not one the columnar fold takes exactly; the Python fold reads it instead."""


def parsed(parse: Parse) -> Iterator[pa.RecordBatch]:
    """The parse's batches; a line DuckDB cannot read as an event (not JSON, a field of another type,
    a line longer than its ``maximum_object_size``) declines the history.

    DuckDB's errors reach here as its own or, raised while Arrow pulls the stream, as an ``OSError``
    that carries its message. Declining on a true I/O error is safe: the Python fold reads the file
    again, and reports that error with the file's name."""
    try:
        yield from parse.batches()
    except (duckdb.Error, OSError):
        raise Declined from None


def _front(ready: list[pa.RecordBatch], rows: int) -> pa.RecordBatch:
    """``rows`` rows or more (fewer than twice that) taken off the front of ``ready``: a slice of its
    first run when that is long enough, else whole runs joined. Joining only whole runs, a short one
    is copied once, and the runs after it keep their own bounds (cutting them to exactly ``rows``
    copied every batch after the first short one)."""
    first = ready[0]
    if first.num_rows >= rows:
        if first.num_rows > rows:
            ready[0] = first.slice(rows)
        else:
            ready.pop(0)
        return first.slice(0, rows)
    taken: list[pa.RecordBatch] = []
    held = 0
    while held < rows:
        run = ready[0]
        if run.num_rows > rows:
            taken.append(run.slice(0, rows))
            ready[0] = run.slice(rows)
        else:
            taken.append(ready.pop(0))
        held += taken[-1].num_rows
    return pa.concat_batches(taken)


def in_order(batches: Iterator[pa.RecordBatch], first: int, rows: int) -> Iterator[pa.RecordBatch]:
    """The scan's rows in seq order, in batches of ``rows`` to twice that.

    DuckDB scans a file in parallel, and its stream may hand a later stretch of
    lines before an earlier one; each stretch is in order. Stretches wait here
    until the one before them has come (the seqs of a history are consecutive),
    at most ``REORDER_ROWS`` rows of them.
    """
    waiting: list[tuple[int, int, pa.RecordBatch]] = []
    ready: list[pa.RecordBatch] = []
    held = 0
    expected = first
    count = 0
    for batch in batches:
        seq = batch.column("seq").to_numpy(zero_copy_only=False)
        if not len(seq):
            continue
        cuts = [0, *(np.flatnonzero(np.diff(seq) != 1) + 1).tolist(), len(seq)]
        for a, b in itertools.pairwise(cuts):
            heapq.heappush(waiting, (int(seq[a]), count, batch.slice(a, b - a)))
            count += 1
            held += b - a
        while waiting and waiting[0][0] == expected:
            _, _, run = heapq.heappop(waiting)
            held -= run.num_rows
            ready.append(run)
            expected += run.num_rows
        while sum(r.num_rows for r in ready) >= rows:
            yield _front(ready, rows)
        if held > REORDER_ROWS:
            raise Declined  # seqs with a gap: not a history this fold takes
    while waiting:
        ready.append(heapq.heappop(waiting)[2])
    if ready:
        whole = pa.concat_batches(ready)
        for begin in range(0, whole.num_rows, rows):
            yield whole.slice(begin, rows)


class LineFinder:
    """The line of a history that holds a given seq, found by bisection over the file's bytes.

    The few events the fold parses in Python (faults, pods, checkpoints) are
    looked up this way: lines are in seq order and each starts with its seq
    (``{"seq":N,``), as the history writer writes them; a line that does not is
    a history the columnar fold declines.
    """

    PROBE = 4096

    def __init__(self, path: Path) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 (closed by close())
        self.size = os.fstat(self.f.fileno()).st_size
        self.low = 0
        """Where the previous line found started: seqs are looked up in increasing order."""

    def close(self) -> None:
        self.f.close()

    def _line_from(self, offset: int) -> tuple[int, int, bytes]:
        """(start, seq, line) of the first line starting at or after ``offset`` (seq -1 past the end)."""
        f = self.f
        if offset > 0:
            f.seek(offset - 1)
            skipped = 0
            while True:
                chunk = f.read(self.PROBE)
                if not chunk:
                    return self.size, -1, b""
                nl = chunk.find(b"\n")
                if nl >= 0:
                    offset = offset - 1 + skipped + nl + 1
                    break
                skipped += len(chunk)
        if offset >= self.size:
            return self.size, -1, b""
        f.seek(offset)
        line = f.readline()
        match = _SEQ.match(line)
        if match is None:
            raise Declined
        return offset, int(match.group(1)), line

    def first_seq(self) -> int:
        """The seq of the history's first line."""
        return self._line_from(0)[1]

    def find(self, seq: int) -> bytes:
        lo, hi = self.low, self.size
        while hi - lo > self.PROBE:
            mid = (lo + hi) // 2
            start, found, line = self._line_from(mid)
            if found == seq:
                self.low = start
                return line
            if found < 0 or found > seq:
                hi = mid
            else:
                lo = start + 1
        start, found, line = self._line_from(lo)
        while 0 <= found < seq:
            start, found, line = self._line_from(start + 1)
        if found != seq:
            raise Declined
        self.low = start
        return line
