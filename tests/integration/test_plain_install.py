"""The install a user gets: the GitHub Action's own install step (``.ci/action/install.sh``: pip builds
the wheel from the checkout and installs it with no extra, in a fresh venv outside the checkout), then
every command from that venv, as a user outside the repository runs them.

Every other test runs in the dev environment, where the dev extra provides what a module forgets to
declare (httpx did: every command that loads the runner stopped with ``ModuleNotFoundError`` after a
plain ``pip install``). The module's tests share one venv (about a minute to make) and one worker.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.paths import ROOT
from tests.helpers.scenarios import invoice_scenario

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("plain-install")]

INSTALL_SH = ROOT / ".ci" / "action" / "install.sh"
RUN_SH = ROOT / ".ci" / "action" / "run.sh"
COMMANDS = [
    "run",
    "audit",
    "explain",
    "replay",
    "export",
    "export-otlp",
    "validate",
    "reproduce",
    "compare",
    "trend",
    "contract",
    "crashpoints",
    "races",
    "init",
    "cleanup",
    "conformance-client",
]
EXTRAS = {"harness.otlp": {"opentelemetry", "google", "requests"}, "harness.pytest_plugin": {"pytest"}}
"""Modules that need an extra, and the packages of that extra one of which they may miss (each is
imported only by what needs it: ``export --format otlp`` names its extra, pytest loads the plugin itself)."""

IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
import harness
failed = {}
for info in pkgutil.walk_packages(harness.__path__, "harness."):
    if info.name.endswith(".__main__"):  # importing one runs its command
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        failed[info.name] = exc.name
json.dump({"failed": failed, "file": harness.__file__}, sys.stdout)
"""


