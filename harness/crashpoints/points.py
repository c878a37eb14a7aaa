"""Hold points by name: what a scenario, the history and the reports call a moment of a call.

A point is a kind and, for the kinds that can happen several times in one call, a
1-based index counted within one attempt: ``db_commit#2`` is the second committed
transaction that wrote, of the attempt the point is looked for in. ``request`` and
``response`` happen once per attempt. A *path* is the points to hold one after the
other: ``db_commit#1/db_commit#1`` holds the first attempt at its first commit, and
then the retry at its own first commit (a crash during the recovery).

Pure: the scenario model validates names with it, the hold controller counts with
it, the explorer and the reports read it back from the history.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class PointKind(enum.StrEnum):
    """Where the harness can hold a call, in the order a call passes them."""

    REQUEST = "request"
    """The request reached the server; nothing was committed yet: the control point."""
    DB_COMMIT = "db_commit"
    """A transaction that wrote committed in the harness's PostgreSQL; its reply is held."""
    DOWNSTREAM = "downstream"
    """The effect sink recorded a call of the target's; its reply is held."""
    RESPONSE = "response"
    """The server's whole answer reached the fault proxy; the client never gets it."""


COUNTED = frozenset({PointKind.DB_COMMIT, PointKind.DOWNSTREAM})
"""Kinds that can happen several times in one attempt, so their names carry an index."""

_NAME = re.compile(r"^(request|response|(db_commit|downstream)#([1-9][0-9]{0,3}))$")
PATH_SEPARATOR = "/"
MAX_DEPTH = 2
"""A crash, and a crash during the recovery from it."""


@dataclass(frozen=True, slots=True, order=True)
class Point:
    kind: PointKind
    index: int = 1

    @property
    def name(self) -> str:
        return f"{self.kind.value}#{self.index}" if self.kind in COUNTED else self.kind.value

    def __str__(self) -> str:
        return self.name


def parse_point(name: str) -> Point:
    """``db_commit#2`` -> Point; ValueError saying what a point name looks like."""
    match = _NAME.match(name)
    if match is None:
        raise ValueError(
            f"{name!r} is not a hold point; use request, response, db_commit#N or downstream#N (N from 1)"
        )
    if match[2] is None:
        return Point(PointKind(match[1]))
    return Point(PointKind(match[2]), int(match[3]))


def parse_path(text: str) -> tuple[Point, ...]:
    """``db_commit#1/db_commit#1`` -> its points; ValueError for a bad name or a path deeper than 2."""
    parts = text.split(PATH_SEPARATOR)
    if len(parts) > MAX_DEPTH:
        raise ValueError(
            f"{text!r}: a path holds at most {MAX_DEPTH} points (a crash and one in its recovery)"
        )
    return tuple(parse_point(p) for p in parts)


def path_name(path: tuple[Point, ...]) -> str:
    return PATH_SEPARATOR.join(p.name for p in path)
