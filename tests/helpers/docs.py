"""The documentation's code blocks, as the tests read them: every fenced block of every page.

A shell block (```sh) is a list of commands, one a line (a trailing backslash continues it). Every
command is checked against the code (`tests/unit/test_docs_blocks.py`); a block right after the
comment ``<!-- docs-test: run -->`` is also run, in order with the page's other such blocks, in a
directory laid out like a checkout (`tests/integration/test_docs.py`). A command expected to fail
says so in its comment, as a reader wants to know too: ``# exits 1: ...``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from tests.helpers.paths import ROOT

PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "ARCHITECTURE.md",
        ROOT / "scenarios" / "README.md",
        ROOT / "results" / "README.md",
        ROOT / "tests" / "README.md",
        ROOT / "targets" / "invoices" / "README.md",
        *(p for p in (ROOT / "docs").rglob("*.md")),
    ]
)
"""Every page of the site: the docs and the repository's files the site shows (docs/hooks/reference.py)."""

SHELL = {"sh", "bash", "shell", "console"}
RUN_MARK = "<!-- docs-test: run -->"
_EXITS = re.compile(r"#\s*exits (\d+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """1-based line of the block's opening fence."""
    language: str
    text: str
    runnable: bool

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[Command]:
        """The block's commands, continuation lines joined."""
        found: list[Command] = []
        pending = ""
        for raw in self.text.splitlines():
            pending += raw.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            words = shlex.split(pending, comments=True)
            if words:
                exits = _EXITS.search(pending)
                found.append(Command(pending.strip(), words, int(exits.group(1)) if exits else 0))
            pending = ""
        return found


@dataclass(frozen=True)
class Command:
    line: str
    """The command as written (a shell line, comment included)."""
    words: list[str]
    exits: int
    """The exit code the docs say it ends with (``# exits N``), else 0."""

    @property
    def program(self) -> tuple[str, list[str]]:
        """The program's name (a path's last part) and its arguments, ``NAME=VALUE`` prefixes left out."""
        words = list(self.words)
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words.pop(0)
        return (words[0].rsplit("/", 1)[-1], words[1:]) if words else ("", [])


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, each marked runnable when the run mark comes right before it."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found = []
    for before, token in zip([None, *tokens], tokens, strict=False):
        if token.type != "fence" or token.map is None:
            continue
        marked = before is not None and before.type == "html_block" and before.content.strip() == RUN_MARK
        language = token.info.split()[0] if token.info.strip() else ""
        found.append(Block(page, token.map[0] + 1, language, token.content, marked))
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]
