"""What ``mcp-chaos init`` learns from a live server: its protocol, name, tools, the stores it writes.

The target is started the way a run starts it, through :class:`~harness.run.wiring.TargetWiring`
(its pod under a supervisor, the readiness check of its transport, the harness's
PostgreSQL when its environment asks for ``{postgres_url}``, the effect sink for
``{sink_url}``), in a throwaway run directory (kept when the server would not
start: the error names the server's log in it), or reached at a URL that is
already serving. Its tools are listed over whatever protocol it speaks, and its
name is the one it gives itself (``serverInfo``).

Stores are what its command line or environment names inside ``{data_dir}``
(``--db-path {data_dir}/app.db``, ``MEMORY_FILE_PATH={data_dir}/memory.jsonl``, a
directory such as ``{data_dir}`` itself) and the PostgreSQL database, opened
read-only, so the tables it created can be offered to the effect query. A server
started from a command gets a home directory of its own in the throwaway
directory (``HOME`` and the XDG directories; npm's and the XDG cache stay the
user's, so nothing is downloaded again): a trial call (:meth:`Server.call`,
:mod:`harness.init.trial`) writes nothing into the user's, and a store kept under
``$HOME`` is found there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness import leftovers, rundir
from harness.client import McpClient
from harness.client.http import McpHttpClient
from harness.client.messages import CallResult, ToolCall
from harness.client.readiness import wait_ready
from harness.client.stdio import StdioClient
from harness.effects.base import SeenStore
from harness.effects.files import directory_format, file_format
from harness.errors import TargetError, TargetNotReady
from harness.history import Outcome
from harness.pods.factory import target_headers
from harness.pods.ready import StdioReady
from harness.pods.watchdog import guard
from harness.run.services.postgres import PostgresWired
from harness.run.wiring import TargetWiring
from harness.scenario import Scenario, TargetSpec

MAX_PAGES = 20
"""``tools/list`` pages read at most (a catalog larger than that is a finding of its own)."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SQLITE_HEADER = b"SQLite format 3\x00"
DATA_DIR = "{data_dir}"
INIT_PREFIX = "mcp-chaos-init-"
"""init's throwaway run directories, ``<prefix><pid>.<start time>-<random>`` (see harness.leftovers)."""
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
"""Where a 2026-07-28 result's ``_meta`` names the server (there is no ``initialize``)."""

Request = Callable[[dict[str, Any], int], Awaitable[CallResult]]


@dataclass(slots=True)
class Server:
    """A server init is talking to: what it said of itself, and what it wrote where."""

    protocol: str
    tools: list[dict[str, Any]]
    name: str | None = None
    cut: bool = False
    """Its tools/list went on past MAX_PAGES pages: ``tools`` are what those pages listed."""
    """The name it gives itself (``serverInfo.name``), if it gave one."""
    candidates: list[str] = field(default_factory=list)
    """Values of its command line and environment inside ``{data_dir}``, as written: where a store may be."""
    data_dir: Path | None = None
    """The probe's data directory (None for a server reached at a URL)."""
    postgres_tables: Mapping[str, list[str]] | None = None
    """The harness's PostgreSQL, as the server left it (None when it uses none)."""
    startup_s: float | None = None
    """How long the server took to start and answer (None: reached at a URL, not started)."""
    home: Path | None = None
    """The home directory the server was given (None: its own, or an image's)."""
    postgres_url: str | None = None
    """The harness's PostgreSQL the server was given, if any."""
    _call: Callable[[str, dict[str, Any], float], Awaitable[CallResult]] | None = None

    def stores(self) -> list[SeenStore]:
        """The stores as they are now: SQLite files (with their tables), JSON-lines and JSON files, other
        files it names (YAML, CSV, a text list), directories (and those files inside them), each file with
        the format its server likely reads it in, and the PostgreSQL database."""
        found: list[SeenStore] = []
        for value in self.candidates:
            path = self._path(value)
            if path.is_dir():
                for inside in sorted(path.iterdir()):
                    store = _file_store(f"{value.rstrip('/')}/{inside.name}", inside)
                    if store is not None:
                        found.append(store)
                found.append(SeenStore("dir", value, format=directory_format(path)))
            elif (store := _file_store(value, path, named=True)) is not None:
                found.append(store)
        if self.postgres_tables is not None:
            found.append(SeenStore("sql", "{postgres_url}", self.postgres_tables))
        return _unique(found)

    async def call(self, tool: str, arguments: dict[str, Any], *, timeout: float = 30.0) -> CallResult:
        """One call of ``tool`` in this copy of the target: a trial call (:mod:`harness.init.trial`)."""
        assert self._call is not None, "a server init started (one reached at a URL is not called)"
        return await self._call(tool, arguments, timeout)

    async def postgres_rows(self) -> dict[str, list[dict[str, Any]]]:
        """The first rows of each table of the harness's PostgreSQL ({} without one): where a trial
        call's marker may be."""
        return {} if self.postgres_url is None else await _postgres_rows(self.postgres_url)

    def _path(self, value: str) -> Path:
        assert self.data_dir is not None
        return self.data_dir / value.removeprefix(DATA_DIR).lstrip("/")


