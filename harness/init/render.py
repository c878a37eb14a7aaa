"""The drafted scenario as a commented YAML file a person edits.

Sections are dumped with PyYAML and joined with comments that say where each
value came from and what is left to do; ``TODO`` marks what only the user can
know, and a scenario that still holds one, in a value or a comment, does not
validate: so the word appears nowhere else.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from harness.catalog import Classified
from harness.effects.base import Drafted
from harness.init.draft import Draft
from harness.scenario.gate import DEFAULT_FAIL_ON


def _section(name: str, value: Any) -> str:
    """``name: value`` as YAML that loads back as ``value``: PyYAML's plain and single-quoted styles fold
    some line breaks in a server's names (NEL, U+2028) into spaces, its double-quoted style escapes them."""
    text = yaml.safe_dump({name: value}, sort_keys=False, allow_unicode=True, width=100)
    if yaml.safe_load(text) == {name: value}:
        return text
    return yaml.safe_dump({name: value}, sort_keys=False, allow_unicode=True, width=100, default_style='"')


COMMENT_LIMIT = 400
"""Characters of one comment line at most: what it quotes (a tool's name, a field's) is the server's."""


def comment_text(text: str) -> str:
    """``text`` fit for a YAML comment: one line of printable characters, at most ``COMMENT_LIMIT``.

    A comment ends at a line break, and YAML (PyYAML) breaks lines at CR, NEL, U+2028 and U+2029 as
    well as LF; a tool named ``x\u2028gate: {}`` would otherwise end the comment and add a key. So every
    character Python does not call printable (line and paragraph separators, controls, format
    characters such as bidi overrides, surrogates, unassigned code points) is written as its escape.
    """
    cut = text[: COMMENT_LIMIT * 2]
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return shown if len(shown) <= COMMENT_LIMIT and cut == text else shown[: COMMENT_LIMIT - 1] + "…"


def _comment(lines: Sequence[str]) -> str:
    wrapped = [
        part
        for line in lines
        for part in (textwrap.wrap(comment_text(line), 96, subsequent_indent="  ") or [""])
    ]
    return "".join(f"# {line}\n" if line else "#\n" for line in wrapped)


