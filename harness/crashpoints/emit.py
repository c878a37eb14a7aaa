"""What a finding leaves behind: the scenario that reproduces it, and a pytest file that runs it.

The reproducer is the user's scenario with the exploration's changes
(``explore.retry_quickly``) and a fixed plan: every one of its intents is held
along the finding's path (``faults.crash_points.holds``). So ``mcp-chaos run``
on it crashes the target exactly there, every time, and its gate fails on the
finding; once the target is fixed it passes. A path the target no longer takes
(the fix removed the commit) is a missed fault, and the run is inconclusive:
the regression test then says the point is gone instead of passing for nothing.

The pytest file (``--emit DIR``) is the regression test a user commits beside
the fix: it runs the reproducer through the harness's public API and asserts
that every intent took effect exactly once. So both are written to be committed:
no path of this machine in them that the user did not write. The scenario was
loaded with ``{scenario_dir}`` resolved; each string the user wrote with it is
written so again, ``{scenario_dir}/<the way from the reproducer's directory>``,
which the harness resolves against the reproducer's own directory when it loads
it, from any working directory. Every other value is kept as it ran (a path the
user wrote out is theirs, even one inside the scenario's directory). The test
finds its scenario beside itself.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from harness.crashpoints.explore import Exploration, PointResult, retry_quickly
from harness.crashpoints.points import parse_ordering
from harness.crashpoints.races import Second
from harness.crashpoints.racing import RaceRow, Races, race_reproducer_name, racing_data
from harness.history import Verdict
from harness.scenario import Scenario, parse_scenario
from harness.scenario.gate import DEFAULT_FAIL_ON
from harness.scenario.model import scenario_yaml
from harness.scenario.placeholders import Place, map_strings_at

FAIL_ON = list(DEFAULT_FAIL_ON)


def reproducer_name(result: PointResult) -> str:
    """``crashpoint-db_commit-2.yaml`` (``crashpoint-fs_write-3-power_loss.yaml``); a path of two joins its
    points with ``-then-``."""
    names = (p.name.replace("#", "-").replace("@", "-") for p in result.path)
    return "crashpoint-" + "-then-".join(names) + ".yaml"


NAME_LIMIT = 64
"""Characters of a scenario name (``Scenario.name``)."""


def reproducer_scenario_name(name: str, result: PointResult) -> str:
    """``<scenario>-crashpoint-db_commit-2``; cut to the limit with a digest of the whole, so two
    reproducers of a long-named scenario never share a name (a cut alone ended both in ``-``)."""
    return _scenario_name(name, reproducer_name(result))


def _scenario_name(name: str, file_name: str) -> str:
    whole = f"{name}-{file_name.removesuffix('.yaml')}"
    if len(whole) <= NAME_LIMIT:
        return whole
    digest = hashlib.sha256(whole.encode()).hexdigest()[:10]
    return f"{whole[: NAME_LIMIT - len(digest) - 1].rstrip('-._')}-{digest}"


def reproducer(scenario: Scenario, result: PointResult, intents: int) -> Scenario:
    """The scenario that crashes the target at ``result``'s path in each of ``intents`` intents."""
    data = retry_quickly(scenario, kills=len(result.path) * intents)
    data["name"] = reproducer_scenario_name(scenario.name, result)
    data["description"] = (
        f"Written by mcp-chaos crashpoints: every intent is held at {result.name} (the pod is SIGKILLed "
        f"there) and retried; it found {result.finding.value if result.finding else 'nothing'} there. "
        "The gate fails until the target takes effect exactly once."
    )
    data["workload"].update(intents=intents, concurrency=1)
    hold: dict[str, Any] = {"at": result.name}
    if any(p.label for p in result.path):  # held by what it commits, whatever its index in a call
        hold["commits"] = [p.label for p in result.path]
    data["faults"] = {"crash_points": {"holds": [hold]}}
    data["gate"] = {"fail_on": FAIL_ON}
    return parse_scenario(data, source="the reproducer of " + scenario.name)


