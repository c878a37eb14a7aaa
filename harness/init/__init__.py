"""``mcp-chaos init``: from an image, a command or a URL to a scenario that needs only its TODOs.

``connect`` starts the server as a run does (through the wiring) and learns what
it offers, :mod:`harness.catalog` reads its tools, ``draft`` decides arguments,
marker, key and effect source (pure), ``values`` finds the values only a search
can find where it can abandon them, and ``render`` writes the commented YAML.
No tool is called, unless a store the server's command line or environment names
is made only at its first write: then one call, in init's throwaway data
directory, shows init the store.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.catalog import Classified, Tool, classify
from harness.client.messages import CallResult
from harness.effects.base import SeenStore
from harness.errors import HarnessError, UsageError
from harness.history import Outcome, excerpt
from harness.init.connect import MAX_PAGES, connected, probe
from harness.init.draft import choose_source, downstream_of, refused, sample_arguments
from harness.init.render import render
from harness.init.values import draft_bounded
from harness.redaction import Redactor, literal_credential
from harness.scenario import TargetSpec

KILL_COMMAND_TODO = (
    "TODO: the command that kills this server (docker compose kill app), or delete faults.kill and this"
)


@dataclass(slots=True)
class Origin:
    """Where the server comes from, as the command line gave it."""

    image: str | None = None
    command: str | None = None
    url: str | None = None
    transport: str = "http"
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def target(self) -> dict[str, Any]:
        """The scenario's ``target`` section."""
        spec: dict[str, Any] = {}
        if self.image is not None:
            spec["image"] = self.image
        elif self.command is not None:
            try:
                spec["command"] = shlex.split(self.command)
            except ValueError as exc:
                raise UsageError(f"--command {self.command!r} is not a command line: {exc}") from None
            if not spec["command"]:
                raise UsageError("--command is empty: give the command that starts the server")
        else:
            spec["url"] = self.url
            spec["kill_command"] = [KILL_COMMAND_TODO]
        if self.transport != "http":
            spec["transport"] = self.transport
        if self.env:
            spec["env"] = dict(self.env)
        if self.headers:
            spec["headers"] = dict(self.headers)
        return spec

    def describe(self) -> str:
        return (
            f"image {self.image}"
            if self.image
            else f"command {self.command!r}"
            if self.command
            else f"{self.url}"
        )

    def default_name(self, server_name: str | None = None) -> str:
        """``<name>-chaos``, from the name the server gives itself, else from its image or script."""
        if server_name:
            base = server_name
        elif self.image:
            base = self.image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
        elif self.command:
            words_ = shlex.split(self.command)
            script = next(
                (w for w in reversed(words_) if w.endswith((".py", ".js", ".mjs", ".ts")) and "{" not in w),
                words_[0],
            )
            path = Path(script)
            base = path.parent.name if path.stem in ("server", "main", "index", "app") else path.stem
        else:
            base = "server"
        cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in base).strip("-._")
        return (cleaned or "server")[:50] + "-chaos"


Prompt = Callable[[Sequence[str]], Awaitable[str]]
"""Asks which of several tools to test; awaited, so that Ctrl-C cancels it as it cancels the rest."""


async def _pick(
    candidates: Sequence[Classified],
    tools: Mapping[str, Mapping[str, Any]],
    asked: str | None,
    prompt: Prompt | None,
    *,
    cut: bool = False,
) -> str:
    """The tool the workload calls: the one asked for, else the one that best makes a record of each
    intent (a create/add/insert with free text and a key, over an update or a delete that takes an id,
    or a schema operation); ``prompt`` chooses among several at a terminal."""
    # A listing cut short says so: the tool may be on a page never read.
    read = (
        f" (tools/list went on past {MAX_PAGES} pages; only their {len(tools)} tools were read)"
        if cut
        else ""
    )
    if asked is not None:
        if asked not in tools:
            raise UsageError(f"--tool {asked!r} is not one of the server's tools: {', '.join(tools)}{read}")
        return asked
    if not candidates:
        raise UsageError(
            f"none of the server's tools seems to change state ({', '.join(tools) or 'it has none'}){read}; "
            "name the one to test with --tool"
        )
    ranked = sorted(candidates, key=lambda c: Tool.of(tools[c.name]).suitability(), reverse=True)
    names = [c.name for c in ranked]
    if prompt is not None and len(names) > 1:
        return await prompt(names)
    return names[0]


