"""What the audit needs to know of the run beyond its events, read from ``run_started`` (issue #57).

From history format 1 (``run_started``'s ``schema``) the run writes what the audit needs of its
scenario into ``run_started``: its name and seed, the intents planned, whether a key travels with
every attempt (``keyed``), the kills' signal (``kill_signal``: an abrupt kill is expected to break
calls) and the stream fault rules (which of them name an intent for sure). The audit reads them there,
so it reads the scenario for the gate alone (and for the effect source it counts); a history written
before format 1 has none of them, and they are taken from the scenario as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.scenario import Scenario


@dataclass(frozen=True, slots=True)
class StreamRule:
    """A stream fault rule as the audit needs it: what it does, and whether it names an intent for sure."""

    fault: str
    intent: int | None
    probability: float | None

    def fields(self) -> dict[str, Any]:
        return {"fault": self.fault, "intent": self.intent, "probability": self.probability}


@dataclass(frozen=True, slots=True)
class RunFacts:
    scenario: str
    seed: int
    intents: int
    keyed: bool
    """Whether each attempt of an intent carries the intent's key (a duplicate's fix depends on it)."""
    kill_signal: str | None
    """``faults.kill.signal``, or None without kills."""
    stream_rules: tuple[StreamRule, ...]


def keyed(scenario: Scenario) -> bool:
    """Whether each attempt of an intent carries the intent's key, as the scenario says."""
    client = scenario.client
    travels = client.key_in != "argument" or "key" in scenario.workload.template.placeholders
    return travels and client.key_reuse == "same"


def facts_of_scenario(scenario: Scenario) -> RunFacts:
    """The facts as the run writes them into ``run_started`` (and as the audit of an older history
    takes them)."""
    kill = scenario.faults.kill
    return RunFacts(
        scenario=scenario.name,
        seed=scenario.seed,
        intents=scenario.workload.intents,
        keyed=keyed(scenario),
        kill_signal=kill.signal if kill is not None else None,
        stream_rules=tuple(StreamRule(r.fault, r.intent, r.probability) for r in scenario.faults.stream),
    )


def run_facts(run: Mapping[str, Any], scenario: Scenario) -> RunFacts:
    """The facts of a run from its ``run_started`` (``run``); from ``scenario`` for a history written
    before format 1, which does not carry them."""
    if run.get("schema") is None:
        facts = facts_of_scenario(scenario)
        return replace(facts, intents=int(run.get("intents", facts.intents)))
    return RunFacts(
        scenario=str(run["scenario"]),
        seed=int(run["seed"]),
        intents=int(run["intents"]),
        keyed=bool(run["keyed"]),
        kill_signal=run.get("kill_signal"),
        stream_rules=tuple(
            StreamRule(str(r["fault"]), r.get("intent"), r.get("probability")) for r in run["stream_rules"]
        ),
    )
