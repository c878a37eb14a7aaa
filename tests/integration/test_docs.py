"""The documentation site: it builds with warnings as errors, its generated reference holds every
command, option, field, verdict and cause the code has, and the blocks marked runnable run, in
order, as a reader would run them (in a directory laid out like a checkout)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.audit.causes import Cause
from harness.cli import build_parser
from harness.history import Verdict
from harness.scenario.schema import SCHEMA_FILE
from harness.scenario.serving import SERVICE_PLACEHOLDERS
from tests.helpers.docs import blocks
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as `make docs` builds it, with --strict: a warning fails the build."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def test_the_reference_names_every_command_and_option(site: Path) -> None:
    html = page(site, "reference/cli")
    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert f'id="{name}"' in html, name
        for action in command._actions:
            for option in (o for o in action.option_strings if o not in ("-h", "--help")):
                assert f"<code>{option}</code>" in html, f"{name} {option}"


def test_the_reference_names_every_field_verdict_and_cause(site: Path) -> None:
    fields = page(site, "reference/scenario")
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for definition in (schema, *schema["$defs"].values()):
        for field in definition["properties"]:
            assert f"<code>{field}</code>" in fields, field
    for name in SERVICE_PLACEHOLDERS:  # the services' placeholders, from their declarations
        assert f"<code>{{{name}}}</code>" in fields, name
    assert (site / "reference" / "scenario.schema.json").read_text(encoding="utf-8") == SCHEMA_FILE.read_text(
        encoding="utf-8"
    )
    findings = page(site, "reference/findings")
    for value in (*Verdict, *Cause):
        assert f"<code>{value.value}</code>" in findings, value


def test_the_repository_pages_link_within_the_site(site: Path) -> None:
    home = page(site, "")
    assert 'href="tutorial/"' in home  # README.md's docs/tutorial.md, as the site's page
    architecture = page(site, "project/architecture")
    assert 'href="../../decisions/0001-one-vocabulary/"' in architecture


def sandbox(tmp_path: Path) -> Path:
    """A directory that looks like a checkout to the commands: the venv, the Makefile, the tests'
    servers; what the commands write (scenarios, results) stays in it."""
    for name in (".venv", "Makefile", "pyproject.toml", "tests", "scenarios", "targets", "harness"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_the_tutorial_runs_as_written(tmp_path: Path, published_servers: str) -> None:
    """Every block of the tutorial marked runnable, in order: init drafts the memory server's
    scenario, the preflight passes, the run finds lost writes, crashpoints a power loss's."""
    cwd = sandbox(tmp_path)
    runnable = [b for b in blocks(ROOT / "docs" / "tutorial.md") if b.runnable]
    assert len(runnable) >= 5
    env = {**os.environ, "PATH": f"{Path(published_servers).parent}{os.pathsep}{os.environ['PATH']}"}
    for block in runnable:
        for command in block.commands():
            done = subprocess.run(
                ["bash", "-c", command.line],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == command.exits, f"{block.id}: {command.line}\n{done.stderr[-3000:]}"
    assert "LOST" in (cwd / "results" / "memory-1" / "report.md").read_text(encoding="utf-8")


def test_every_page_of_docs_is_built(site: Path) -> None:
    built = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    docs = ROOT / "docs"
    for path in docs.rglob("*.md"):
        name = path.relative_to(docs).with_suffix("").as_posix()
        html = f"{name.removesuffix('index')}index.html" if path.name == "index.md" else f"{name}/index.html"
        assert html in built, f"{name}: not in the site"