def _refusal(called: CallResult) -> str | None:
    """What the server said when it refused init's trial call: its error, or an ok reply that reads as a
    failure (``Error adding record: relation "records" does not exist``); None when it took the call."""
    if called.outcome is Outcome.OK:
        return called.reply if called.reads_as_failure and called.reply else None
    return called.message or called.outcome.value


async def init_scenario(
    origin: Origin,
    *,
    name: str | None = None,
    tool: str | None = None,
    ready_timeout_s: float = 30.0,
    prompt: Prompt | None = None,
    say: Callable[[str], None] | None = None,
) -> str:
    """The drafted scenario's text. ``prompt`` (terminal only) picks among several candidate tools;
    ``say`` hears what init does beyond listing tools (a call that shows it a store)."""
    target = origin.target()
    upstream = None  # an API's base URL in the environment of a server init starts: the proxy's upstream
    if origin.url is None and "env" in target:
        target["env"], upstream = downstream_of(target["env"])
    for option, entries in (("--header", origin.headers), ("--env", origin.env)):
        for key, value in entries.items():
            if literal_credential(key, value):
                raise UsageError(
                    f"{option} {key} holds a credential written out; the scenario must name its variable: "
                    f"write it in single quotes, e.g. --header 'Authorization: Bearer ${{TOKEN}}'"
                )
    try:
        # Reached at a URL, the server is not started: the spec only carries the headers.
        spec = TargetSpec.model_validate(
            {"command": ["-"], "headers": origin.headers} if origin.url else target
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"the server's options make no valid target ({where}: {first['msg']})") from None
    # What the server says (its name, descriptions, errors, its log) may quote the token: the draft and
    # every error are redacted, with a mask YAML reads as plain text.
    redactor = Redactor(probe(spec, ready_timeout_s).secrets(), mask="REDACTED")
    try:
        text = await _drafted(
            origin, target, upstream, spec, redactor, name, tool, ready_timeout_s, prompt, say
        )
    except HarnessError as exc:
        raise redactor.error(exc) from None
    return redactor.text(text)


async def _drafted(
    origin: Origin,
    target: dict[str, Any],
    upstream: str | None,
    spec: TargetSpec,
    redactor: Redactor,
    name: str | None,
    tool: str | None,
    ready_timeout_s: float,
    prompt: Prompt | None,
    say: Callable[[str], None] | None,
) -> str:
    async with connected(spec, url=origin.url, ready_timeout_s=ready_timeout_s) as server:
        tools = {str(t["name"]): t for t in server.tools}
        classified = [classify(t) for t in server.tools]
        chosen = await _pick([c for c in classified if c.changes_state], tools, tool, prompt, cut=server.cut)
        schema = tools[chosen].get("inputSchema")
        draft = await draft_bounded(schema if isinstance(schema, Mapping) else {})
        if origin.url is None and (missing := server.missing()):
            if say is not None:
                say(
                    f"init: {', '.join(missing)} is not there yet (made at the first write): calling "
                    f"{chosen} once, in init's throwaway data directory, to see it"
                )
            called = await server.call(chosen, sample_arguments(draft.arguments))
            refusal = _refusal(called)
            if refusal is not None:
                draft = refused(draft, schema if isinstance(schema, Mapping) else {}, redactor.text(refusal))
            if say is not None and (called.outcome is not Outcome.OK or refusal is not None):
                said = f": {excerpt(redactor.text(refusal), 160)}" if refusal else ""
                say(f"init: {chosen} answered {called.outcome.value}{said} (the arguments need an edit?)")
        api = [] if upstream is None else [SeenStore("api", upstream)]
        source = choose_source(
            [*server.stores(), *api],
            draft.marker,
            remote=origin.url is not None,
            stdio=spec.transport == "stdio",
        )
        uses_postgres = server.postgres_tables is not None
    return render(
        name=name or origin.default_name(redactor.text(server.name) if server.name else None),
        origin=origin.describe(),
        server_name=server.name,
        protocol=server.protocol,
        target=target,
        tools=classified,
        tool=chosen,
        draft=draft,
        source=source,
        uses_postgres=uses_postgres,
        upstream=upstream,
        startup_s=server.startup_s,
    )