def own_home(tmp: Path) -> dict[str, str]:
    """The environment that gives a server a home of its own under ``tmp``: its configuration and data
    there, the package managers' caches where they were (a server run by npx or uvx is not fetched
    again)."""
    home = tmp / "home"
    real = Path.home()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(real / ".cache")),
        "npm_config_cache": os.environ.get("npm_config_cache", str(real / ".npm")),  # noqa: SIM112 - npm's own
    }


@contextlib.asynccontextmanager
async def connected(
    target: TargetSpec, *, url: str | None = None, ready_timeout_s: float = 30.0
) -> AsyncIterator[Server]:
    """The target started (or reached at ``url``), its tools listed; stopped again on the way out. A
    command's server gets a home of its own (:func:`own_home`)."""
    if url is not None:
        yield await _reached(url, target_headers(target), ready_timeout_s)
        return
    tmp = leftovers.make(INIT_PREFIX)
    home: Path | None = None
    if target.command is not None and target.image is None:
        home = tmp / "home"
        home.mkdir()
        # Literal paths: ${VAR} values would be redacted as secrets wherever a log quotes them.
        target = target.model_copy(update={"env": {**own_home(tmp), **target.env}})
    scenario = probe(target, ready_timeout_s)
    # Should init be SIGKILLed, its watchdog deletes the directory (the server's log in it is not
    # redacted); should the watchdog die too, `mcp-chaos cleanup` finds it by its name.
    guard.directory(os.getpid(), tmp)
    run_dir = tmp / "init"
    (run_dir / rundir.DATA).mkdir(parents=True)
    (run_dir / rundir.PODS).mkdir()
    try:
        async with _started(scenario, run_dir) as server:
            server.home = home
            yield server
    except TargetError as exc:
        guard.undirectory(tmp)
        if str(tmp) not in exc.message:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # It stays, since the message names the server's log in it; and the message says so.
        kept = f"{exc.message}; init kept {tmp} for that log (mcp-chaos cleanup removes it)"
        raise type(exc)(kept, details=exc.details) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        guard.undirectory(tmp)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    guard.undirectory(tmp)


def remove_stale_probes() -> list[Path]:
    """Delete the throwaway directories of init processes that are gone (``mcp-chaos cleanup``)."""
    return leftovers.remove_stale(INIT_PREFIX)


