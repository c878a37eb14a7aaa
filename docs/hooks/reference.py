"""The documentation site's generated pages, and its links to the repository (an MkDocs hook).

The reference is generated from the code at every build, so that it cannot go stale: every command
and option from the argument parser (``harness.cli.build_parser``), every field of a scenario from
its JSON Schema (``harness.scenario.schema``, itself from the pydantic model), the verdicts and
causes from their enums with their docstrings, the fault kinds from their modules
(``harness.faultkinds.registry.KINDS``, in blame order), the kinds of hold point from their facts
(``harness.crashpoints.points.KINDS``), the meaning and fix of each finding from
``harness.audit.fixes``, and the exit codes from the exception tree (``harness.errors``).

The repository's own Markdown files that are documentation (the README, ARCHITECTURE.md, the
scenario file's annotated fields, a run directory's files, ...) are pages of the site too, written
once where a reader of the repository finds them. Their links, written for the repository, are
rewritten here: to the page a file became, or, for a file that is no page (a module, a scenario),
to its path as text. A link to nothing is a warning, which ``mkdocs build --strict`` makes an error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from harness import history_schema
from harness.audit.causes import Cause
from harness.audit.fixes import FIXES
from harness.cli import build_parser
from harness.cli.common import EXIT_GATE_FAILED, EXIT_INTERRUPTED
from harness.crashpoints.points import KINDS, PointKind, Site
from harness.errors import HarnessError
from harness.events import EVENTS
from harness.faultkinds import registry as fault_kinds
from harness.history import IntentStatus, Outcome, RunStatus, Verdict
from harness.scenario.placeholders import BASE_PLACEHOLDERS
from harness.scenario.rules import SERVICE_SECTIONS
from harness.scenario.schema import SCHEMA_FILE, attribute_docstrings, schema_text
from harness.scenario.serving import SERVICES

log = logging.getLogger("mkdocs.hooks.reference")

ROOT = Path(__file__).resolve().parents[2]

MIRRORED = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "project/architecture.md",
    "BENCHMARKS.md": "project/benchmark-figures.md",
    "tests/README.md": "project/tests.md",
    "targets/invoices/README.md": "project/reference-target.md",
    "scenarios/README.md": "reference/scenario-file.md",
    "results/README.md": "reference/run-directory.md",
}
"""The repository's Markdown files that are pages of the site: repository path → page."""

GENERATED = {
    "reference/cli.md": "cli_page",
    "reference/scenario.md": "scenario_page",
    "reference/findings.md": "findings_page",
    "reference/points.md": "points_page",
    "reference/history.md": "history_page",
    "explanation/decisions.md": "decisions_page",
}
"""The pages made from the code: page → the function of this module that writes it."""

SCHEMA_PAGE = "reference/scenario.schema.json"
HISTORY_SCHEMA_PAGE = "reference/history.schema.json"

_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the mirrored and generated pages (and the schema) to the site."""
    for source, page in MIRRORED.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    for page, writer in GENERATED.items():
        files.append(File.generated(config, page, content=globals()[writer](config)))
    files.append(File.generated(config, SCHEMA_PAGE, content=schema_text()))
    files.append(File.generated(config, HISTORY_SCHEMA_PAGE, content=history_schema.schema_text()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """A page's links to the repository as links to its pages, or as the path they name."""
    source = _repository_path(page.file.src_uri, config)
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        lines.append(line if fenced else _LINK.sub(lambda m: _relinked(m, source, page, files), line))
    return "\n".join(lines)


def _repository_path(src_uri: str, config: MkDocsConfig) -> str:
    """Where a page's text lives in the repository (``docs/...`` or a mirrored file)."""
    mirrored = {page: source for source, page in MIRRORED.items()}
    if src_uri in mirrored:
        return mirrored[src_uri]
    return posixpath.join(Path(config.docs_dir).relative_to(ROOT).as_posix(), src_uri)


def _relinked(match: re.Match[str], source: str, page: Page, files: Files) -> str:
    bang, text, target = match.groups()
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    anchor = f"#{anchor}" if anchor else ""
    site_path = _site_path(resolved, files)
    if site_path is not None:
        relative = posixpath.relpath(site_path, posixpath.dirname(page.file.src_uri) or ".")
        return f"{bang}[{text}]({relative}{anchor})"
    if (ROOT / resolved).exists():
        named = f"`{resolved}`"
        return text if resolved in text else f"{text} ({named})"
    log.warning("%s: the link %r names %s, which is not in the repository", source, target, resolved)
    return match.group(0)


