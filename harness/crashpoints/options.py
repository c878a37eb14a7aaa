"""The options of a crash exploration, defined once for every front end that explores.

``mcp-chaos crashpoints``, the ``crash_points`` check of ``mcp-chaos contract`` and of the
pytest plugin (and ``races`` to come) explore the same way, so they take the same options,
with the same names, defaults and bounds: :data:`SPECS` is the one table each front end
renders (argparse's ``--repeat``; pytest's ``--mcp-chaos-repeat``), :class:`ExploreOptions`
what they hand the library, checked by :meth:`ExploreOptions.checked` with one message per
option. Old spellings (``crashpoints --max-points``, ``contract --crash-repeat``, ...) are
:data:`OLD_SPELLINGS`: still taken, each with a one-line notice, since CI jobs have them.

Why a budget in seconds and no cap on points: an exploration tries each distinct crash state
of a call once (:mod:`harness.crashpoints.states`), the store's first, until the budget is
spent; a cap on points counted kill and power loss apart and stopped among the writes of a
SQLite transaction, leaving the windows that matter untried. The default budget is sized for
a CI runner of 2 cores: every state of a durable file store or of SQLite with its defaults is
tried within it, with the target's start and the audit, in under three minutes.

Light on purpose (the standard library and :mod:`harness.errors`): the pytest plugin reads
the table when pytest asks for its options, before anything else of the harness is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.errors import UsageError

DEFAULT_REPEAT = 1
"""Tries per crash state: one, since a held point is the same crash every time; more for a server whose
recovery varies from one restart to the next."""
MAX_REPEAT = 100
DEFAULT_BUDGET_S = 120.0
"""The exploration's seconds, from the target's first start to the last try begun (then that try and
the audit): the states of a durable file store and of SQLite with its defaults fit in it twice over on
2 cores."""
MAX_BUDGET_S = 86_400.0
MAX_JOBS = 256
"""Copies of the target an exploration runs side by side at most (``--jobs``)."""


@dataclass(frozen=True, slots=True)
class ExploreOptions:
    """What a front end tells an exploration (see :data:`SPECS` for each option's words)."""

    repeat: int = DEFAULT_REPEAT
    budget_s: float = DEFAULT_BUDGET_S
    power_loss: bool = True
    jobs: int | None = None
    """Copies of the target side by side; None: one per core."""
    only: tuple[str, ...] | None = None
    """Points asked for by name (``crashpoints --only``): tried as named, one state each."""

    def checked(self, prefix: str = "--") -> ExploreOptions:
        """These options, or UsageError naming the first out of its bounds as the front end spells it
        (``prefix``: ``--``, or the pytest plugin's ``--mcp-chaos-``)."""
        for spec in SPECS:
            value = getattr(self, spec.field)
            if spec.kind != "flag" and value is not None and not spec.fits(value):
                raise UsageError(f"{prefix}{spec.name} {value:g}: give {spec.wants}")
        return self


@dataclass(frozen=True, slots=True)
class Spec:
    """One option as every front end spells it: ``--<name>`` (``--mcp-chaos-<name>`` in pytest)."""

    name: str
    field: str
    """The :class:`ExploreOptions` field it sets."""
    kind: Literal["int", "float", "flag"]
    """A flag is ``--<name>`` and ``--no-<name>``."""
    metavar: str
    help: str
    low: float = 0
    high: float = 0
    wants: str = ""
    """What a value must be, as an error says it."""

    def fits(self, value: float) -> bool:
        return math.isfinite(value) and self.low <= value <= self.high

    def read(self, text: str, prefix: str = "--") -> float:
        """The value of ``text`` given for this option; UsageError saying what it takes."""
        try:
            value = int(text.strip()) if self.kind == "int" else float(text.strip())
        except ValueError:
            value = math.nan
        if not self.fits(value):
            raise UsageError(f"{prefix}{self.name} {text!r}: give {self.wants}")
        return value


SPECS = (
    Spec(
        "repeat",
        "repeat",
        "int",
        "R",
        f"tries per distinct crash state, each state's first try before any second (default "
        f"{DEFAULT_REPEAT}; 1 to {MAX_REPEAT})",
        1,
        MAX_REPEAT,
        f"the tries per crash state, an integer from 1 to {MAX_REPEAT}",
    ),
    Spec(
        "budget",
        "budget_s",
        "float",
        "SECONDS",
        f"the exploration's seconds: no try begins after them, and states left untried make it "
        f"inconclusive; the store's states first (default {DEFAULT_BUDGET_S:g}; 0 lists the states and "
        f"tries none)",
        0,
        MAX_BUDGET_S,
        f"the exploration's seconds, from 0 (list the states, try none) to {MAX_BUDGET_S:g}",
    ),
    Spec(
        "power-loss",
        "power_loss",
        "flag",
        "",
        "where the call writes files in its data directory, also crash each state as a power loss: the "
        "data rolled back to what was durable (default: on; --no-power-loss: kills only)",
    ),
    Spec(
        "jobs",
        "jobs",
        "int",
        "N",
        f"explore in N copies of the target side by side, each a run of its own (its data directory, "
        f"PostgreSQL, sink and ports); the same table as one copy (default: the cores; 1 to {MAX_JOBS})",
        1,
        MAX_JOBS,
        f"the number of copies of the target to explore in, an integer from 1 to {MAX_JOBS} (default: "
        "the cores)",
    ),
)
"""The exploration's options, in the order ``--help`` lists them."""


@dataclass(frozen=True, slots=True)
class OldSpelling:
    """A flag a command took before :data:`SPECS` (taken still, with a notice)."""

    flag: str
    command: str
    field: str | None
    """The option it sets now; None: it has no meaning any more (it is ignored)."""
    value: bool | None
    """For a flag that took no value: the value it sets."""
    notice: str


OLD_SPELLINGS = (
    OldSpelling(
        "--max-points",
        "crashpoints",
        None,
        None,
        "--max-points is ignored: every distinct crash state is tried, the store's first, within "
        "--budget SECONDS (drop it)",
    ),
    OldSpelling(
        "--crash-max-points",
        "contract",
        None,
        None,
        "--crash-max-points is ignored: crash_points tries every distinct crash state, the store's "
        "first, within --budget SECONDS (drop it)",
    ),
    OldSpelling("--crash-repeat", "contract", "repeat", None, "--crash-repeat is now --repeat"),
    OldSpelling(
        "--crash-power-loss",
        "contract",
        "power_loss",
        True,
        "--crash-power-loss is now the default (--no-power-loss turns it off)",
    ),
)


def read_options(
    given: Mapping[str, str | bool | None], *, prefix: str = "--", only: tuple[str, ...] | None = None
) -> ExploreOptions:
    """The options as a front end took them: each field's text (a flag's bool), None where not given
    (its default); UsageError naming the first that is no value of its option (``prefix``: how the front
    end spells its options)."""
    values: dict[str, Any] = {}
    for spec in SPECS:
        raw = given.get(spec.field)
        if raw is None:
            continue
        if spec.kind == "flag":
            values[spec.field] = bool(raw)
        else:
            number = spec.read(str(raw), prefix)
            values[spec.field] = int(number) if spec.kind == "int" else number
    return ExploreOptions(**values, only=only).checked(prefix)


def old_spellings(command: str) -> list[OldSpelling]:
    """The old flags ``command`` still takes."""
    return [old for old in OLD_SPELLINGS if old.command == command]
