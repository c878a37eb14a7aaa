"""The CI workflows: valid for GitHub Actions (actionlint), and calling only the Makefile's targets,
so what runs in CI runs on a laptop; and the action (action.yml) as a user's workflow uses it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
MAKEFILE = (ROOT / "Makefile").read_text()


def test_there_is_a_ci_and_a_nightly_workflow() -> None:
    assert [w.name for w in WORKFLOWS] == ["ci.yml", "nightly.yml"]


def test_actionlint_finds_nothing() -> None:
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which(
        "actionlint"
    )
    if actionlint is None:
        pytest.fail("actionlint is missing: it is a dev dependency (pip install -e '.[dev]')")
    result = subprocess.run([actionlint, *map(str, WORKFLOWS)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_step_runs_a_make_target_or_a_known_action(workflow: Path) -> None:
    doc = yaml.safe_load(workflow.read_text())
    for job in doc["jobs"].values():
        for step in job["steps"]:
            if "run" in step:
                target = step["run"].split()
                assert target[0] == "make", f"{workflow.name}: {step['run']!r} is not a make target"
                assert f"\n{target[1]}:" in MAKEFILE, (
                    f"{workflow.name}: no target {target[1]} in the Makefile"
                )
            else:
                assert step["uses"].split("/")[0] in ("actions", "mikepenz"), step["uses"]


CI_PAGE = ROOT / "docs" / "how-to" / "ci.md"
"""The how-to page that shows a user's workflow with the action."""


def readme_workflow() -> str:
    """The user's workflow the docs show (docs/how-to/ci.md), with the action taken from the
    repository itself."""
    page = CI_PAGE.read_text(encoding="utf-8")
    section = page.split("## In GitHub Actions", 1)[1]
    (workflow,) = re.findall(r"```yaml\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    local, n = re.subn(r"uses: \S+/mcp-chaos@\S+", "uses: ./", workflow)
    assert n == 1, "the docs' workflow uses the action once"
    return local


def lint_in_a_repository(tmp_path: Path, workflow: str) -> subprocess.CompletedProcess[str]:
    """actionlint on ``workflow`` in a repository whose root holds action.yml: it reads the action's
    inputs and outputs for ``uses: ./`` only inside a repository (a .git directory)."""
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which(
        "actionlint"
    )
    if actionlint is None:
        pytest.skip("actionlint cannot run here: it is a dev dependency (pip install -e '.[dev]')")
    (tmp_path / ".git").mkdir()
    shutil.copy(ROOT / "action.yml", tmp_path / "action.yml")
    path = tmp_path / ".github" / "workflows" / "chaos.yml"
    path.parent.mkdir(parents=True)
    path.write_text(workflow, encoding="utf-8")
    return subprocess.run(
        [actionlint, str(path.relative_to(tmp_path))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )


def test_actionlint_accepts_the_readmes_workflow_using_the_action(tmp_path: Path) -> None:
    workflow = readme_workflow()
    assert "uses: ./\n" in workflow
    result = lint_in_a_repository(tmp_path, workflow)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_checks_the_inputs_and_outputs_the_action_declares(tmp_path: Path) -> None:
    # The lint above reads the action: a misspelt input or output of it is a finding.
    workflow = readme_workflow().replace("fail-on:", "fail_on:").replace("outputs.lost", "outputs.losts")
    result = lint_in_a_repository(tmp_path, workflow)
    assert result.returncode == 1
    assert 'input "fail_on" is not defined in action "mcp-chaos"' in result.stdout
    assert 'property "losts" is not defined' in result.stdout