def _site_path(resolved: str, files: Files) -> str | None:
    """The page a repository path is in the site, if it is one."""
    if resolved in MIRRORED:
        return MIRRORED[resolved]
    docs = "docs/"
    if resolved.startswith(docs):
        inside = resolved[len(docs) :]
        for candidate in (inside, posixpath.join(inside, "index.md")):
            if files.get_file_from_path(candidate) is not None:
                return candidate
    return None


def cell(text: str | None) -> str:
    """Text for one cell of a Markdown table: one line, no ``|`` or markup of its own."""
    if not text:
        return ""
    one_line = " ".join(text.replace("``", "`").split())
    return one_line.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each command of ``mcp-chaos``: its one-line help and its parser, in ``--help``'s order."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    return {name: (helps.get(name, ""), command) for name, command in sub.choices.items()}


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A command's arguments and options, as ``--help`` lists them (``-h`` left out)."""
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _option_row(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, ...]:
    """One row of a command's table: its names, the value it takes, its default, its help."""
    takes_value = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    metavar = " ".join(metavar) if isinstance(metavar, tuple) else metavar
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{metavar}`"
    value = f"`{metavar}`" if action.option_strings and takes_value else ""
    if action.choices is not None:
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    default = action.default
    shown = "" if default in (None, argparse.SUPPRESS, []) or not takes_value else f"`{default}`"
    required = "required" if (action.required or not action.option_strings) and action.nargs != "?" else ""
    what = parser._get_formatter()._expand_help(action) if action.help else ""
    return names, value, shown or required, cell(what)


def cli_page(config: MkDocsConfig) -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal: the same width every build
    parser = build_parser()
    lines = [
        "# Commands and options",
        "",
        "Generated from the argument parser (`harness/cli/`) at every build of this site: every",
        "command of `mcp-chaos` and every option it takes. `mcp-chaos COMMAND --help` says the same.",
        "",
        *table(
            ("command", "what it does"),
            [(f"[`{name}`](#{name})", cell(help_)) for name, (help_, _) in subcommands(parser).items()],
        ),
    ]
    for name, (help_, command) in subcommands(parser).items():
        lines += [f"## `{name}` {{#{name}}}", "", cell(help_), ""]
        if command.description and command.description != help_:
            lines += [cell(command.description), ""]
        lines += ["```text", command.format_usage().strip(), "```", ""]
        rows = [_option_row(command, action) for action in options(command)]
        if rows:
            lines += table(("argument", "value", "default", "what"), rows)
    return "\n".join(lines)


def _type(schema: dict[str, Any]) -> str:
    """A field's type in words, from its JSON Schema."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        return " \\| ".join(_type(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    kind = schema.get("type", "any")
    if kind == "array":
        items = schema.get("items") or (schema.get("prefixItems") and {"type": "number"}) or {}
        return f"list of {_type(items)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    return "map" if kind == "object" else str(kind)


def _default(name: str, prop: dict[str, Any], required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in prop:
        return ""
    default = prop["default"]
    if isinstance(default, dict) and "$ref" in prop:
        return "its fields' defaults"
    return f"`{json.dumps(default, ensure_ascii=False)}`"


def _definition(title: str, anchor: str, schema: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"`{name}`",
            _type(prop),
            _default(name, prop, schema.get("required", [])),
            cell(prop.get("description")),
        )
        for name, prop in schema.get("properties", {}).items()
    ]
    return [
        f"## {title} {{#{anchor}}}",
        "",
        cell(schema.get("description")),
        "",
        *table(("field", "type", "default", "what"), rows),
    ]


def scenario_page(config: MkDocsConfig) -> str:
    schema = json.loads(schema_text())
    lines = [
        "# The scenario's fields",
        "",
        "Generated from the scenario's typed model (`harness/scenario/`) at every build of this site:",
        "every field, its type, its default and its docstring. The same, as a JSON Schema, is",
        f"[`{SCHEMA_FILE.name}`](scenario.schema.json), shipped with the package",
        f"(`harness/scenario/{SCHEMA_FILE.name}`, written by `make schema`). An editor with the YAML",
        "language server checks and completes a scenario file that starts with",
        f"`# yaml-language-server: $schema=PATH/TO/{SCHEMA_FILE.name}`.",
        "[The scenario file, annotated](scenario-file.md) shows every field in place with a comment.",
        "",
        *_definition("Scenario", "scenario", schema),
    ]
    for name, definition in schema["$defs"].items():
        lines += _definition(name, name.lower(), definition)
    return "\n".join(lines + _service_placeholders())