@dataclass(frozen=True)
class PlainInstall:
    bin: Path
    imports: dict[str, object]
    """What importing every module of the installed package gave, before any extra was added."""

    def __call__(self, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "mcp-chaos"), *args],
            cwd=cwd,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _env() -> dict[str, str]:
    """The test's environment without what points back into the dev venv or the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> PlainInstall:
    runner = tmp_path_factory.mktemp("runner")
    output = runner / "output"
    env = {
        **_env(),
        "PYTHON": sys.executable,  # venv makes the new one from the base interpreter, not this venv
        "GITHUB_ACTION_PATH": str(ROOT),
        "RUNNER_TEMP": str(runner),
        "GITHUB_OUTPUT": str(output),
    }
    done = subprocess.run(
        ["bash", str(INSTALL_SH)], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    bin_dir = Path(dict(line.split("=", 1) for line in output.read_text().splitlines())["bin"])
    outside = tmp_path_factory.mktemp("outside")
    checked = subprocess.run(
        [str(bin_dir / "python"), "-c", IMPORT_EVERY_MODULE],
        cwd=outside,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    return PlainInstall(bin_dir, json.loads(checked.stdout))


def test_every_module_imports_from_a_plain_install(plain: PlainInstall) -> None:
    assert not str(plain.imports["file"]).startswith(str(ROOT)), "the checkout was imported, not the wheel"
    failed = plain.imports["failed"]
    assert isinstance(failed, dict)
    provides = importlib.metadata.packages_distributions()
    missing = {
        module: f"{name} (distribution {', '.join(provides.get(str(name).split('.')[0], ['?']))})"
        for module, name in failed.items()
        if str(name).split(".")[0] not in EXTRAS.get(module, set())
    }
    assert not missing, f"no runtime dependency provides what these import: {missing}"
    assert set(failed) == set(EXTRAS), "a module meant for an extra imported without it, or failed"


def test_every_command_answers_help(plain: PlainInstall, tmp_path: Path) -> None:
    version = plain("--version", cwd=tmp_path)
    assert version.returncode == 0
    assert version.stdout.startswith("mcp-chaos ")
    for command in COMMANDS:
        done = plain(command, "--help", cwd=tmp_path)
        assert done.returncode == 0, f"{command} --help: {done.stderr}"


def _scenario(tmp_path: Path, mode: str, **sections: Any) -> Path:
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(invoice_scenario(mode=mode, **sections)))
    return path


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    said = done.stdout + done.stderr
    assert "ModuleNotFoundError" not in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]


def test_validate_and_a_run_through_the_actions_step(plain: PlainInstall, tmp_path: Path) -> None:
    """The reference target served by the plain venv's interpreter, one kill, through ``run.sh``."""
    scenario = _scenario(
        tmp_path, "naive", intents=40, concurrency=4, kills={"count": 1, "min_uptime_s": 0.3}
    )
    checked = plain("validate", str(scenario), cwd=tmp_path)
    _no_traceback(checked)
    assert checked.returncode == 0, checked.stderr
    output = tmp_path / "output"
    output.write_text("")
    env = {
        **_env(),
        "SCENARIO": str(scenario),
        "ARGS": "--quiet",
        "MCP_CHAOS": str(plain.bin / "mcp-chaos"),
        "MCP_CHAOS_PYTHON": str(plain.bin / "python"),
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_OUTPUT": str(output),
    }
    done = subprocess.run(
        ["bash", str(RUN_SH)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    _no_traceback(done)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["exit-code"] in ("0", "1"), done.stderr[-3000:]
    summary = json.loads((Path(outputs["run-dir"]) / "summary.json").read_text())
    assert summary["intents"]["started"] == 40
    assert [(f["kind"], f["injected"]) for f in summary["faults"]] == [("kill", 1)]
    spans = tmp_path / "spans.json"
    exported = plain("export", outputs["run-dir"], "--format", "otlp", "--file", str(spans), cwd=tmp_path)
    assert exported.returncode != 0
    assert "pip install 'mcp-chaos[otlp]'" in exported.stderr, "export --format otlp must name its extra"
    _no_traceback(exported)
    history = tmp_path / "history.edn"  # Jepsen's format needs no extra
    jepsen = plain("export", outputs["run-dir"], "--format", "jepsen", "--file", str(history), cwd=tmp_path)
    assert jepsen.returncode == 0, jepsen.stderr[-3000:]
    assert history.read_text().count(":f :add") >= 2 * 40


def test_contract_and_crashpoints(plain: PlainInstall, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "atomic")
    contract = plain(
        "contract", str(scenario), "--only", "replay,twins", "--results", str(tmp_path), cwd=tmp_path
    )
    _no_traceback(contract)
    assert contract.returncode == 0, contract.stdout[-3000:]
    crash = plain(
        "crashpoints",
        str(scenario),
        "--repeat",
        "1",
        "--budget",
        "10",
        "--jobs",
        "1",
        "--allow-inconclusive",
        "--quiet",
        "--results",
        str(tmp_path),
        cwd=tmp_path,
        timeout=600,
    )
    _no_traceback(crash)
    assert crash.returncode in (0, 1), crash.stdout[-3000:] + crash.stderr[-3000:]


def test_the_pytest_extra_runs_the_plugin_with_and_without_xdist(plain: PlainInstall, tmp_path: Path) -> None:
    """``pip install 'mcp-chaos[pytest]'`` in the same venv, then the items in an empty folder."""
    python = str(plain.bin / "python")
    install = [python, "-m", "pip", "install", "--quiet", f"{ROOT}[pytest]"]
    added = subprocess.run(install, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert added.returncode == 0, added.stderr[-3000:]
    scenario = _scenario(tmp_path, "atomic")
    empty = tmp_path / "empty"
    empty.mkdir()
    items = ["--mcp-chaos-contract", str(scenario), "--mcp-chaos-only", "replay", "-p", "no:cacheprovider"]
    items += ["--mcp-chaos-results", str(tmp_path / "results"), "-v"]
    pytest_bin = str(plain.bin / "pytest")
    alone = subprocess.run(
        [pytest_bin, *items], cwd=empty, env=_env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert alone.returncode == 0, alone.stdout[-3000:]
    assert "contract::replay PASSED" in alone.stdout
    xdist = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "pytest-xdist"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert xdist.returncode == 0, xdist.stderr[-3000:]
    spread = subprocess.run(
        [pytest_bin, *items, "-n", "2", "--dist", "loadgroup"],
        cwd=empty,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert spread.returncode == 0, spread.stdout[-3000:]
    assert "PASSED" in spread.stdout
    assert "contract::replay" in spread.stdout