def portable(data: Any, scenario: Scenario, directory: Path) -> Any:
    """``data`` (a dump of a scenario derived from ``scenario``) with each string the user wrote with
    ``{scenario_dir}`` written so again, the placeholder now the way from ``directory``, where the
    reproducer is, to the scenario's directory. Only those strings, found by their place and their
    value as loaded: a path the user wrote out (even inside the scenario's directory, or in a SQL
    literal) is theirs, and rewriting it changed what the reproducer sent and what its query counted."""
    scenario_dir, written = scenario.scenario_dir, scenario.with_scenario_dir
    if scenario_dir is None or not written:
        return data
    way = os.path.relpath(os.path.realpath(scenario_dir), os.path.realpath(directory))
    placeholder = "{scenario_dir}" if way == "." else "{scenario_dir}/" + way

    def back(place: Place, text: str) -> str:
        as_written = written.get(place)
        if as_written is None or text != as_written.replace("{scenario_dir}", str(scenario_dir)):
            return text  # not the user's {scenario_dir}, or no longer the value that ran there
        return as_written.replace("{scenario_dir}", placeholder)

    return map_strings_at(data, back)


def reproducer_text(scenario: Scenario, result: PointResult, intents: int, directory: Path) -> str:
    """The reproducer's YAML, to be written into ``directory``: the values that ran, with
    ``{scenario_dir}`` where the user's scenario had it."""
    return _portable_text(reproducer(scenario, result, intents), scenario, directory)


def _portable_text(made_scenario: Scenario, scenario: Scenario, directory: Path) -> str:
    made = made_scenario.model_dump(mode="json")
    data = portable(made, scenario, directory)
    # Loaded as `mcp-chaos run` will load it, from its directory: an error now, not in the user's CI.
    parse_scenario(data, source="the reproducer of " + scenario.name, scenario_dir=directory.resolve())
    return scenario_yaml(data)


def write_reproducers(exploration: Exploration, directory: Path) -> list[Path]:
    """A reproducer for every finding, into ``directory``; their paths."""
    written = []
    for result in exploration.findings:
        path = directory / reproducer_name(result)
        path.write_text(
            reproducer_text(exploration.scenario, result, exploration.repeat, directory), encoding="utf-8"
        )
        written.append(path)
    return written


def pytest_text(scenario_file: str, result: PointResult) -> str:
    """A test module that runs the reproducer next to it and asserts exactly once."""
    test = "test_exactly_once_after_a_crash_at_" + "_then_".join(
        p.name.replace("#", "_") for p in result.path
    )
    return f'''"""Regression test written by `mcp-chaos crashpoints`: a crash at {result.name}.

The target was SIGKILLed while held at {result.name} and the client retried with the same key;
it found {result.finding.value if result.finding else "nothing"} there. This test runs the
scenario beside it (the same crash, every intent) and passes once each intent takes effect
exactly once.
"""

import asyncio
import io
from pathlib import Path

from harness import load_scenario, prepare_run_dir, run_and_audit

SCENARIO = Path(__file__).with_name("{scenario_file}")


def {test}(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    run_dir = prepare_run_dir(tmp_path, scenario)
    audit = asyncio.run(
        run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=None, html=False)
    )
    assert not audit.summary.inconclusive, (
        f"the crash did not happen ({{audit.summary.inconclusive}}): the call no longer passes "
        "{result.name}; run mcp-chaos crashpoints again to find its points"
    )
    verdicts = audit.intents["verdict"].value_counts().to_dict()
    assert verdicts == {{"exactly_once": len(audit.intents)}}, f"{{verdicts}}; see {{run_dir}}/report.md"
'''


def write_tests(exploration: Exploration, directory: Path) -> list[Path]:
    """For every finding, its reproducer and a pytest file that runs it, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for scenario_path, result in zip(
        write_reproducers(exploration, directory), exploration.findings, strict=True
    ):
        stem = scenario_path.stem.replace("-", "_")
        test_path = directory / f"test_{stem}.py"
        test_path.write_text(pytest_text(scenario_path.name, result), encoding="utf-8")
        written += [scenario_path, test_path]
    return written


RACE_REPEAT = 3
"""How many times a race's reproducer tries its ordering, one intent each."""
RACE_BUDGET_S = 120.0
"""A race reproducer's budget: no try begins after it (three tries take seconds, or the hold limit each)."""


