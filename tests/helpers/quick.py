"""`make check`'s quick profile: the loop while editing runs fewer examples of the slowest properties.

`make check` sets ``HYPOTHESIS_PROFILE=check``: properties that set their own ``max_examples``
run a fifth of them (at least 10), those that do not run 20 (the profile's), and the seeded
random histories run 4 seeds of 12. `make test` and CI run them whole; a failure the quick loop
misses is still found there.
"""

from __future__ import annotations

import os

QUICK = os.environ.get("HYPOTHESIS_PROFILE") == "check"


def examples(n: int) -> int:
    """A property's ``max_examples``: ``n``, or a fifth of it (at least 10) in the quick profile."""
    return max(10, n // 5) if QUICK else n


def seeds(n: int) -> range:
    """Seeds of a seeded random test: ``n``, or a third of them (at least 2) in the quick profile."""
    return range(max(2, n // 3) if QUICK else n)
