"""Placeholders and argument templates: parsed once, when a scenario is validated.

A scenario writes ``{name}`` where a value is known only at run time (a port, a
marker, an intent's key); ``{{`` and ``}}`` are literal braces. Nothing else of
Python's format language is accepted (no ``!r`` conversions, no ``:d`` specs,
no attribute access), so a scenario that validates cannot fail to render.

Where a scenario allows it (a target's environment and HTTP headers),
``${NAME}`` is a variable of the harness's own environment, expanded only when
a run starts (:func:`expand_env`), so a token never has to be written into a
scenario, and the scenario as run keeps ``${NAME}``, not the value.

A tool's argument template is a JSON-like value whose strings may use the
argument placeholders and whose mappings may be *generators*
(``{random_int: [low, high]}``, ``{choice: [a, b, c]}``), drawn once per intent
from the workload's seeded generator. :func:`parse_template` turns it into a
:class:`Template` that draws and renders without interpreting it again; the
scenario model does that once, and the workload uses the result.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ARGUMENT_PLACEHOLDERS = frozenset({"marker", "key", "index", "seed"})
GENERATORS = frozenset({"random_int", "choice"})
MAX_DEPTH = 32
"""Argument templates nest at most this deep (a real tool's arguments nest a few levels)."""

_TOKEN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\{\{|\}\}|\{([^{}]*)\}|[{}]")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class TemplateError(ValueError):
    """A placeholder or template that cannot be rendered; the message names where and why."""


@dataclass(frozen=True, slots=True)
class Text:
    """A string with placeholders, split once into literal parts and placeholder names."""

    parts: tuple[str, ...]
    """Literal text at even positions, placeholder names at odd positions."""

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.parts[1::2])

    def render(self, values: Mapping[str, Any]) -> str:
        if len(self.parts) == 1:
            return self.parts[0]
        return "".join(p if i % 2 == 0 else str(values[p]) for i, p in enumerate(self.parts))


_LITERAL_HINT = "; a brace meant as itself (a shell's { ...; }, JSON) is written twice: {{ and }}"
"""What a bad placeholder with spaces in it most likely was: text that holds braces of its own."""


def parse_text(text: str, allowed: frozenset[str], where: str, *, env_refs: bool = False) -> Text:
    """Split ``text`` at its placeholders; TemplateError for bad syntax or a name not in ``allowed``.

    With ``env_refs``, ``${NAME}`` stays in the text as it is, for :func:`expand_env`.
    """
    parts: list[str] = []
    literal: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(text):
        literal.append(text[pos : match.start()])
        pos = match.end()
        token = match.group(0)
        if token in ("{{", "}}"):
            literal.append(token[0])
            continue
        if match.group(1) is not None:
            if not env_refs:
                raise TemplateError(
                    f"{token} in {where} {text!r}: environment variables are expanded only in "
                    "target.env and target.headers"
                )
            literal.append(token)
            continue
        name = match.group(2)
        if name is None:
            raise TemplateError(
                f"unmatched {token!r} in {where} {text!r}; write {token * 2} for a literal brace"
            )
        if not _NAME.match(name):
            raise TemplateError(
                f"bad placeholder {{{name}}} in {where} {text!r}: write a bare {{name}} "
                "(no conversions, format specs or expressions)"
                + (_LITERAL_HINT if any(c.isspace() for c in name) else "")
            )
        if name not in allowed:
            raise TemplateError(
                f"unknown placeholder {{{name}}} in {where} {text!r}; "
                f"allowed here: {', '.join('{' + p + '}' for p in sorted(allowed))}"
            )
        parts.append("".join(literal))
        parts.append(name)
        literal = []
    literal.append(text[pos:])
    parts.append("".join(literal))
    return Text(tuple(parts))


def render_text(
    text: str, values: Mapping[str, Any], allowed: frozenset[str], where: str, *, env_refs: bool = False
) -> str:
    """Parse and render in one step (for values rendered once per run, like a command line)."""
    return parse_text(text, allowed, where, env_refs=env_refs).render(values)


def env_refs_in(text: str) -> list[str]:
    """The ``${NAME}`` variables a text refers to."""
    return _ENV_REF.findall(text)


