"""Bad scenarios end in one line and exit 2, before anything starts; never in a traceback mid-run.

``tests/corpus/scenarios/`` holds one file per kind of bad input an adversarial
pass found (or that a user writes by mistake); its second line says which
command meets it, the exit code and the message it must give. Hypothesis then
puts random YAML values into every field of a rich scenario: whatever loads
must also plan its faults, render its arguments and build its pod, and whatever
does not load must fail with the harness's own error.
"""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import HarnessError
from harness.faults.schedule import build_schedule
from harness.pods.factory import make_pod, target_headers
from harness.scenario import load_scenario
from harness.workload import Workload
from tests.helpers.quick import examples

CORPUS = Path(__file__).parents[1] / "corpus" / "scenarios"
EXPECT = re.compile(r"# expect: (\w+) exits (\d+): (.+)")


def corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_there() -> None:
    assert len(corpus()) >= 25


@pytest.mark.parametrize("path", corpus(), ids=lambda p: p.stem)
def test_bad_scenario_gives_its_one_line(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    second = path.read_bytes().split(b"\n")[1].decode()
    match = EXPECT.fullmatch(second)
    assert match, f"{path.name}: its second line must be '# expect: COMMAND exits N: MESSAGE'"
    command, code, message = match[1], int(match[2]), match[3]
    monkeypatch.delenv("MCP_CHAOS_CORPUS_UNSET_VARIABLE", raising=False)
    extra = ["--results", str(tmp_path / "r")] if command == "run" else []
    assert main([command, str(path), *extra]) == code
    err = capsys.readouterr().err
    assert err.startswith("mcp-chaos: error: "), err
    assert err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


@pytest.mark.parametrize(
    "run_id", ["../../escaped", "/tmp/absolute", "a/b", ".hidden", "-flag", "", "x" * 200]
)
def test_a_run_id_must_be_one_safe_path_component(
    run_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = Path(__file__).parents[2] / "scenarios" / "pod-kill.yaml"
    assert main(["run", str(scenario), "--results", str(tmp_path / "r"), f"--run-id={run_id}"]) == 2
    assert "is not a plain directory name" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert not Path("/tmp/absolute").exists()


# -- fuzzing: random YAML values in every field of a scenario that uses most of them

RICH: dict[str, Any] = {
    "name": "fuzz",
    "seed": 7,
    "target": {
        "command": ["{python}", "server.py", "--port", "{port}"],
        "env": {"MODE": "naive", "DB": "{data_dir}/x.db"},
        "headers": {"X-Tenant": "t1"},
        "ready_timeout_s": 5,
        "restart_delay_s": 0.1,
    },
    "workload": {
        "intents": 10,
        "concurrency": 2,
        "tool": "create_invoice",
        "arguments": {
            "customer_id": "c-{index}",
            "amount_cents": {"random_int": [1, 100]},
            "memo": "{marker}",
            "idempotency_key": "{key}",
            "tags": ["a", {"choice": ["x", "y"]}],
        },
        "answers": {"customer": {"customer_id": "acme-inc", "tags": ["a"]}},
    },
    "client": {
        "attempt_timeout_s": 2,
        "max_attempts": 3,
        "backoff": {"initial_s": 0.01, "max_s": 0.1, "multiplier": 2, "jitter": "full"},
        "key_reuse": "same",
        "max_input_rounds": 2,
    },
    "faults": {
        "kill": {"count": 2, "min_uptime_s": 0.1},
        "pause": {"count": 1, "duration_s": 0.2},
        "stream": [
            {"fault": "sever_response", "tool": "create_invoice", "probability": 0.1, "after_bytes": 10}
        ],
    },
    "audit": {
        "effects": {"sql": {"url": "sqlite:///{data_dir}/x.db", "query": "SELECT memo AS marker FROM t"}}
    },
    "gate": {"max_duplicate_rate": 0.01},
}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


PATHS = _paths(RICH)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        ["{marker}", "{key}", "{nope}", "{port", "${HOME}", "${}", "{{", "}", "%s", "\0", "=", ".."]
    ),
    st.dates(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)


def _put(data: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set the field at ``path`` if an earlier change left a way to it."""
    node = data
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        reachable = (isinstance(node, dict) and (last or part in node)) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        )
        if not reachable:
            return
        if last:
            node[part] = value
            return
        node = node[part]


def _exercise(text: str) -> None:
    """What a run does with a scenario before and while it runs, short of starting processes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(text, encoding="utf-8")
        scenario = load_scenario(path)
        build_schedule(scenario)
        workload = Workload(scenario, "ns")
        for intent in list(workload)[:3]:
            workload.arguments(intent)
        form = {"method": "elicitation/create", "params": {}}
        orjson.dumps(workload.respond({"inputRequests": {"customer": form}, "requestState": "s"}))
        scenario.dump_yaml()
        target_headers(scenario.target, {"HOME": "/root"})
        if scenario.target.image is None and scenario.target.command:
            make_pod(scenario.target, Path(tmp), port=1, name="pod-0", urls={}, environ={"HOME": "/root"})


def _valid_or_one_line(text: str) -> None:
    """Any other exception fails the test with its traceback; so does a scenario error of many lines."""
    error: HarnessError | None = None
    try:
        _exercise(text)
    except HarnessError as exc:
        error = exc
    if error is not None:
        assert error.exit_code == 2, error
        assert "\n" not in error.message, error.message


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_random_values_in_any_field_never_escape_as_a_traceback(
    changes: list[tuple[tuple[Any, ...], Any]],
) -> None:
    data = copy.deepcopy(RICH)
    for path, value in changes:
        _put(data, path, value)
    _valid_or_one_line(yaml.safe_dump(data, allow_unicode=True))


@settings(max_examples=examples(200))
@given(VALUES)
def test_any_yaml_document_is_a_scenario_or_a_scenario_error(document: Any) -> None:
    _valid_or_one_line(yaml.safe_dump(document, allow_unicode=True))
