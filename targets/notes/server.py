"""A reference MCP server that keeps notes in one JSON-lines file, with the file-store bugs servers ship.

Many published MCP servers keep their state in one file that they rewrite whole
on every change (a JSON document, or JSON lines as the official memory server
does). That design has its own ways to lose acknowledged writes, none of which
needs a retry: concurrent load-modify-save, a rewrite in place torn by a kill,
a start-up that treats a torn file as empty. This server has them one at a time,
chosen at start-up, so the harness can be shown to tell each from a duplicate
and name its cause. It is an ordinary MCP server on the official SDK (like a
user's server, it never imports the harness), over stdio by default, as most
file-store servers are, or Streamable HTTP (2026-07-28, stateless).

NOTES_FILE          the JSON-lines store: one note per line ({"id", "title", "body", ...})
--db-path PATH      (command line) keep the notes in a SQLite table instead (notes: id, name, title,
                    body, created_at), made at the first write, as many published servers do;
                    NOTES_FILE is then not needed (with every flaw but torn_file)
NOTES_TRANSPORT     stdio (default) | http (127.0.0.1:$PORT/mcp, JSON responses)
PORT, HOST          where to listen over HTTP (HOST must be a loopback address)
NOTES_FLAW          none (default): each change under one lock, the file replaced atomically
                    (NOTES_SAVE), and a file that does not parse refuses the start (exit 2), so
                    no acknowledged note can be lost or repeated by a kill. One of:
                    lost_update        every change loads the file, works, and saves it whole,
                                       with no lock: concurrent changes overwrite each other
                    torn_file          every change rewrites the file in place (truncate, then
                                       write); at start-up a line that does not parse is
                                       reported ("Error loading notes: ...") and the server
                                       starts empty, so its next save overwrites the rest
                    error_as_success   every NOTES_FAIL_EVERY-th add_note stores nothing and
                                       answers "Database error: no such table: notes (<its
                                       store>)" as a success (isError false)
                    racy_ids           a note's id is read from a shared counter before the work
                                       and the counter moved on after it: concurrent adds get
                                       the same id, and the later overwrites the earlier
                    stale_lock         every save holds a lock file (NOTES_FILE.lock, created
                                       exclusively, removed after the save), and a change waits
                                       for a lock file it finds, for ever: a kill mid-save
                                       leaves the lock, and after the restart every call hangs
NOTES_SAVE          how the default (NOTES_FLAW=none) saves the file, the durability classes of
                    file stores:
                    durable (default)  a temporary file, fsync, rename, fsync of the directory:
                                       nothing acknowledged is lost to a kill or a power loss
                    fsync_rename       the same without the directory's fsync: the rename may
                                       not survive a power loss
                    rename             a temporary file and a rename, no fsync: atomic under a
                                       kill, nothing of it durable under a power loss
                    in_place           truncate the file, then write it whole: a kill between
                                       the two leaves it empty, read as no notes
NOTES_SQLITE_SYNC   with --db-path: PRAGMA synchronous for every save (off, normal, full,
                    extra); unset, SQLite's default (full, with a rollback journal: the
                    journal's deletion is not made durable, so a power loss right after a
                    commit can roll it back, as SQLite documents for EXTRA)
NOTES_WORK_MS       work per change, in milliseconds (default 2): between loading and saving
                    (lost_update, racy_ids), or between the halves of a rewrite (torn_file)
NOTES_FAIL_EVERY    error_as_success: which adds fail (default 10: the 10th, 20th, ...)
NOTES_FAILPOINT     mid_write@N[:F]: at the N-th save (1-based, this process), write the
                    fraction F (default 0.9) of the file's bytes in place, then SIGKILL this
                    process: a deterministic torn file (torn_file); with stale_lock, take the
                    lock and SIGKILL this process: a deterministic stale lock
NOTES_ERRORS        structured (default): a refusal is isError with structuredContent
                    {code, retryable, recovery} | tool_error: raised as the SDK teaches
                    (ToolError with a JSON body), so the text reads
                    "Error executing tool add_note: {...}"

Tools: add_note (a keyless insert), write_note (a keyless upsert by name: naturally
idempotent), list_notes (read-only), delete_note.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import os
import signal
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

FLAWS = ("none", "lost_update", "torn_file", "error_as_success", "racy_ids", "stale_lock")
SAVES = ("durable", "fsync_rename", "rename", "in_place")


class ConfigError(Exception):
    """A bad environment variable; printed as one line, exit code 2."""


@dataclass(frozen=True)
class Config:
    file: Path
    db_path: Path | None
    transport: str
    host: str
    port: int
    flaw: str
    work_s: float
    fail_every: int
    failpoint: tuple[int, float] | None
    errors: str
    save: str = "durable"
    sqlite_sync: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str], db_path: str | None = None) -> Config:
        file = env.get("NOTES_FILE") or ""
        if not file and not db_path:
            raise ConfigError(
                "NOTES_FILE is not set: name the JSON-lines file the notes live in (or pass --db-path)"
            )
        transport = env.get("NOTES_TRANSPORT", "stdio")
        if transport not in ("stdio", "http"):
            raise ConfigError(f"NOTES_TRANSPORT={transport!r}: use stdio or http")
        host = env.get("HOST", "127.0.0.1")
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(f"HOST={host!r} is not a loopback address")
        flaw = env.get("NOTES_FLAW", "none")
        if flaw not in FLAWS:
            raise ConfigError(f"NOTES_FLAW={flaw!r}: use one of {', '.join(FLAWS)}")
        errors = env.get("NOTES_ERRORS", "structured")
        if errors not in ("structured", "tool_error"):
            raise ConfigError(f"NOTES_ERRORS={errors!r}: use structured or tool_error")
        try:
            port = int(env.get("PORT", "0"))
            work_s = float(env.get("NOTES_WORK_MS", "2")) / 1000
            fail_every = int(env.get("NOTES_FAIL_EVERY", "10"))
        except ValueError as exc:
            raise ConfigError(f"a number is not a number: {exc}") from None
        if transport == "http" and not 0 < port < 65536:
            raise ConfigError("PORT must be set to a port number for NOTES_TRANSPORT=http")
        if work_s < 0 or fail_every < 1:
            raise ConfigError("NOTES_WORK_MS must be >= 0 and NOTES_FAIL_EVERY >= 1")
        if db_path and flaw in ("torn_file", "stale_lock"):
            raise ConfigError(f"NOTES_FLAW={flaw} is a flaw of the file store; it has no --db-path store")
        save = env.get("NOTES_SAVE", "durable")
        if save not in SAVES:
            raise ConfigError(f"NOTES_SAVE={save!r}: use one of {', '.join(SAVES)}")
        sqlite_sync = env.get("NOTES_SQLITE_SYNC") or None
        if sqlite_sync is not None and sqlite_sync not in ("off", "normal", "full", "extra"):
            raise ConfigError(f"NOTES_SQLITE_SYNC={sqlite_sync!r}: use off, normal, full or extra")
        return cls(
            file=Path(file),
            db_path=Path(db_path) if db_path else None,
            transport=transport,
            host=host,
            port=port,
            flaw=flaw,
            work_s=work_s,
            fail_every=fail_every,
            failpoint=_failpoint(env.get("NOTES_FAILPOINT"), flaw),
            errors=errors,
            save=save,
            sqlite_sync=sqlite_sync,
        )


def _failpoint(text: str | None, flaw: str) -> tuple[int, float] | None:
    if not text:
        return None
    point, _, rest = text.partition("@")
    count, _, fraction = rest.partition(":")
    if point != "mid_write" or not count.isdigit() or int(count) < 1:
        raise ConfigError(f"NOTES_FAILPOINT={text!r}: use mid_write@N or mid_write@N:FRACTION")
    if flaw not in ("torn_file", "stale_lock"):
        raise ConfigError("NOTES_FAILPOINT=mid_write needs NOTES_FLAW=torn_file or stale_lock")
    try:
        share = float(fraction) if fraction else 0.9
    except ValueError:
        raise ConfigError(f"NOTES_FAILPOINT={text!r}: the fraction is not a number") from None
    if not 0 <= share < 1:
        raise ConfigError(f"NOTES_FAILPOINT={text!r}: the fraction must be in [0, 1)")
    return int(count), share


def die() -> None:
    """What a kill does, from the inside: no cleanup, no flush (PID 1 in a container exits instead)."""
    if os.getpid() == 1:
        os._exit(137)
    os.kill(os.getpid(), signal.SIGKILL)


def _lines(notes: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(note, separators=(",", ":")) + "\n" for note in notes]


class NoteFile:
    """The file and the way this server's flaw reads and writes it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.path = config.file
        self.saves = 0

    def load(self) -> list[dict[str, Any]]:
        """Every note in the file; a line that does not parse raises ValueError naming it."""
        if not self.path.exists():
            return []
        notes = []
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                note = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: {exc}") from None
            if not isinstance(note, dict):
                raise ValueError(f"line {number}: not a JSON object")
            notes.append(note)
        return notes

    async def save(self, notes: list[dict[str, Any]]) -> None:
        self.saves += 1
        lines = _lines(notes)
        if self.config.flaw == "torn_file":
            await self._rewrite_in_place(lines)
            return
        if self.config.flaw == "stale_lock":
            await self._locked_save(lines)
            return
        self._replace(lines)

    async def _locked_save(self, lines: list[str]) -> None:
        """The flaw: a lock file no start-up removes and nothing tells a dead holder from a live one."""
        lock = self.path.with_name(self.path.name + ".lock")
        while True:
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                break
            except FileExistsError:
                print(f"notes: waiting for {lock.name} (another save holds it)", file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        failpoint = self.config.failpoint
        if failpoint is not None and self.saves == failpoint[0]:
            die()
        if self.config.work_s:
            await asyncio.sleep(self.config.work_s)
        self._replace(lines)
        os.unlink(lock)

    def _replace(self, lines: list[str]) -> None:
        """Save the whole file the way NOTES_SAVE says (the durability classes of file stores)."""
        how = self.config.save
        if how == "in_place":
            with open(self.path, "w", encoding="utf-8") as f:
                f.writelines(lines)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            if how != "rename":
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if how == "durable":
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    async def _rewrite_in_place(self, lines: list[str]) -> None:
        """The flaw: truncate, write the first half, work, write the rest. A kill in between tears it."""
        half = len(lines) // 2
        failpoint = self.config.failpoint
        with open(self.path, "w", encoding="utf-8") as f:
            if failpoint is not None and self.saves == failpoint[0]:
                text = "".join(lines)
                f.write(text[: int(len(text) * failpoint[1])])  # mid-line, as a kill cuts a write
                f.flush()
                os.fsync(f.fileno())
                die()
            f.writelines(lines[:half])
            f.flush()
            if self.config.work_s:
                await asyncio.sleep(self.config.work_s)
            f.writelines(lines[half:])


NOTE_COLUMNS = ("id", "name", "title", "body", "created_at")


class NoteTable:
    """The notes in one SQLite table, read and written whole as the file is (so every flaw but the
    torn file works the same); the database and its table are made at the first save."""

    def __init__(self, path: Path, sync: str | None = None) -> None:
        self.path = path
        self.sync = sync
        self.saves = 0

    def load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            try:
                rows = db.execute(f"SELECT {', '.join(NOTE_COLUMNS)} FROM notes ORDER BY rowid").fetchall()
            except sqlite3.OperationalError:  # no table yet: nothing was ever saved
                return []
        return [{k: v for k, v in zip(NOTE_COLUMNS, row, strict=True) if v is not None} for row in rows]

    async def save(self, notes: list[dict[str, Any]]) -> None:
        self.saves += 1
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            if self.sync is not None:
                db.execute(f"PRAGMA synchronous = {self.sync}")
            db.execute(
                "CREATE TABLE IF NOT EXISTS notes "
                "(id INTEGER, name TEXT, title TEXT, body TEXT, created_at TEXT)"
            )
            db.execute("DELETE FROM notes")
            db.executemany(
                f"INSERT INTO notes VALUES ({', '.join('?' for _ in NOTE_COLUMNS)})",
                [tuple(note.get(k) for k in NOTE_COLUMNS) for note in notes],
            )


def build_server(config: Config) -> MCPServer[Any]:
    store: NoteFile | NoteTable = (
        NoteFile(config) if config.db_path is None else NoteTable(config.db_path, config.sqlite_sync)
    )
    try:
        notes = store.load()
    except ValueError as exc:
        if config.flaw != "torn_file":
            print(
                f"notes: {config.file} is damaged ({exc}): refusing to start; "
                "restore the file or move it away",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(2)
        # The flaw as published servers have it: say so, and start from nothing.
        print(f"Error loading notes: {exc}", file=sys.stderr, flush=True)
        notes = []
    lock = asyncio.Lock()
    adds = 0
    where = config.db_path or config.file
    next_id = 1 + max((int(n.get("id", 0)) for n in notes), default=0)
    server: MCPServer[Any] = MCPServer("reference-notes", version="1.0.0", log_level="WARNING")

    def refuse(code: str, message: str, recovery: str) -> CallToolResult:
        body = {"code": code, "message": message, "retryable": False, "recovery": recovery}
        if config.errors == "tool_error":
            raise ToolError(json.dumps(body))
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(body))], structured_content=body, is_error=True
        )

    def ok(payload: dict[str, Any]) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(payload))], structured_content=payload
        )

    async def work() -> None:
        if config.work_s:
            await asyncio.sleep(config.work_s)

    async def change(apply: Any) -> dict[str, Any]:
        """Apply one change to the notes and save them, the way this server's flaw does it."""
        nonlocal notes
        if config.flaw == "lost_update":
            current = store.load()  # load, work, save: a concurrent change in between is overwritten
            await work()
            result: dict[str, Any] = apply(current)
            await store.save(current)
            notes = current
            return result
        async with lock:
            result = apply(notes)
            await store.save(notes)
            return result

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
        description="Adds a note with a title and a body, and returns its id.",
    )
    async def add_note(title: str, body: str) -> CallToolResult:
        nonlocal adds, next_id
        if not title.strip():
            return refuse("invalid_title", "title must not be empty", "Send a title with some text.")
        adds += 1
        if config.flaw == "error_as_success" and adds % config.fail_every == 0:
            # The most common contract bug: the failure is the text of a success (naming the store, as
            # published servers' errors often do: a path, a connection string).
            return CallToolResult(
                content=[TextContent(type="text", text=f"Database error: no such table: notes ({where})")]
            )
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
        if config.flaw == "racy_ids":
            note_id = next_id
            await work()  # the counter is read before the work and moved on after it
            next_id = note_id + 1

            def put(current: list[dict[str, Any]]) -> dict[str, Any]:
                note = {"id": note_id, "title": title, "body": body, "created_at": now}
                current[:] = [n for n in current if n.get("id") != note_id] + [note]
                return {"id": note_id, "title": title}

            return ok(await change(put))

        def add(current: list[dict[str, Any]]) -> dict[str, Any]:
            new_id = 1 + max((int(n.get("id", 0)) for n in current), default=0)
            current.append({"id": new_id, "title": title, "body": body, "created_at": now})
            return {"id": new_id, "title": title}

        return ok(await change(add))

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False),
        description="Writes the note called name with this content, replacing it if it exists.",
    )
    async def write_note(name: str, content: str) -> CallToolResult:
        if not name.strip():
            return refuse("invalid_name", "name must not be empty", "Send a name with some text.")

        def upsert(current: list[dict[str, Any]]) -> dict[str, Any]:
            kept = [n for n in current if n.get("name") != name]
            new_id = 1 + max((int(n.get("id", 0)) for n in current), default=0)
            current[:] = [*kept, {"id": new_id, "name": name, "title": name, "body": content}]
            return {"name": name, "written": len(content)}

        return ok(await change(upsert))

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True),
        description="Lists every note: id, title and body.",
    )
    async def list_notes() -> CallToolResult:
        return ok({"notes": store.load() if config.flaw == "lost_update" else list(notes)})

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
        description="Deletes the note with this id.",
    )
    async def delete_note(id: int) -> CallToolResult:
        def drop(current: list[dict[str, Any]]) -> dict[str, Any]:
            before = len(current)
            current[:] = [n for n in current if n.get("id") != id]
            return {"id": id, "deleted": before - len(current)}

        return ok(await change(drop))

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A reference MCP server that keeps notes.")
    parser.add_argument("--db-path", help="keep the notes in this SQLite file (made at the first write)")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env(dict(os.environ), args.db_path)
    except ConfigError as exc:
        print(f"notes: {exc}", file=sys.stderr)
        return 2
    server = build_server(config)
    if config.db_path is not None:
        kept = f"database={config.db_path}"
    else:
        lines = len(config.file.read_text().splitlines()) if config.file.exists() else 0
        kept = f"file={config.file} ({lines} lines)"
    where = "stdio" if config.transport == "stdio" else f"http://{config.host}:{config.port}/mcp"
    print(f"notes: flaw={config.flaw} {kept} serving MCP on {where}", file=sys.stderr, flush=True)
    if config.transport == "stdio":
        asyncio.run(server.run_stdio_async())
        return 0
    app: Any = server.streamable_http_app(json_response=True, stateless_http=True, host=config.host)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
