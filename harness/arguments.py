"""Arguments given as text, read the same way by both front ends (the ``mcp-chaos`` command line and
the pytest plugin): a comma-separated list of ids, and ``NAME=VALUE`` pairs. Two copies once read
the same flag differently (one stripped the names, one did not)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.errors import UsageError


def ids(text: str | None) -> list[str]:
    """A comma-separated list (``--modes``, ``--only``, ``--skip``), blanks dropped."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def pairs(values: Sequence[str] | None, sep: str, flag: str) -> dict[str, str]:
    """``NAME<sep>VALUE`` items (``--env``, ``--header``): names stripped; a header's value stripped
    too (``Name: value``), an environment value kept exactly. UsageError names the bad item."""
    found: dict[str, str] = {}
    for item in values or ():
        name, has_sep, value = item.partition(sep)
        if not has_sep or not name.strip():
            raise UsageError(f"{flag} {item!r} is not NAME{sep}VALUE")
        found[name.strip()] = value.strip() if sep == ":" else value
    return found
