"""``mcp-chaos init``: from an image, a command or a URL to a scenario that needs only its TODOs.

``connect`` starts the server as a run does (through the wiring) and learns what
it offers, :mod:`harness.catalog` reads its tools and ranks them, ``trial`` calls
the likeliest in throwaway copies of the server until one leaves a record holding
its marker, and finds the store and the field that record keeps it in (decision
0076), ``draft`` decides arguments, marker, key and effect source (pure), ``values``
finds the values only a search can find where it can abandon them, and ``render``
writes the commented YAML. A server reached at a URL, or given a store outside
``{data_dir}``, is not called: the record would be left in the user's own store.
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
from harness.init.connect import MAX_PAGES, Server, connected, probe
from harness.init.draft import Draft, choose_source, downstream_of, refused
from harness.init.render import render
from harness.init.trial import Kept, best, found_in, named_values, store_outside, trial_arguments
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


def _ranked(
    candidates: Sequence[Classified],
    tools: Mapping[str, Mapping[str, Any]],
    asked: str | None,
    *,
    cut: bool = False,
) -> list[str]:
    """The tools the workload may call, likeliest first: the one asked for, else those that change
    state, the ones that best make a record of each intent first (a create/add/insert with free text
    and a key, over an update or a delete that takes an id, or a schema operation)."""
    # A listing cut short says so: the tool may be on a page never read.
    read = (
        f" (tools/list went on past {MAX_PAGES} pages; only their {len(tools)} tools were read)"
        if cut
        else ""
    )
    if asked is not None:
        if asked not in tools:
            raise UsageError(f"--tool {asked!r} is not one of the server's tools: {', '.join(tools)}{read}")
        return [asked]
    if not candidates:
        raise UsageError(
            f"none of the server's tools seems to change state ({', '.join(tools) or 'it has none'}){read}; "
            "name the one to test with --tool"
        )
    ranked = sorted(candidates, key=lambda c: Tool.of(tools[c.name]).suitability(), reverse=True)
    return [c.name for c in ranked]


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


MAX_TRIED = 4
"""Candidate tools init tries at most, the likeliest first, each in a copy of the server of its own."""
TRIAL_TIMEOUT_S = 20.0
"""How long one trial call may take."""
HOME_ENV = "{data_dir}/home"
"""Where a server that keeps its store under ``$HOME`` is given its home in a run."""


@dataclass(slots=True)
class Tried:
    """One trial call: the tool, what it left where, and what it answered."""

    tool: str
    kept: Kept | None = None
    refusal: str | None = None
    draft: Draft | None = None

    def said(self) -> str:
        """The call in words, for the draft's comments."""
        if self.kept is not None:
            field = f", field {self.kept.field}" if self.kept.field else ""
            where = self.kept.store.where
            return f"{self.tool} stored {self.kept.argument.shown()} in {where}{field}"
        if self.refusal is not None:
            return f"{self.tool} refused the call: {excerpt(self.refusal, 160)}"
        return f"{self.tool} answered ok and stored nothing init could find"


async def _trial(
    server: Server,
    tool: str,
    schema: Mapping[str, Any],
    redactor: Redactor,
    say: Callable[[str], None] | None,
) -> Tried:
    """One call of ``tool`` in ``server`` (a copy of the target of its own), a marker in each free-text
    argument; where the markers landed."""
    draft = await draft_bounded(schema)
    arguments, markers = trial_arguments(schema, draft)
    if say is not None:
        say(f"init: calling {tool} once in a throwaway copy of the server, to see what it stores where")
    called = await server.call(tool, arguments, timeout=TRIAL_TIMEOUT_S)
    if called.outcome is Outcome.TRANSPORT_ERROR:  # a keep-alive connection the server closed meanwhile
        called = await server.call(tool, arguments, timeout=TRIAL_TIMEOUT_S)
    refusal = _refusal(called)
    tried = Tried(tool, refusal=None if refusal is None else redactor.text(refusal), draft=draft)
    if refusal is None and server.data_dir is not None:
        postgres = await server.postgres_rows()
        named = named_values(arguments)
        where = found_in(markers, server.data_dir, home=server.home, postgres=postgres, named=named)
        tried.kept = best(where, draft.marker)
    if say is not None:
        say(f"init: {redactor.text(tried.said())}")
    return tried