def _service_placeholders() -> list[str]:
    """The placeholders the harness's services fill in, from their declarations (``SERVICES``)."""
    rows = [
        (f"`{{{name}}}`", f"`{service.section}`", _yes(name in service.audit), cell(meaning))
        for service in SERVICES
        for name, meaning in service.placeholders.items()
    ]
    base = ", ".join(f"`{{{name}}}`" for name in sorted(BASE_PLACEHOLDERS))
    return [
        "",
        "## The services' placeholders",
        "",
        f"Besides {base}, `target.command` and `target.env` may hold the placeholders of the",
        "services the harness runs, each with its section set (generated from `SERVICES` in",
        "`harness/scenario/serving.py`; [the scenario file](scenario-file.md) says where every",
        "placeholder may stand).",
        "",
        *table(("placeholder", "needs", "in an audit too", "what it stands for"), rows),
    ]


def _members(enum: type, docs_from: type | None = None) -> list[tuple[str, ...]]:
    docs = attribute_docstrings(docs_from or enum)
    return [(f"`{member.value}`", cell(docs.get(member.name))) for member in enum]  # type: ignore[attr-defined]


def _exit_codes() -> list[tuple[str, ...]]:
    """Each exit code with what returns it: the gate, an interruption, and the exception tree."""
    errors: dict[int, list[str]] = {}
    pending = list(HarnessError.__subclasses__())
    while pending:
        error = pending.pop(0)
        pending.extend(error.__subclasses__())
        first = (error.__doc__ or "").strip().split("\n\n")[0].rstrip(".")
        errors.setdefault(error.exit_code, []).append(f"`{error.__name__}`: {first}")
    codes = {
        0: ["the command did what it was asked, and the scenario's gate passed"],
        EXIT_GATE_FAILED: ["the scenario's gate failed (a finding it does not allow)"],
        EXIT_INTERRUPTED: ["interrupted (Ctrl-C, SIGTERM, SIGHUP): the partial run is kept; audit it"],
    }
    for code, named in errors.items():
        codes.setdefault(code, []).extend(named)
    return [(f"`{code}`", cell("; ".join(codes[code]))) for code in sorted(codes)]


def findings_page(config: MkDocsConfig) -> str:
    fixes = [
        (f"`{verdict}`", f"`{cause}`", cell(fix.meaning), cell(fix.fix))
        for (verdict, cause), fix in FIXES.items()
    ]
    return "\n".join(
        [
            "# Verdicts, causes and exit codes",
            "",
            "Generated from the code at every build of this site: the enums of `harness/history.py` and",
            "`harness/audit/causes.py` with their docstrings, the fault kinds' modules",
            "(`harness/faultkinds/`), the table of fixes of `harness/audit/fixes.py` and the exception tree",
            "of `harness/errors.py`.",
            "[Findings, causes and the gate](../explanation/findings.md) says how they are found.",
            "",
            "## Verdicts {#verdicts}",
            "",
            "The auditor's judgement of each intent, from what the client saw and the effects counted.",
            "",
            *table(("verdict", "meaning"), _members(Verdict)),
            "## Causes {#causes}",
            "",
            "Every intent whose verdict is not `exactly_once` gets a cause: the first fault kind (in the",
            "order below) that hit its attempts, else one of the causes that are not faults.",
            "",
            *table(("cause", "meaning"), _members(Cause)),
            "### Fault kinds, in blame order {#fault-kinds}",
            "",
            *table(("fault", "meaning"), [(f"`{k.kind.value}`", cell(k.means)) for k in fault_kinds.KINDS]),
            "## What each finding means, and its fix {#fixes}",
            "",
            "A cause here is a cause above or a group of them: `pod_fault` (kill, crash, rollout),",
            "`in_flight` (the original still ran when its retry came), `no_key` (no key travelled),",
            "`*` (any).",
            "",
            *table(("verdict", "cause", "meaning", "fix"), fixes),
            "## What the client saw {#outcomes}",
            "",
            *table(("outcome of an attempt", "meaning"), _members(Outcome)),
            *table(("status of an intent", "meaning"), _members(IntentStatus)),
            *table(("status of a run", "meaning"), _members(RunStatus)),
            "## Exit codes {#exit-codes}",
            "",
            *table(("code", "when"), _exit_codes()),
        ]
    )


