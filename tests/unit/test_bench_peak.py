"""The benchmark's peak RSS of a child is the child's own, not its parent's.

wait4's ``ru_maxrss`` counts the memory a child shared with its parent between
fork and exec: a bench process that had just written a 3M-intent history made
every audit it started read as large as itself. :class:`bench.common.PeakRss`
reads the high-water mark of the program the child runs instead.
"""

from __future__ import annotations

import os
import subprocess
import sys

from bench.common import PeakRss

CHILD = "import time; held = bytearray(60 << 20); time.sleep(0.3)"


def test_a_child_s_peak_is_its_own_not_its_parent_s() -> None:
    parent = bytearray(300 << 20)  # touched: resident in this process when it forks
    parent[::4096] = b"x" * len(parent[::4096])
    args = [sys.executable, "-c", CHILD]
    proc = subprocess.Popen(args)
    peak = PeakRss(proc.pid, args)
    _, status, usage = os.wait4(proc.pid, 0)
    peak_mb = peak.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    assert 60 <= peak_mb < 150, peak_mb
    # What this replaces: the kernel's figure carries the parent's 300 MB.
    assert usage.ru_maxrss / 1024 >= 300
    del parent
