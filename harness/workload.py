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
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.scenario import Scenario

MARKER_SHAPE = re.compile(rb"(?<![A-Za-z0-9])[A-Za-z0-9]+-m[0-9]{7}(?![0-9])")
"""A marker, ``<namespace>-m<index, 7 digits>`` (namespaces are letters and digits), found in any bytes:
how a store that names no field (a directory of files, a JSON document) is searched for effects."""
INTENT_SHAPE = re.compile(
    rb"(?<![A-Za-z0-9])[A-Za-z0-9]+-(?:m[0-9]{7}(?![0-9])|[0-9]+-[0-9a-f]{16}(?![0-9a-f]))"
)
"""A marker, or an intent's idempotency key (``<namespace>-<index>-<16 hex digits>``, as
:meth:`Workload.__iter__` makes it): what ties a point to its intent. A server's key lookup carries
the key and no marker (``SELECT ... WHERE key = $1``): without the key it is placed in no attempt
while several are open."""


def intent_in(token: bytes) -> int:
    """The intent index of one :data:`INTENT_SHAPE` match."""
    namespace_and_index, _, tail = token.rpartition(b"-")
    if tail[:1] == b"m" and len(tail) == 8:
        return int(tail[1:])
    return int(namespace_and_index.rpartition(b"-")[2])


@dataclass(slots=True)
class Intent:
    """One intent (never changed once made: not ``frozen`` only because that costs every intent)."""

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
        self._answers = scenario.workload.answers
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

    def respond(self, question: dict[str, Any]) -> dict[str, Any] | str:
        """What a call answering the server's question (an ``input_required`` result) adds to its
        params: ``inputResponses`` from the scenario's answers and the ``requestState`` echoed
        exactly; or, as a sentence, why the scenario cannot answer it."""
        responses: dict[str, Any] = {}
        for name, request in (question.get("inputRequests") or {}).items():
            method = request.get("method") if isinstance(request, dict) else None
            if method != "elicitation/create":
                return f"the server asks {name!r} by {method!r}; only elicitation forms are answered"
            form = self._answers.get(name)
            if form is None:
                return f"no answer to the server's question {name!r} in workload.answers"
            responses[name] = {"action": "accept", "content": form}
        answer: dict[str, Any] = {"inputResponses": responses} if responses else {}
        if "requestState" in question:
            answer["requestState"] = question["requestState"]
        return answer
