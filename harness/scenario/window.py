"""The part of a workload in which counted faults land: one type for kills, pauses and rollouts."""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema


class Window(NamedTuple):
    """Fractions of the intents dispatched, ``[low, high]`` in YAML, with ``0 <= low < high <= 1``.

    Validated as a plain pair of numbers (so a malformed one gets pydantic's own message about a
    tuple), then as a range by :meth:`check`, which the section calls from its model validator: its
    error then stands at the section (``faults.kill: faults.kill.window must ...``), where it has
    always stood.
    """

    low: float
    high: float

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # A NamedTuple's own schema would also take a mapping {low, high} and word its errors
        # differently; a window is written as a pair.
        return core_schema.no_info_after_validator_function(
            lambda pair: cls(*pair), handler(tuple[float, float])
        )

    def check(self, field: str) -> None:
        """Raise the one error of a window outside ``0 <= low < high <= 1``, naming ``field``."""
        if not 0 <= self.low < self.high <= 1:
            raise ValueError(f"{field} must satisfy 0 <= low < high <= 1, got {list(self)}")
