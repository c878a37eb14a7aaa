"""Seeded business intents: what the driver replays, and how their effects are found.

An intent is one business action that must take effect exactly once. It has an
index, a *marker* (written into the payload, so the auditor can find its
effects in the target's store) and an *idempotency key* (sent with every
attempt of the intent). Everything here is a pure function of the scenario, its
seed and a namespace: the same inputs give the same intents, byte for byte.

The namespace keeps markers and keys of different runs apart when a target's
store outlives a run; the runner uses the run id, tests use a fixed string.
Intents are generated lazily so that a million-intent run holds none of them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Intent:
    index: int
    marker: str
    key: str
    draws: tuple[Any, ...]
    """The template's generated values (random amounts, choices), in template order."""


class Workload:
    """The intents of a scenario, and the arguments each attempt of an intent sends."""

    def __init__(self, scenario: Scenario, namespace: str, *, size: int | None = None) -> None:
        """``size`` overrides the scenario's intent count (the contract checks draw as many as they need)."""
        self.scenario = scenario
        self.namespace = namespace
        self.size = scenario.workload.intents if size is None else size
        self.tool = scenario.workload.tool
        self._template = scenario.workload.template
        self._seed = scenario.seed

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Intent]:
        rng = random.Random(f"{self._seed}:workload")
        ns = self.namespace
        draw = self._template.draw
        for index in range(self.size):
            draws = draw(rng)
            key = f"{ns}-{index}-{rng.getrandbits(64):016x}"
            yield Intent(index=index, marker=f"{ns}-m{index:07d}", key=key, draws=draws)

    def arguments(self, intent: Intent, key: str | None = None) -> dict[str, Any]:
        """The tool arguments for one attempt; ``key`` replaces the intent's key (fresh-key clients)."""
        values = {
            "marker": intent.marker,
            "key": intent.key if key is None else key,
            "index": intent.index,
            "seed": self._seed,
        }
        rendered = self._template.render(values, intent.draws)
        assert isinstance(rendered, dict)
        return rendered