def probe(target: TargetSpec, ready_timeout_s: float) -> Scenario:
    """The smallest scenario around a target, for the wiring: the services its placeholders name, and a
    workload and an effect source that nothing uses (init calls no tool unless a store appears only at
    the first write, and reads no effect)."""
    texts = [*(target.command or ()), *target.env.values()]
    unused = {"jsonl": {"path": "{data_dir}/unused.jsonl"}}
    return Scenario.model_validate(
        {
            "name": "init",
            "target": {**target.model_dump(mode="json"), "ready_timeout_s": ready_timeout_s},
            "services": {
                **({"postgres": {}} if any("{postgres_url}" in t for t in texts) else {}),
                # init's own calls never reach the API: the proxy answers them as a sandbox would.
                **({"downstream": {}} if any("{downstream_url}" in t for t in texts) else {}),
            },
            "workload": {"intents": 1, "tool": "-", "arguments": {"marker": "{marker}"}},
            "audit": {"effects": {"sink": {}} if any("{sink_url}" in t for t in texts) else unused},
        }
    )


IN_DATA_DIR = re.compile(re.escape(DATA_DIR) + r"""(?:/[^\s'";&|)]*)?""")
"""A path inside ``{data_dir}`` where it stands in a value: a whole argument, after ``--db=``, or a word
of a shell line (``sh -c 'git init {data_dir} && exec server --repository {data_dir}'``: a server
whose store must be made before it starts is often started so)."""


def store_candidates(target: TargetSpec) -> list[str]:
    """Paths inside ``{data_dir}`` in the command line (``--db-path X``, ``--db=X``, a positional path,
    a shell line's words) and the environment, in that order, each once."""
    values = [*(target.command or ()), *target.env.values()]
    found = [path.rstrip("/") or DATA_DIR for value in values for path in IN_DATA_DIR.findall(value)]
    return list(dict.fromkeys(found))


@contextlib.asynccontextmanager
async def _started(scenario: Scenario, run_dir: Path) -> AsyncIterator[Server]:
    """The probe's services and pod started as a run starts them, the tools listed; all stopped after."""
    wiring = TargetWiring(scenario, run_dir)
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(wiring.history)
        stack.callback(wiring.redact_logs)  # a log kept for a failed start may quote the token
        await stack.enter_async_context(wiring.running())
        (client,) = wiring.clients()
        stack.push_async_callback(client.aclose)
        listed = await _list_tools(
            lambda params, rid: wiring.request(client, "tools/list", params, rid, timeout=30)
        )
        ids = iter(range(2000, 3000))

        async def call(tool: str, arguments: dict[str, Any], timeout: float) -> CallResult:
            return await client.call_tool(ToolCall(tool, arguments, next(ids)), timeout=timeout)

        server = Server(
            wiring.protocol,
            listed.tools,
            name=listed.name or _initialized_name(wiring, client),
            cut=listed.cut,
            candidates=store_candidates(scenario.target),
            data_dir=run_dir / rundir.DATA,
            _call=call,
            startup_s=wiring.supervisors[0].startup_s,
        )
        postgres = wiring.service(PostgresWired)
        if postgres is not None:
            server.postgres_url = postgres.cluster.url
            server.postgres_tables = await _postgres_tables(postgres.cluster.url)
        yield server
        if postgres is not None:  # a call may have made tables since
            server.postgres_tables = await _postgres_tables(postgres.cluster.url)


def _initialized_name(wiring: TargetWiring, client: McpClient) -> str | None:
    """The name the 2025 handshake gave (stdio, or an HTTP session)."""
    if isinstance(client, StdioClient) and isinstance(wiring.ready_check, StdioReady):
        channel = wiring.ready_check.channel
        return _name(channel.server_info) if channel is not None else None
    if isinstance(client, McpHttpClient):
        return _name(client.server_info)
    return None


