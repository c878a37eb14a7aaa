"""What harness/ imports is what pyproject.toml declares for a plain install (`make lint` runs deptry).

Every test of the suite runs in the dev environment, where the dev extra provides anything a module
forgets to declare: these tests are what keeps ``pip install mcp-chaos`` (no extra) working.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

PYPROJECT = ROOT / "pyproject.toml"
DEPTRY = Path(sys.executable).with_name("deptry")
NOT_IMPORTED = {
    # name: where it is used, by its distribution's files rather than by an import
    "bpe-openai": ROOT / "harness" / "contract" / "tokens.py",
    "uvicorn": ROOT / "targets" / "invoices" / "server.py",
}
"""The runtime dependencies deptry is told to ignore as unused (``[tool.deptry.per_rule_ignores]``)."""


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]


def _project() -> dict[str, object]:
    return tomllib.loads(PYPROJECT.read_text())


def _runtime() -> list[str]:
    deps = _project()["project"]["dependencies"]  # type: ignore[index]
    assert isinstance(deps, list)
    return [str(d) for d in deps]


def _deptry(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEPTRY), "harness", "--config", str(config), "--no-ansi"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_harness_imports_only_what_a_plain_install_has() -> None:
    done = _deptry(PYPROJECT)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("requirement", [r for r in _runtime() if _name(r) not in NOT_IMPORTED])
def test_removing_a_runtime_dependency_is_named(tmp_path: Path, requirement: str) -> None:
    """A dependency dropped from pyproject.toml fails the check with its import's name."""
    text = PYPROJECT.read_text()
    line = f'    "{requirement}",\n'
    assert text.count(line) == 1, f"{requirement} is not on a line of its own in pyproject.toml"
    config = tmp_path / "pyproject.toml"
    config.write_text(text.replace(line, ""))
    done = _deptry(config)
    assert done.returncode == 1, done.stdout + done.stderr
    imported = {"pyyaml": "yaml", "psycopg[binary]": "psycopg", "pydantic-core": "pydantic_core"}
    module = imported.get(requirement.split(">")[0].lower(), _name(requirement).replace("-", "_"))
    said = done.stdout + done.stderr
    assert f"'{module}'" in said, said


@pytest.mark.parametrize("name", sorted(NOT_IMPORTED))
def test_a_dependency_used_by_name_stays_declared(name: str) -> None:
    """deptry cannot see these (no import names them); each is declared and still used where it says."""
    assert name in {_name(r) for r in _runtime()}, f"{name} is used by {NOT_IMPORTED[name]} but not declared"
    module = name.replace("-", "_")
    assert module in NOT_IMPORTED[name].read_text(), f"{NOT_IMPORTED[name]} no longer uses {name}"
    ignored = _project()["tool"]["deptry"]["per_rule_ignores"]["DEP002"]  # type: ignore[index]
    assert name in ignored


def test_the_pytest_extra_brings_pytest() -> None:
    """The plugin is an entry point of every install; pytest comes with the ``pytest`` extra."""
    extras = _project()["project"]["optional-dependencies"]  # type: ignore[index]
    assert isinstance(extras, dict)
    assert any(_name(r) == "pytest" for r in extras["pytest"])
    assert not any(_name(r) == "pytest" for r in _runtime())
