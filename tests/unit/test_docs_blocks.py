"""Every code block of the documentation, checked against the code: a command's options parse with
the real argument parser, a make target exists, a scenario the docs name is there, YAML parses,
Python compiles. Every fence names its language (commands are ```sh, output ```text), and every
command block is marked to run (tests/integration/test_docs.py runs it) or excused here, with the
reason; the README stays a page a person reads in a few minutes."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import pytest
import yaml

from harness.cli import build_parser
from harness.scenario.effects import Audit
from harness.scenario.target import TargetSpec
from tests.helpers.docs import LANGUAGES, SHELL, Block, Command, blocks, every_block, parse_mark
from tests.helpers.paths import ROOT

BLOCKS = every_block()
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def plugin_options() -> set[str]:
    """Every option the pytest plugin adds, as pytest's own parser receives them (some are made
    in a loop over the exploration's options, so the plugin's text does not hold them)."""
    from _pytest.config.argparsing import Parser

    from harness import pytest_plugin

    parser = Parser(_ispytest=True)  # pytest builds its own so; no public way to list a plugin's options
    pytest_plugin.pytest_addoption(parser)
    return {name for group in parser._groups for option in group.options for name in option.names()}


PLUGIN_OPTIONS = plugin_options()
OTHER_PROGRAMS = {"pip", "npm", "node", "git", "docker", "kubectl", "python", "sh", "timeout"}
"""Programs a page may name whose arguments the tests do not check."""


def check_command(command: Command) -> None:
    """What the code can say of one documented command without running it."""
    program, arguments = command.program
    if program == "mcp-chaos":
        err = io.StringIO()
        code: object = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser().parse_args(arguments)
            except SystemExit as exit_:
                code = exit_.code
        assert code == 0, f"{command.line!r}: {err.getvalue().strip().splitlines()[-1]}"
    elif program == "make":
        for target in (a for a in arguments if "=" not in a and not a.startswith("-")):
            found = re.search(rf"^{re.escape(target)}:", MAKEFILE, re.M)
            assert found, f"{command.line!r}: no target {target}"
    elif program == "pytest":
        for option in (a.split("=")[0] for a in arguments if a.startswith("--mcp-chaos")):
            assert option in PLUGIN_OPTIONS, f"{command.line!r}: the plugin has no option {option}"
    else:
        assert program in OTHER_PROGRAMS, f"{command.line!r}: {program!r} is no program the docs use"
    for word in command.words:
        if word.startswith("scenarios/") and "<" not in word:
            assert (ROOT / word).exists(), f"{command.line!r}: {word} is not in the repository"


def check_sections(parsed: object) -> None:
    """A YAML block's whole target and audit sections validate as a scenario's do: the store-making
    shell line of "A store made before the server starts" held a brace group (``{ ...; }``) that
    target.command refuses as a placeholder, and a reader who copied it got that error."""
    if not isinstance(parsed, dict):
        return
    target = parsed.get("target")
    if isinstance(target, dict) and target.keys() & {"command", "image", "url"}:
        TargetSpec.model_validate(target)
    if isinstance(audit := parsed.get("audit"), dict):
        Audit.model_validate(audit)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_a_code_block_agrees_with_the_code(block: Block) -> None:
    if block.language in SHELL:
        assert block.commands(), "an empty shell block"
        for command in block.commands():
            check_command(command)
    elif block.language == "yaml":
        check_sections(yaml.safe_load(block.text))
    elif block.language == "python":
        compile(block.text, block.id, "exec")
    else:
        assert not block.runnable, "only a shell block can be run"


TEST_VALUES = {
    "$DOCS_RUN": "results/pod-kill-1",
    "$DOCS_INTENT": "17",
    "$DOCS_URL": "http://127.0.0.1:8080/mcp",
}
"""What tests/integration/test_docs.py sets these to, in kind: a run directory, an intent, a URL."""
EXCUSED: dict[str, str] = {}
"""Command blocks marked ``not run``, by page and first command, with why no test can run them.
Empty: every command block of the docs runs (with a Docker engine for the image pages)."""


def test_the_blocks_are_found_and_some_are_run() -> None:
    assert len(BLOCKS) > 30
    runnable = [b for b in BLOCKS if b.runnable]
    assert {b.page.name for b in runnable} >= {"tutorial.md", "README.md", "your-server.md"}
    assert all(b.language in SHELL for b in runnable)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_fence_names_its_language(block: Block) -> None:
    """An unnamed fence is neither run nor checked: a command block must say ``sh``, output ``text``."""
    assert block.language in LANGUAGES, f"a fence names {block.language!r}: one of {sorted(LANGUAGES)}"


def test_every_command_block_runs_or_is_excused() -> None:
    """A new command block without a mark fails here: mark it ``run`` (with swaps for a reader's
    placeholders), ``docker``, or ``not run: WHY`` and add it to EXCUSED."""
    unmarked = [b.id for b in BLOCKS if b.language in SHELL and b.mark is None]
    assert not unmarked, f"command blocks with no docs-test mark: {unmarked}"
    excused = [b for b in BLOCKS if b.mark == "not run"]
    assert {f"{b.page.relative_to(ROOT)}: {b.commands()[0].line}": b.reason for b in excused} == EXCUSED
    for block in (b for b in BLOCKS if b.runnable):
        text = block.swapped().text  # every swap matches, and what it makes parses
        for name, value in TEST_VALUES.items():
            text = text.replace(name, value)
        for command in dataclasses.replace(block, text=text).commands():
            check_command(command)


def test_a_mark_is_read_with_its_swaps() -> None:
    assert parse_mark("<!-- docs-test: run -->") == ("run", (), "")
    swapping = "<!-- docs-test: run with `my.yaml` => `scenarios/pod-kill.yaml`; <run-id> => r1 -->"
    assert parse_mark(swapping) == (
        "run",
        (("my.yaml", "scenarios/pod-kill.yaml"), ("<run-id>", "r1")),
        "",
    )
    assert parse_mark("<!-- docs-test: not run: it needs a reader's cloud -->") == (
        "not run",
        (),
        "it needs a reader's cloud",
    )
    assert parse_mark("<!-- a comment -->") == (None, (), "")
    with pytest.raises(ValueError, match="OLD => NEW"):
        parse_mark("<!-- docs-test: run with my.yaml -->")


def test_a_misspelt_option_or_target_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\n.venv/bin/mcp-chaos run scenarios/pod-kill.yaml --sed 7\nmake chaoss\n```\n")
    ((run, make),) = (block.commands() for block in blocks(page))
    with pytest.raises(AssertionError, match="unrecognized arguments: --sed 7"):
        check_command(run)
    with pytest.raises(AssertionError, match="no target chaoss"):
        check_command(make)


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail into docs/"
    assert "make chaos" in "\n".join(lines)
    assert "make test" in "\n".join(lines)