def render(
    *,
    name: str,
    origin: str,
    server_name: str | None = None,
    protocol: str,
    target: Mapping[str, Any],
    tools: Sequence[Classified],
    tool: str,
    draft: Draft,
    source: Drafted,
    uses_postgres: bool,
    upstream: str | None = None,
    startup_s: float | None = None,
) -> str:
    changing = [t for t in tools if t.changes_state]
    reading = [t for t in tools if not t.changes_state]
    head = [
        f"Drafted by `mcp-chaos init` on {dt.date.today().isoformat()} from {origin}"
        + (
            f", which calls itself {server_name} and spoke {protocol}."
            if server_name
            else f" (it spoke {protocol})."
        ),
        "Next: mcp-chaos validate --preflight THIS_FILE, then: mcp-chaos run THIS_FILE"
        + (
            "; and mcp-chaos races THIS_FILE (a retry beside its original at each of its statements)"
            if uses_postgres
            else ""
        ),
        "",
        "Tools that change state (the workload calls one; switch with workload.tool):",
        *[f"  {t.name}: {t.why}" for t in changing],
        "Read-only tools (never the workload's):" if reading else "No read-only tools.",
        *[f"  {t.name}: {t.why}" for t in reading],
    ]
    where = draft.marker.shown() if draft.marker else "nowhere yet"
    key = (
        f"the intent's idempotency key goes in {draft.key.shown()}"
        if draft.key
        else "no argument is an idempotency key"
    )
    remote = "url" in target
    how = (
        "How the harness starts the server: it speaks MCP over the process's stdin and stdout."
        if target.get("transport") == "stdio"
        else "How the harness starts the server: it picks the port and passes it in $PORT."
    )
    if remote:
        how = (
            "The server already runs: the harness starts nothing. It calls the URL (through the fault "
            "proxy, for faults.stream), kills the server with kill_command, runs restart_command after each "
            "kill if nothing else restarts it (e.g. docker compose start app), then waits until the URL "
            "answers again."
        )
    workload = {
        "intents": 2000,
        "concurrency": 8,
        "tool": tool,
        "arguments": draft.arguments,
    }
    parts = [
        _comment(head),
        _section("name", name),
        "seed: 1\n",
        _comment([how]),
        _section("target", dict(target)),
    ]
    services: dict[str, Any] = {}
    said: list[str] = []
    if uses_postgres:
        services["postgres"] = {}
        said.append("A throwaway PostgreSQL for the run; {postgres_url} points at it.")
    if upstream is not None:
        services["downstream"] = {"upstream": upstream}
        said += [
            f"The server calls the API at {upstream}: its variable now points at the downstream proxy",
            "({downstream_url}), which records each call, forwards it there and can hold its answer",
            "(crash point downstream#N). Point upstream at a sandbox or a fake, not at production; without",
            "upstream the proxy answers as a provider's sandbox would.",
        ]
    if services:
        parts += [_comment(said), _section("services", services)]
    parts += [
        _comment(
            [
                f"Arguments drafted from {tool}'s inputSchema. The marker ({where}) is how the audit "
                f"finds each intent's effects; {key}.",
                *draft.notes,
            ]
        ),
        _section("workload", workload),
        _comment(
            [
                "Every attempt that breaks is retried with a new request id and the same key, backing off",
                "while the server restarts (as an agent's client would), for up to a minute: how long this",
                "server takes to restart is not known yet (a count of attempts alone ran out on a slow one).",
            ]
        ),
        _section(
            "client",
            {
                "attempt_timeout_s": 10,
                "max_attempts": 100,
                "give_up_after_s": 60,
                "backoff": {"initial_s": 0.05, "max_s": 1.0, "multiplier": 2, "jitter": "full"},
                "key_reuse": "same",
            },
        ),
        _comment(kill_comment(startup_s) + (REMOTE_FAULTS if remote else [])),
        _section(
            "faults",
            {
                "kill": {"count": 4, "min_uptime_s": 0.2, "hold_dispatch": "auto"},
                **({"stream": [{"fault": "sever_response", "probability": 0.05}]} if remote else {}),
            },
        ),
        _comment(
            [
                f"How the audit counts effects per marker ({source.why}).",
                *([f"TODO: {source.todo}"] if source.todo else []),
            ]
        ),
        _section("audit", {"effects": source.section}),
        _comment(
            [
                "Exit 1 on any finding: a pod that answers nothing after a fault, a store its server",
                "cannot read again, a duplicate, a lost intent, an effect despite an error, or a run that",
                "did not test what it planned (inconclusive). A finding left out of fail_on is reported",
                "as not gated.",
            ]
        ),
        _section("gate", {"fail_on": list(DEFAULT_FAIL_ON)}),
    ]
    return "".join(parts)


REMOTE_FAULTS = [
    "And 5% of responses cut after the server sent them in full (the fault proxy in front of the URL):",
    "what a broken stream does, with no kill at all.",
]


def kill_comment(startup_s: float | None) -> list[str]:
    """What the drafted kills do, with the start-up time init measured (it calls no tool: how long a
    call takes, and so whether the workload outlasts the kills, is for ``validate --preflight``)."""
    started = f"The server started in {startup_s:.1f}s here; each" if startup_s is not None else "Each"
    return [
        "Four SIGKILLs of the server, spread over the workload; it is started again after each.",
        f"{started} kill waits until the pod has been up min_uptime_s. hold_dispatch: auto holds new "
        "intents back only when a kill would otherwise come late or never (a fast server), and lands "
        "it on work in flight; `validate --preflight` times a call and says how many intents would "
        "let every kill come in its turn without holding.",
    ]
