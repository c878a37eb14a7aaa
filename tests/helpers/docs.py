"""The documentation's code blocks, as the tests read them: every fenced block of every page.

Every fence names its language. A command block (```sh) is a list of commands, one a line (a
trailing backslash continues it); what a command prints is an output block (```text), never
``sh``. Every command is checked against the code (`tests/unit/test_docs_blocks.py`), and every
command block carries a mark, the HTML comment right before it, that says how it is run
(`tests/integration/test_docs.py` runs them, in page order, in a directory laid out like a
checkout):

- ``<!-- docs-test: run -->``: as written.
- ``<!-- docs-test: run with OLD => NEW; ... -->``: with a reader's placeholder (``my.yaml``,
  ``results/<run-id>``, a URL) put in place by what the test has (a reference scenario, the run
  just made, a reference server it starts: ``$DOCS_URL``), or a long run cut short; written in
  the page, so a reader sees what was run.
- ``<!-- docs-test: docker ... -->``: the same, where a Docker engine answers (with the
  reference images); skipped with the reason elsewhere.
- ``<!-- docs-test: not run: WHY -->``: an excuse, pinned with its reason in the unit test.

A command expected to fail says so in its comment, as a reader wants to know too: ``# exits 1: ...``.
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

SHELL = {"sh"}
"""The language of a command block: one spelling, so a block of commands is never taken for output."""
LANGUAGES = {*SHELL, "text", "yaml", "python", "json"}
"""Every language a fence may name; ``text`` is output (a transcript, a table, a drawing)."""
RUN_MARK = "<!-- docs-test: run -->"
_MARK = re.compile(r"^<!--\s*docs-test:\s*(run|docker|not run)\b(.*?)-->$", re.S)
_EXITS = re.compile(r"#\s*exits (\d+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """1-based line of the block's opening fence."""
    language: str
    text: str
    mark: str | None = None
    """``run``, ``docker`` or ``not run`` (the block's ``docs-test`` comment), else None."""
    swaps: tuple[tuple[str, str], ...] = ()
    """The mark's ``OLD => NEW`` pairs, applied in order before the block runs."""
    reason: str = ""
    """Why a block marked ``not run`` is not."""

    @property
    def runnable(self) -> bool:
        return self.mark in ("run", "docker")

    def swapped(self) -> Block:
        """The block as the tests run it: every swap of its mark made (each must match)."""
        text = self.text
        for old, new in self.swaps:
            if old not in text:
                raise ValueError(f"{self.id}: the mark swaps {old!r}, which the block does not hold")
            text = text.replace(old, new)
        return Block(self.page, self.line, self.language, text, self.mark)

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


def parse_mark(comment: str) -> tuple[str | None, tuple[tuple[str, str], ...], str]:
    """A ``docs-test`` comment's kind, swaps and reason; (None, (), "") for any other text."""
    found = _MARK.match(comment.strip())
    if found is None:
        return None, (), ""
    kind, rest = found.group(1), " ".join(found.group(2).split())
    if kind == "not run":
        return kind, (), rest.removeprefix(":").strip()
    if not rest:
        return kind, (), ""
    if not rest.startswith("with "):
        raise ValueError(f"a docs-test mark reads `{kind}` or `{kind} with OLD => NEW; ...`, not {comment!r}")
    swaps = []
    for pair in rest.removeprefix("with ").split(";"):
        old, arrow, new = pair.partition(" => ")
        if not arrow or not old.strip():
            raise ValueError(f"a swap reads `OLD => NEW`, not {pair!r}")
        swaps.append((old.strip().strip("`"), new.strip().strip("`")))
    return kind, tuple(swaps), ""


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, each with the ``docs-test`` mark right before it, if any."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found = []
    for before, token in zip([None, *tokens], tokens, strict=False):
        if token.type != "fence" or token.map is None:
            continue
        mark: tuple[str | None, tuple[tuple[str, str], ...], str] = (None, (), "")
        if before is not None and before.type == "html_block":
            mark = parse_mark(before.content)
        language = token.info.split()[0] if token.info.strip() else ""
        found.append(Block(page, token.map[0] + 1, language, token.content, *mark))
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]