def race_reproducer(
    scenario: Scenario,
    row: RaceRow,
    hold_limit_s: float,
    repeat: int = RACE_REPEAT,
    second: Second | None = None,
) -> Scenario:
    """The scenario that tries ``row``'s ordering alone, ``repeat`` times, its gate failing on a finding:
    a clean call, then the same ordering placed at the same point of it, as ``races --only`` does."""
    held = parse_ordering(row.id)[0]
    if second is None:  # a retry's ids and a timeout retry's are alike: the races say which they were
        second = Second.CALL if held in ("first", "second") else Second.RETRY
    data = racing_data(scenario, RACE_BUDGET_S, hold_limit_s, only=(row.id,), repeat=repeat, second=second)
    data["name"] = _scenario_name(scenario.name, race_reproducer_name(row))
    data["description"] = (
        f"Written by mcp-chaos races: {row.ordering} ({row.id}), tried {repeat} times after a clean call; "
        f"it found {row.verdict} there. The gate fails until the target takes effect exactly once."
    )
    data["gate"] = {"fail_on": FAIL_ON}
    return parse_scenario(data, source="the reproducer of " + scenario.name)


def race_pytest_text(scenario_file: str, row: RaceRow) -> str:
    """A test module that runs the race's reproducer next to it and asserts its ordering was placed (made
    or blocked, never not reached) and every intent took effect exactly once."""
    held, at = parse_ordering(row.id)
    where = at.name.replace("#", "_")
    calls = held in ("first", "second")
    other, first = ("second_call", "first") if calls else ("retry", "original")
    test = f"test_exactly_once_when_the_{other}_is_" + (
        f"sent_at_{where}_of_the_{first}" if held in ("original", "first") else f"held_at_{where}"
    )
    # The ordering's id and verdict only: a point's label is the server's SQL, not for a Python file.
    told = (
        f"the {other.replace('_', ' ')} sent at {at.name} of the {first}"
        if held in ("original", "first")
        else f"the {other.replace('_', ' ')} held at {at.name} while the {first} runs"
    )
    pair = (
        "Two calls (two intents, each its own key) ran side by side"
        if calls
        else "A call's original attempt and its retry (the same key, a new request id) ran side by side"
    )
    return f'''"""Regression test written by `mcp-chaos races`: {told}.

{pair} in
that order ({row.id}), and it found {Verdict(row.verdict).value} there. This test runs the
scenario beside it (a clean call, then that ordering, {RACE_REPEAT} times) and passes once each
intent takes effect exactly once.
"""

import asyncio
import io
import json
from pathlib import Path

from harness import load_scenario, prepare_run_dir, run_and_audit

SCENARIO = Path(__file__).with_name("{scenario_file}")
ORDERING = "{row.id}"


def {test}(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    run_dir = prepare_run_dir(tmp_path, scenario)
    audit = asyncio.run(
        run_and_audit(scenario, run_dir, out=io.StringIO(), progress_interval_s=None, html=False)
    )
    tries = []
    for line in (run_dir / "history.jsonl").read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("type") == "crash_plan" and "races" in event:
            tries = event["races"]  # the plan's last word on each try
    made = [one["made"] for one in tries]
    assert made and set(made) <= {{"made", "blocked"}}, (
        f"{{ORDERING}} was not placed ({{made}}): the call no longer passes its point; run "
        "mcp-chaos races again to find its orderings"
    )
    verdicts = audit.intents["verdict"].value_counts().to_dict()
    assert verdicts == {{"exactly_once": len(audit.intents)}}, f"{{verdicts}}; see {{run_dir}}/report.md"
'''


def write_race_tests(races: Races, directory: Path) -> list[Path]:
    """For every ordering with a finding, its reproducer and a pytest file running it, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for row in {r.id: r for r in races.findings}.values():
        path = directory / race_reproducer_name(row)
        made = race_reproducer(races.scenario, row, races.hold_limit_s, second=races.second)
        path.write_text(_portable_text(made, races.scenario, directory), encoding="utf-8")
        test_path = directory / f"test_{path.stem.replace('-', '_')}.py"
        test_path.write_text(race_pytest_text(path.name, row), encoding="utf-8")
        written += [path, test_path]
    return written
