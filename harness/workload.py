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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness.scenario import GENERATORS, Scenario, placeholders_in

_Draw = Callable[[random.Random, list[Any]], None]
_Render = Callable[[Mapping[str, Any], Iterator[Any]], Any]


@dataclass(frozen=True, slots=True)
class Intent:
    index: int
    marker: str
    key: str
    draws: tuple[Any, ...]
    """The template's generated values (random amounts, choices), in template order."""


class _Node:
    """One compiled template value: draws its random values once, renders many times."""

    __slots__ = ("draw", "render")

    def __init__(self, draw: _Draw, render: _Render) -> None:
        self.draw = draw
        self.render = render


def _no_draw(rng: random.Random, out: list[Any]) -> None:
    return None


def _compile(value: Any) -> _Node:
    if isinstance(value, str):
        if not placeholders_in(value):
            literal = value.replace("{{", "{").replace("}}", "}")
            return _Node(_no_draw, lambda ctx, draws: literal)
        return _Node(_no_draw, lambda ctx, draws: value.format_map(ctx))
    if isinstance(value, Mapping):
        gens = GENERATORS & set(value)
        if gens:
            (name,) = gens
            spec = value[name]
            if name == "random_int":
                low, high = int(spec[0]), int(spec[1])

                def draw_int(rng: random.Random, out: list[Any]) -> None:
                    out.append(rng.randint(low, high))

                return _Node(draw_int, lambda ctx, draws: next(draws))
            options = list(spec)

            def draw_choice(rng: random.Random, out: list[Any]) -> None:
                out.append(options[rng.randrange(len(options))])

            return _Node(draw_choice, lambda ctx, draws: next(draws))
        items = [(k, _compile(v)) for k, v in value.items()]

        def draw_items(rng: random.Random, out: list[Any]) -> None:
            for _, node in items:
                node.draw(rng, out)

        return _Node(draw_items, lambda ctx, draws: {k: node.render(ctx, draws) for k, node in items})
    if isinstance(value, list):
        nodes = [_compile(v) for v in value]

        def draw_nodes(rng: random.Random, out: list[Any]) -> None:
            for node in nodes:
                node.draw(rng, out)

        return _Node(draw_nodes, lambda ctx, draws: [node.render(ctx, draws) for node in nodes])
    return _Node(_no_draw, lambda ctx, draws: value)


class Workload:
    """The intents of a scenario, and the arguments each attempt of an intent sends."""

    def __init__(self, scenario: Scenario, namespace: str) -> None:
        self.scenario = scenario
        self.namespace = namespace
        self.size = scenario.workload.intents
        self.tool = scenario.workload.tool
        self._template = _compile(scenario.workload.arguments)
        self._seed = scenario.seed

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Intent]:
        rng = random.Random(f"{self._seed}:workload")
        ns = self.namespace
        for index in range(self.size):
            draws: list[Any] = []
            self._template.draw(rng, draws)
            key = f"{ns}-{index}-{rng.getrandbits(64):016x}"
            yield Intent(index=index, marker=f"{ns}-m{index:07d}", key=key, draws=tuple(draws))

    def arguments(self, intent: Intent, key: str | None = None) -> dict[str, Any]:
        """The tool arguments for one attempt; ``key`` replaces the intent's key (fresh-key clients)."""
        ctx = {
            "marker": intent.marker,
            "key": intent.key if key is None else key,
            "index": intent.index,
            "seed": self._seed,
        }
        rendered = self._template.render(ctx, iter(intent.draws))
        assert isinstance(rendered, dict)
        return rendered
