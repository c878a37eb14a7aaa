"""The CI workflows: valid for GitHub Actions (actionlint), and calling only the Makefile's targets,
so what runs in CI runs on a laptop."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).parents[2] / ".github" / "workflows").glob("*.yml"))
MAKEFILE = (Path(__file__).parents[2] / "Makefile").read_text()


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