SITE_NEEDS = {
    Site.PROXY: "nothing: in every run",
    Site.FILES: "a pod the harness runs, traced (`faults.crash_points.files`)",
    **{site: f"`{section}`" for site, (section, _) in SERVICE_SECTIONS.items()},
}
"""What each hold site needs of a scenario, in words."""


def _yes(fact: bool) -> str:
    return "yes" if fact else "no"


def points_page(config: MkDocsConfig) -> str:
    """Every kind of hold point with its facts: how it is named, where it is seen, what it needs."""
    docs = attribute_docstrings(PointKind)
    rows = [
        (
            f"`{kind.value}#N`" if facts.counted else f"`{kind.value}`",
            cell(" or ".join(SITE_NEEDS[site] for site in Site if site in facts.sites)),
            _yes(facts.crashable),
            _yes(facts.observed),
            cell(docs.get(kind.name)),
        )
        for kind, facts in KINDS.items()
    ]
    return "\n".join(
        [
            "# Hold points",
            "",
            "Generated from the code at every build of this site: the facts of each kind of point",
            "(`KINDS` in `harness/crashpoints/points.py`), in the order a call passes them. A point `#N` is",
            "the N-th of its kind in one attempt; any point can be crashed `@power_loss` where the pod's",
            "files are traced. [Crash points](../explanation/crash-points.md) says how they are held,",
            "explored and proven.",
            "",
            *table(("point", "needs", "crashed by crash points", "every run records it", "what it is"), rows),
        ]
    )


_ROLE = re.compile(r":(?:func|class|mod|meth|data):`~?([^`]+)`")


def _field_type(schema: dict[str, Any]) -> str:
    """A field's JSON type in words: ``integer``, ``string or null``, one of an enum's values."""
    if "enum" in schema:
        return ", ".join(f"`{v}`" for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_field_type(o) for o in schema["anyOf"])
    kinds = schema.get("type", "any")
    named = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if named == "array":
        return f"array of {_field_type(schema.get('items', {}))}"
    return str(named)


def history_page(config: MkDocsConfig) -> str:
    """Every event type of the history with its fields, from the types (``harness.events``) by way of
    the schema they generate."""
    schema = history_schema.history_schema()
    lines = [
        "# The history's events",
        "",
        "Generated from the code at every build of this site: one section per event class of",
        "`harness/events.py`, its fields as the JSON Schema made from them says",
        f"([`history.schema.json`](history.schema.json), format version {schema['x-schema-version']},",
        "shipped in the package as `harness/history.schema.json`). Every line of `history.jsonl` has",
        "`seq` (its number, from 0), `t` (seconds since the run started) and `type`, and then the",
        "fields of its type: a *required* field is always there (null where its type allows it), an",
        "*optional* one only when it has a value. `run_started`'s `schema` says which version wrote it.",
        "",
    ]
    for cls in EVENTS:
        definition = schema["$defs"][cls.__name__]
        required = set(definition["required"])
        rows = [
            (
                f"`{name}`",
                cell(_field_type(prop)),
                "required" if name in required else "optional",
                cell(_ROLE.sub(r"`\1`", prop.get("description", ""))),
            )
            for name, prop in definition["properties"].items()
            if name not in ("seq", "t", "type")
        ]
        lines += [f"## `{cls.TYPE.value}` ({cls.__name__})", ""]
        if "description" in definition:
            lines += [cell(_ROLE.sub(r"`\1`", definition["description"])), ""]
        lines += table(("field", "type", "present", "what it is"), rows)
    return "\n".join(lines)


def decisions_page(config: MkDocsConfig) -> str:
    """The index of the decision records: each one's number and title, from its first heading."""
    records = sorted((Path(config.docs_dir) / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    rows = []
    for record in records:
        title = record.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ").strip()
        rows.append(f"- [{title}](../decisions/{record.name})")
    return "\n".join(
        [
            "# Decision records",
            "",
            "Each decision is a record of its own in `docs/decisions/`: the context, what was decided,",
            "and what follows from it. A new decision gets the next number; one that is replaced says by",
            "which. [The architecture](../project/architecture.md) says where each part lives.",
            "",
            *rows,
            "",
        ]
    )
