"""The GitHub Action's parts that need no run: the outputs it declares are the ones its step writes,
every input reaches the step, and a value that could set another output is refused.
(tests/integration/test_action.py runs its step on real runs.)"""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helpers.paths import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
RUN_SH = (ROOT / ".ci" / "action" / "run.sh").read_text(encoding="utf-8")


def outputs_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("action_outputs", ROOT / ".ci" / "action" / "outputs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(**changes: Any) -> dict[str, Any]:
    """The fields of summary.json the step reads, as a run with one duplicate of four writes them."""
    data: dict[str, Any] = {
        "gate": {"passed": False},
        "headline": {"kind": "duplicate"},
        "verdicts": {"duplicate": 1, "lost": 0},
        "rates": {"duplicate": {"count": 1, "n": 4, "rate": 0.25}},
    }
    data.update(changes)
    return data


def test_each_output_the_action_declares_is_written_by_its_step() -> None:
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "run")
    written = set(outputs_module().outputs(summary())) | set(re.findall(r'echo "([a-z-]+)=', RUN_SH))
    declared = set(ACTION["outputs"])
    assert declared <= written, f"declared, never written: {declared - written}"
    assert written - declared == {"results", "artifact"}  # the upload step's, not the user's
    for name, output in ACTION["outputs"].items():
        assert output["value"] == f"${{{{ steps.run.outputs.{name} }}}}"
    assert step["run"] == 'bash "$GITHUB_ACTION_PATH/.ci/action/run.sh"'


def test_every_input_reaches_the_step_as_an_environment_variable() -> None:
    # Inputs never spliced into a script: an input holding `$(...)` or a quote stays data.
    steps = ACTION["runs"]["steps"]
    env = {value for step in steps for value in step.get("env", {}).values()}
    used = {name for name in ACTION["inputs"] if f"${{{{ inputs.{name} }}}}" in env}
    assert used | {"python-version"} == set(ACTION["inputs"])
    assert all("inputs." not in step.get("run", "") for step in steps)


def test_the_outputs_of_a_summary() -> None:
    module = outputs_module()
    assert module.lines(module.outputs(summary())) == (
        "verdict=fail\nheadline=duplicate\nduplicates=1\nlost=0\nintents=4\nduplicate-rate=0.25\n"
    )
    passed = module.outputs(summary(gate={"passed": True}, headline={"kind": "exactly_once"}))
    assert (passed["verdict"], passed["headline"]) == ("pass", "exactly_once")


def test_a_value_that_could_set_another_output_is_refused() -> None:
    module = outputs_module()
    with pytest.raises(ValueError, match="is not a plain word or number"):
        module.lines(module.outputs(summary(headline={"kind": "duplicate\nverdict=pass"})))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"gate": {"passed": true}}', "is not a run's summary (KeyError"),
        (
            '{"gate": {"passed": true}, "headline": {"kind": "x"}, "verdicts": {"duplicate": 0, "lost": 0},'
            ' "rates": {"duplicate": {"n": 4, "rate": "lots"}}}',
            "is not a run's summary (ValueError",
        ),
        ("{not json", "cannot be read"),
    ],
)
def test_a_summary_it_cannot_read_is_one_line_and_exit_2(
    text: str, said: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-numeric rate ended in a traceback, and the step then had no outputs at all."""
    (tmp_path / "summary.json").write_text(text)
    assert outputs_module().main(["outputs.py", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert said in err