async def _try_tools(
    ranked: Sequence[str],
    tools: Mapping[str, Mapping[str, Any]],
    first: Server,
    spec: TargetSpec,
    ready_timeout_s: float,
    redactor: Redactor,
    say: Callable[[str], None] | None,
) -> list[Tried]:
    """The likeliest tools tried one by one, each in a fresh copy of the target (the first in the one
    init listed the tools of), until one stores a record holding a marker (decision 0076)."""
    tried: list[Tried] = []
    for number, tool in enumerate(ranked[:MAX_TRIED]):
        schema = tools[tool].get("inputSchema")
        schema = schema if isinstance(schema, Mapping) else {}
        if number == 0:
            tried.append(await _trial(first, tool, schema, redactor, say))
        else:
            async with connected(spec, ready_timeout_s=ready_timeout_s) as copy:
                tried.append(await _trial(copy, tool, schema, redactor, say))
        if tried[-1].kept is not None:
            break
    return tried


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
        ranked = _ranked([c for c in classified if c.changes_state], tools, tool, cut=server.cut)
        outside = store_outside([*(spec.command or ()), *spec.env.values()])
        tried: list[Tried] = []
        if origin.url is None and outside is None:
            tried = await _try_tools(ranked, tools, server, spec, ready_timeout_s, redactor, say)
        kept = next((t for t in tried if t.kept is not None), None)
        if kept is not None:
            chosen = kept.tool
        elif prompt is not None and len(ranked) > 1:
            chosen = await prompt(ranked)
        else:
            chosen = ranked[0]
        schema = tools[chosen].get("inputSchema")
        schema = schema if isinstance(schema, Mapping) else {}
        found = None if kept is None else kept.kept
        draft = await draft_bounded(schema, None if found is None else found.argument)
        trial = next((t for t in tried if t.tool == chosen), None)
        if trial is not None and trial.refusal is not None:
            draft = refused(draft, schema, trial.refusal)
        draft.notes[:0] = _trial_notes(tried, outside, chosen)
        if found is not None and found.home is not None:
            target["env"] = {**target.get("env", {}), "HOME": HOME_ENV}
        api = [] if upstream is None else [SeenStore("api", upstream)]
        stores = [found.store] if found is not None else [*server.stores(), *api]
        source = choose_source(
            stores,
            draft.marker,
            remote=origin.url is not None,
            stdio=spec.transport == "stdio",
            field=None if found is None else found.field,
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


ELSEWHERE = (
    "TODO: no call init tried left a record in {data_dir}, the harness's PostgreSQL or the home it gave "
    "the server: {tool} stores nothing (a plan, a prompt, a preview), or the server keeps its store "
    "elsewhere (its own default path, ~/.<name>, ~/.config/<name>): point it into {data_dir} with the "
    "server's option or environment variable, or choose another tool"
)


def _trial_notes(tried: Sequence[Tried], outside: str | None, chosen: str) -> list[str]:
    """What the trial calls showed, for the draft's comments: each call, and when none stored a record,
    where the store may be and how to point it."""
    if outside is not None:
        return [
            "init called no tool: the server is given a store outside {data_dir} "
            f"({excerpt(outside, 120)}), where a trial call would leave a record in it; with the store "
            "inside {data_dir}, init finds the tool and the field the store keeps by trying"
        ]
    if not tried:
        return []
    notes = [f"init tried, each in a throwaway copy of the server: {'; '.join(t.said() for t in tried)}."]
    kept = next((t.kept for t in tried if t.kept is not None), None)
    if kept is None:
        notes.append(ELSEWHERE.replace("{tool}", chosen))
    elif kept.home is not None:
        notes.append(
            f"The server keeps its store under its home directory (~/{kept.home}): HOME points into "
            "{data_dir}, so that the store is the run's own (a server run by npx keeps npm's cache "
            "there too: set npm_config_cache to keep it where it was)"
        )
    return notes