def _name(info: object) -> str | None:
    name = info.get("name") if isinstance(info, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() else None


@dataclass(frozen=True, slots=True)
class _Listed:
    tools: list[dict[str, Any]]
    name: str | None
    cut: bool = False
    """The listing went on past MAX_PAGES pages: ``tools`` are those of the pages read."""


async def _reached(url: str, headers: dict[str, str], ready_timeout_s: float) -> Server:
    """A server already serving at ``url``: nothing to start, only its protocol and tools to learn."""
    parts = urlsplit(url)
    readiness = await wait_ready(
        url,
        timeout_s=ready_timeout_s,
        protocol="auto",
        headers=headers,
        refused=lambda: (
            f"connection refused: nothing listens on {parts.hostname}:{parts.port} (init --url reaches a "
            "server that already runs: start it first, or check the URL)"
        ),
    )
    if not readiness.ready:
        said = readiness.fatal or (readiness.last.message if readiness.last else None) or "no answer"
        raise TargetNotReady(
            f"the server did not answer MCP at {url} within {readiness.after_s:.0f}s: {said}"
        )
    assert readiness.protocol is not None
    async with McpHttpClient(url, protocol=readiness.protocol, headers=headers) as client:
        try:
            listed = await _list_tools(
                lambda params, rid: client.request("tools/list", params, rid, timeout=30)
            )
        finally:
            await client.end_session()
    return Server(
        readiness.protocol, listed.tools, name=listed.name or _name(client.server_info), cut=listed.cut
    )


async def _list_tools(request: Request) -> _Listed:
    """Every page of ``tools/list``, and the server's name where a result's ``_meta`` gives it;
    TargetNotReady (exit 3) when the server will not list them."""
    tools: list[dict[str, Any]] = []
    name: str | None = None
    cursor: str | None = None
    for page in range(MAX_PAGES):
        res = await request({"cursor": cursor} if cursor else {}, 1000 + page)
        if res.outcome is not Outcome.OK or not isinstance(res.result, dict):
            said = f"{res.outcome.value} {res.detail or ''} {res.message or ''}".strip()
            raise TargetNotReady(f"the server did not list its tools: {said}")
        meta = res.result.get("_meta")
        name = name or (_name(meta.get(SERVER_INFO)) if isinstance(meta, dict) else None)
        tools += [
            t for t in res.result.get("tools", []) if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        cursor = res.result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            return _Listed(tools, name)
    return _Listed(tools, name, cut=True)


def _file_store(value: str, path: Path, *, named: bool = False) -> SeenStore | None:
    """What kind of store a file is (by its name, or a SQLite header), with a SQLite file's tables, or a
    JSON document's format (a ``.json`` file may hold JSON lines). ``named``: the server's command line
    or environment names this file, so any other file is its store too (a YAML file, a text list), read
    in the format its name or content shows; a file found in a directory is not (a log, a lock)."""
    if not path.is_file():
        return None
    if path.suffix == ".jsonl":
        return SeenStore("jsonl", value)
    if path.suffix == ".json":
        return SeenStore("json", value, format=file_format(path))
    with open(path, "rb") as f:
        sqlite = f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    if not sqlite and path.suffix not in SQLITE_SUFFIXES:
        return SeenStore("file", value, format=file_format(path)) if named else None
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            tables = {n: [c[1] for c in db.execute(f'PRAGMA table_info("{n}")')] for n in names}
    except sqlite3.Error:
        return None  # named like a database, but not one (yet)
    return SeenStore("sql", f"sqlite:///{value}", tables)


def _unique(stores: list[SeenStore]) -> list[SeenStore]:
    seen: set[str] = set()
    out = []
    for store in stores:
        if store.where not in seen:
            seen.add(store.where)
            out.append(store)
    return out


async def _postgres_rows(url: str) -> dict[str, list[dict[str, Any]]]:
    """The first rows of each table in the public schema, as dicts."""
    import psycopg
    from psycopg import sql

    rows: dict[str, list[dict[str, Any]]] = {}
    tables = await _postgres_tables(url)
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn:
        for table, columns in tables.items():
            query = sql.SQL("SELECT * FROM {} LIMIT 1000").format(sql.Identifier(table))
            cur = await conn.execute(query)
            rows[table] = [dict(zip(columns, row, strict=False)) for row in await cur.fetchall()]
    return rows


async def _postgres_tables(url: str) -> dict[str, list[str]]:
    import psycopg

    tables: dict[str, list[str]] = {}
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn:
        cur = await conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        )
        for table, column in await cur.fetchall():
            tables.setdefault(table, []).append(column)
    return tables
