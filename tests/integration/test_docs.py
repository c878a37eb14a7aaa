"""The documentation site: it builds with warnings as errors, its generated reference holds every
command, option, field, verdict and cause the code has, and every command block runs, in page order,
as a reader would run it (in a directory laid out like a checkout), with the swaps its mark writes
beside it (tests/helpers/docs.py; decision 0082).

What it costs: the pages start full runs of the shipped scenarios, whose time is their kills'. On a
shared 2-core machine (2026-12-07), each page's test took: your-server 184 s, README 127 s, replay
119 s (with the pod-kill run it shares with jepsen and the reference, which then took 35 s and 4 s;
and the run that replays what that run remembered), races 105 s (two explorations), postgresql
97 s, pytest 91 s, crash-points 45 s, contract 33 s, the invoices target's README 5 s, beside the
tutorial's 35 s: about 14 minutes one after another. Only the pages that share the run share a
worker; on two workers (`-n 2 --dist loadgroup`) the whole module took 9 min 48 s of wall time, each
page slower beside another (your-server 187 s, README 174 s, postgresql 160 s). The Docker pages add the
reference images' runs where an engine answers."""

from __future__ import annotations

import argparse
import csv
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
from tests.helpers.docs import blocks, every_block
from tests.helpers.paths import ROOT
from tests.helpers.processes import Target

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


CHECKOUT = (".venv", "Makefile", "pyproject.toml", "scenarios", "targets", "harness")
"""What a page's commands find of a checkout (``tests`` is added as a directory of its own)."""
OWN_FOLDER = (".venv", "scenarios", "targets")
"""What a reader's own folder holds for the pytest page: no project, so pytest collects only the
contract's items (the checkout's pyproject.toml would have it collect the whole suite)."""


def sandbox(tmp_path: Path, names: tuple[str, ...] = CHECKOUT) -> Path:
    """A directory that looks like a checkout to the commands: the venv, the Makefile, the tests'
    servers; what the commands write (scenarios, results, `--emit tests/chaos`) stays in it."""
    tmp_path.mkdir(exist_ok=True)
    for name in names:
        (tmp_path / name).symlink_to(ROOT / name)
    if "Makefile" in names:
        (tmp_path / "tests").mkdir()
        for child in (ROOT / "tests").iterdir():
            (tmp_path / "tests" / child.name).symlink_to(child)
    return tmp_path


def run_blocks(page: Path, cwd: Path, env: dict[str, str], marks: tuple[str, ...] = ("run",)) -> list[str]:
    """Every command of the page's blocks with one of these marks, swaps made, in page order; each
    must end with the exit code its comment gives (0 without one). Their standard output, in order."""
    found = [b.swapped() for b in blocks(page) if b.mark in marks]
    assert found, f"{page.name}: no block marked {marks}"
    outputs = []
    for block in found:
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
            said = f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            assert done.returncode == command.exits, f"{block.id}: {command.line}\n{said}"
            outputs.append(done.stdout)
    return outputs


def reader_env(**extra: str) -> dict[str, str]:
    """A reader's shell: the venv on the PATH (as after `source .venv/bin/activate`, for `pytest`)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **extra}


def test_the_tutorial_runs_as_written(tmp_path: Path, published_servers: str) -> None:
    """Every block of the tutorial marked runnable, in order: init drafts the memory server's
    scenario, the preflight passes, the run finds lost writes, crashpoints a power loss's."""
    cwd = sandbox(tmp_path)
    assert len([b for b in blocks(ROOT / "docs" / "tutorial.md") if b.runnable]) >= 5
    env = reader_env(PATH=f"{Path(published_servers).parent}{os.pathsep}{os.environ['PATH']}")
    run_blocks(ROOT / "docs" / "tutorial.md", cwd, env)
    assert "LOST" in (cwd / "results" / "memory-1" / "report.md").read_text(encoding="utf-8")


def _uses_the_run(page: Path) -> bool:
    text = "".join(b.swapped().text for b in blocks(page) if b.mark == "run")
    return "$DOCS_RUN" in text or "$DOCS_INTENT" in text


RUN_PAGES = [
    # the pages that share pod_kill_run share a worker, and so one run; the others spread
    pytest.param(page, marks=[pytest.mark.xdist_group("docs-run")] if _uses_the_run(page) else [])
    for page in sorted({b.page for b in every_block() if b.mark == "run"} - {ROOT / "docs" / "tutorial.md"})
]
"""Every page with a block marked to run, but the tutorial (its own test, above)."""
NEEDS = {
    "postgresql.md": "postgres_server",
    "crash-points.md": "postgres_server",
    "races.md": "postgres_server",
    "your-server.md": "node",
}
"""What a page's commands need of the machine: the suite's fixture that has it or skips with the reason."""


RUN_ID = "pod-kill-1"


@pytest.fixture(scope="session")
def pod_kill_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """``$DOCS_RUN``: a run of scenarios/pod-kill.yaml as `make chaos` makes it, for the pages that
    start from a run directory (`results/<run-id>`), and ``$DOCS_INTENT`` one of its duplicates."""
    results = tmp_path_factory.mktemp("docs-run")
    made = subprocess.run(
        [
            str(BIN / "mcp-chaos"),
            "run",
            "scenarios/pod-kill.yaml",
            "--results",
            str(results),
            "--run-id",
            RUN_ID,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    run_dir = results / RUN_ID
    with (run_dir / "intents.csv").open(encoding="utf-8") as rows:
        duplicate = next(row for row in csv.DictReader(rows) if row["verdict"] == "duplicate")
    return run_dir, int(duplicate["intent"])


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_runs_as_written(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The page's blocks marked ``run``, in order, with their swaps: the commands exit as the page
    says, against the reference targets and scenarios (and a reference server at ``$DOCS_URL``)."""
    if page.name in NEEDS:
        request.getfixturevalue(NEEDS[page.name])
    text = "".join(b.swapped().text for b in blocks(page) if b.mark == "run")
    extra: dict[str, str] = {}
    if _uses_the_run(page):
        run_dir, intent = request.getfixturevalue("pod_kill_run")
        extra |= {"DOCS_RUN": str(run_dir), "DOCS_INTENT": str(intent)}
    server = None
    if "$DOCS_URL" in text:
        server = Target(tmp_path, INVOICES_MODE="atomic")
        extra["DOCS_URL"] = server.url
    try:
        cwd = sandbox(tmp_path / "sandbox", OWN_FOLDER if page.name == "pytest.md" else CHECKOUT)
        run_blocks(page, cwd, reader_env(**extra))
    finally:
        if server is not None:
            server.stop()


DOCKER_PAGES = sorted({b.page for b in every_block() if b.mark == "docker"}, key=lambda p: str(p))


@pytest.mark.docker
@pytest.mark.parametrize("page", DOCKER_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_runs_on_docker(page: Path, tmp_path: Path, docker_image: str, ts_image: str) -> None:
    """The blocks marked ``docker``, in order, where an engine answers (the reference images built
    by the fixtures, as `make image` builds them); skipped with the reason elsewhere."""
    run_blocks(page, sandbox(tmp_path / "sandbox"), reader_env(), marks=("docker",))


def test_every_page_of_docs_is_built(site: Path) -> None:
    built = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    docs = ROOT / "docs"
    for path in docs.rglob("*.md"):
        name = path.relative_to(docs).with_suffix("").as_posix()
        html = f"{name.removesuffix('index')}index.html" if path.name == "index.md" else f"{name}/index.html"
        assert html in built, f"{name}: not in the site"