def split_env_refs(text: str) -> list[str]:
    """``text`` split at its ``${NAME}`` references: literal text at even positions, names at odd."""
    return _ENV_REF.split(text)


def expand_env(text: str, environ: Mapping[str, str], where: str) -> str:
    """Replace each ``${NAME}`` by its value in ``environ``; TemplateError naming a missing one."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise TemplateError(f"{where} uses ${{{name}}}, which is not set in the environment: export it")
        return environ[name]

    return _ENV_REF.sub(value, text)


# -- argument templates

_Draw = Callable[[random.Random, list[Any]], None]
_Render = Callable[[Mapping[str, Any], Iterator[Any]], Any]


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled argument template: draws its random values per intent, renders per attempt."""

    draw_into: _Draw
    render_from: _Render
    placeholders: frozenset[str]
    """The placeholders its strings use (``marker``, ``key``, ...)."""

    def draw(self, rng: random.Random) -> tuple[Any, ...]:
        out: list[Any] = []
        self.draw_into(rng, out)
        return tuple(out)

    def render(self, values: Mapping[str, Any], draws: Sequence[Any]) -> Any:
        return self.render_from(values, iter(draws))


def _no_draw(rng: random.Random, out: list[Any]) -> None:
    return None


def parse_template(value: Any, path: str = "") -> Template:
    """Compile an argument template; TemplateError names the first bad value by its path."""
    return _compile(value, path, 0)


def _compile(value: Any, path: str, depth: int) -> Template:
    if depth > MAX_DEPTH:
        raise TemplateError(f"argument {path}: nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        text = parse_text(value, ARGUMENT_PLACEHOLDERS, f"argument {path}")
        if len(text.parts) == 1:
            literal = text.parts[0]
            return Template(_no_draw, lambda values, draws: literal, frozenset())
        return Template(_no_draw, lambda values, draws: text.render(values), text.names)
    if isinstance(value, Mapping):
        gens = GENERATORS & set(value)
        if gens:
            return _generator(value, gens, path)
        items = [
            (str(k), _compile(v, f"{path}.{k}" if path else str(k), depth + 1)) for k, v in value.items()
        ]

        def draw_items(rng: random.Random, out: list[Any]) -> None:
            for _, t in items:
                t.draw_into(rng, out)

        return Template(
            draw_items,
            lambda values, draws: {k: t.render_from(values, draws) for k, t in items},
            frozenset().union(*(t.placeholders for _, t in items)),
        )
    if isinstance(value, list):
        nodes = [_compile(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]

        def draw_nodes(rng: random.Random, out: list[Any]) -> None:
            for t in nodes:
                t.draw_into(rng, out)

        return Template(
            draw_nodes,
            lambda values, draws: [t.render_from(values, draws) for t in nodes],
            frozenset().union(*(t.placeholders for t in nodes)),
        )
    if value is None or isinstance(value, bool | int | float):
        constant = value
        return Template(_no_draw, lambda values, draws: constant, frozenset())
    raise TemplateError(f"argument {path}: unsupported value {value!r}")


def _generator(value: Mapping[str, Any], gens: frozenset[str], path: str) -> Template:
    if len(value) != 1:
        raise TemplateError(f"argument {path}: a generator ({', '.join(sorted(gens))}) must be alone")
    (name,) = gens
    spec = value[name]
    if name == "random_int":
        if not (
            isinstance(spec, Sequence)
            and not isinstance(spec, str)
            and len(spec) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in spec)
            and spec[0] <= spec[1]
        ):
            raise TemplateError(f"argument {path}: random_int needs [low, high] integers with low <= high")
        low, high = int(spec[0]), int(spec[1])

        def draw_int(rng: random.Random, out: list[Any]) -> None:
            out.append(rng.randint(low, high))

        return Template(draw_int, lambda values, draws: next(draws), frozenset())
    if not (isinstance(spec, Sequence) and not isinstance(spec, str) and len(spec) > 0):
        raise TemplateError(f"argument {path}: choice needs a non-empty list")
    options = list(spec)

    def draw_choice(rng: random.Random, out: list[Any]) -> None:
        out.append(options[rng.randrange(len(options))])

    return Template(draw_choice, lambda values, draws: next(draws), frozenset())
