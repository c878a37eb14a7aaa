"""Values in a shell line as data: each a reference to an environment variable, quoted for where it stands.

A url target's kill or restart command written as one string runs as ``/bin/sh -c LINE``. Pasting a
value into the line lets the shell read it as code: a results directory named ``$(...)`` ran it, and
so did a secret holding ``"; ...``. Instead, every value goes into the command's environment, and
the line refers to it where the value stood, written for the quoting around that place:

* outside quotes: ``"${NAME}"`` (one word, never split or globbed);
* inside double quotes: ``${NAME}``;
* inside single quotes: ``'"${NAME}"'`` (the single quotes closed around it, then reopened).

A shell expands a parameter and never parses what it holds, so however a line is quoted, a value is
never run. The quoting is followed as POSIX sh reads it (backslashes, both quotes, ``$(...)`` and
backquotes with quoting of their own inside, comments); where it is misjudged (a here-document's
body), the command sees a wrong value, never a command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ref:
    """A value the line refers to through the environment variable ``name``."""

    name: str
    value: str


_BARE, _SUBST, _BACKQUOTE, _DOUBLE, _SINGLE, _COMMENT = range(6)
"""Where the shell is reading: outside quotes (the line's top level, a ``$(...)``, a backquoted
command), inside double or single quotes, in a comment."""
_UNQUOTED = (_BARE, _SUBST, _BACKQUOTE)
_WORD_BREAK = " \t\n;&|()<>"
"""What ends a word: a ``#`` right after one of these (or at the start) begins a comment."""
_ESCAPED_IN_DOUBLE = '$`"\\\n'
"""The characters a backslash escapes inside double quotes (before any other it is itself)."""


class _Reader:
    """The quoting at each point of a shell line, read one character at a time."""

    def __init__(self) -> None:
        self.stack: list[list[int]] = [[_BARE, 0]]
        """Open contexts, innermost last: [kind, open parentheses] (those count only in a ``$(``)."""
        self.backslash = False
        """The last character was a backslash that may escape this one."""
        self.dollar = False
        """The last character was a ``$`` outside single quotes: a ``(`` now opens a substitution."""
        self.previous = "\n"
        """The last character read outside a comment (a ``#`` after a word break starts one)."""

    @property
    def kind(self) -> int:
        return self.stack[-1][0]

    def read(self, text: str) -> None:
        for c in text:
            self._read(c)
            if self.kind != _COMMENT:
                self.previous = c

    def _read(self, c: str) -> None:
        kind, frame = self.kind, self.stack[-1]
        backslash, self.backslash = self.backslash, False
        dollar, self.dollar = self.dollar, False
        if backslash and (kind != _DOUBLE or c in _ESCAPED_IN_DOUBLE):
            return  # escaped: the character itself, whatever it is
        if kind == _SINGLE:
            if c == "'":
                self.stack.pop()
        elif kind == _COMMENT:
            if c == "\n":
                self.stack.pop()
        elif c == "\\":
            self.backslash = True
        elif dollar and c == "(":
            self.stack.append([_SUBST, 1])
        elif c == "$":
            self.dollar = True
        elif c == "`":
            if kind == _BACKQUOTE:
                self.stack.pop()
            else:
                self.stack.append([_BACKQUOTE, 0])
        elif kind == _DOUBLE:
            if c == '"':
                self.stack.pop()
        elif c == "'":
            self.stack.append([_SINGLE, 0])
        elif c == '"':
            self.stack.append([_DOUBLE, 0])
        elif c == "#" and self.previous in _WORD_BREAK:
            self.stack.append([_COMMENT, 0])
        elif kind == _SUBST and c in "()":
            frame[1] += 1 if c == "(" else -1
            if frame[1] == 0:
                self.stack.pop()

    def reference(self, name: str) -> str:
        """How the value of ``name`` is written at this point of the line."""
        if self.kind in _UNQUOTED:
            return f'"${{{name}}}"'
        if self.kind == _SINGLE:
            return f"'\"${{{name}}}\"'"
        return f"${{{name}}}"  # inside double quotes, or a comment (where nothing is expanded)


def shell_line(pieces: Sequence[str | Ref]) -> tuple[str, Mapping[str, str]]:
    """The line made of ``pieces`` (shell text, and values referred to), and the environment its
    references need."""
    reader = _Reader()
    out: list[str] = []
    env: dict[str, str] = {}
    for piece in pieces:
        if isinstance(piece, Ref):
            text = reader.reference(piece.name)
            env[piece.name] = piece.value
        else:
            text = piece
        out.append(text)
        reader.read(text)  # a reference too: the quotes it opens and closes are the line's
    return "".join(out), env
