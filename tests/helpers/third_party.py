"""MCP servers as third parties write them on the official SDK: the tests' stand-ins for servers the
harness did not write. Each is its source, written into a test's directory and started as its target."""

LEDGER = '''
"""A third party's ledger (the SDK's low-level server): record_entry appends to a JSON-lines file,
once per key; it marks ``region`` x-mcp-header, and lists its tools two to a page, a filler first."""
import fcntl, json, os
import uvicorn
import mcp_types as types
from mcp.server.lowlevel import Server

FILE = os.environ["LEDGER_FILE"]
SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "memo": {"type": "string"},
        "idempotency_key": {"type": "string", "description": "Reuse only to retry the same entry."},
    },
    "required": ["region", "memo", "idempotency_key"],
}
EMPTY = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(name=f"filler_{i}", description="Reads nothing.", input_schema=EMPTY,
               annotations=types.ToolAnnotations(read_only_hint=True))
    for i in range(int(os.environ.get("LEDGER_FILLER", "3")))
] + [types.Tool(name="record_entry", description="Append an entry, once per idempotency_key.",
                input_schema=SCHEMA, annotations=types.ToolAnnotations(idempotent_hint=True))]


async def list_tools(ctx, params):
    start = int(params.cursor) if params and params.cursor else 0
    following = str(start + 2) if start + 2 < len(TOOLS) else None
    return types.ListToolsResult(tools=TOOLS[start:start + 2], next_cursor=following)


async def call_tool(ctx, params):
    a = params.arguments or {}
    with open(FILE, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        for line in f:
            if json.loads(line)["key"] == a["idempotency_key"]:
                return types.CallToolResult(content=[types.TextContent(type="text", text=line.strip())])
        entry = json.dumps({"memo": a["memo"], "key": a["idempotency_key"]})
        f.write(entry + "\\n")
    return types.CallToolResult(content=[types.TextContent(type="text", text=entry)])


server = Server("acme-ledger", version="0.3.0", on_list_tools=list_tools, on_call_tool=call_tool,
                get_tool_input_schema=lambda name: SCHEMA if name == "record_entry" else EMPTY)
uvicorn.run(server.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


NEVER_BACK = '''
"""Records items in a JSON-lines file; every start after its first finds "corrupt state" and exits 1
(NEVER_BACK=exit), or waits for a lock that never frees before it serves (NEVER_BACK=hang)."""
import json, os, sys, time

# Before the heavy imports: on a loaded machine they alone outlasted the 3 s the test waits, and the
# pod then "did not answer" instead of exiting as it starts.
FILE = os.environ["ITEMS_FILE"]
if os.path.exists(FILE + ".started"):
    if os.environ["NEVER_BACK"] == "exit":
        sys.exit("items: corrupt state, refusing to start")
    print("items: waiting for a lock that never frees", file=sys.stderr, flush=True)
    time.sleep(3600)
open(FILE + ".started", "w").close()
import uvicorn
from mcp.server.mcpserver import MCPServer
mcp = MCPServer("items")


@mcp.tool()
def add(text: str) -> str:
    """Adds an item."""
    with open(FILE, "a") as f:
        f.write(json.dumps({"text": text}) + "\\n")
    return "ok"


uvicorn.run(mcp.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


REFUSER = '''
"""Appends entries to a JSON-lines file; after its first restart it refuses every call."""
import json, os
from mcp.server.mcpserver import MCPServer

LOG = os.path.join(os.environ["DATA"], "entries.jsonl")
FLAG = os.path.join(os.environ["DATA"], "started")
broken = os.path.exists(FLAG)
open(FLAG, "a").close()
mcp = MCPServer("refuser")


@mcp.tool()
def add_entry(text: str) -> str:
    """Appends an entry."""
    if broken:
        raise RuntimeError("schema migration failed; refusing writes")
    with open(LOG, "a") as f:
        f.write(json.dumps({"text": text}) + "\\n")
    return "ok"


mcp.run("stdio")
'''


IN_MEMORY = '''
"""Keeps items in memory; count_items answers a plain dict, which the SDK sends as JSON text only."""
import os
from collections import Counter
import uvicorn
from mcp.server.mcpserver import MCPServer

items = Counter()
mcp = MCPServer("in-memory")


@mcp.tool()
def add_item(text: str) -> str:
    """Adds an item."""
    items[text] += 1
    return "ok"


@mcp.tool()
def count_items(prefix: str) -> dict:
    """Counts the items whose text starts with prefix."""
    return {"effects": {k: n for k, n in items.items() if k.startswith(prefix)}}


uvicorn.run(mcp.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


BACKED_UP = '''
"""Keeps notes in a JSON document it rewrites whole, keeping the version before as notes.json.bak (as
many editors and small servers do): a files source over the whole directory counts every note but the
newest twice."""
import json, os, shutil
from mcp.server.mcpserver import MCPServer

STORE = os.path.join(os.environ["DATA"], "notes.json")
mcp = MCPServer("backed-up")


@mcp.tool()
def add_note(title: str) -> str:
    """Adds a note."""
    notes = json.load(open(STORE)) if os.path.exists(STORE) else []
    if os.path.exists(STORE):
        shutil.copyfile(STORE, STORE + ".bak")
    notes.append({"title": title})
    with open(STORE, "w") as f:
        json.dump(notes, f)
    return "ok"


mcp.run("stdio")
'''


UNIQUE_ROWS = '''
"""Runs the query it is given against SQLite and answers every failure as a success, as the archived
reference SQLite server (mcp-server-sqlite) does: "Database error: UNIQUE constraint failed: ...",
isError false. The table's key column is UNIQUE, so a retry of an insert already made is refused."""
import os, sqlite3
import uvicorn
from mcp.server.mcpserver import MCPServer

DB = os.path.join(os.environ["DATA"], "app.db")
with sqlite3.connect(DB) as db:
    db.execute("CREATE TABLE IF NOT EXISTS payments (intent TEXT, idem TEXT UNIQUE)")
mcp = MCPServer("unique-rows")


@mcp.tool()
def write_query(query: str) -> str:
    """Executes an INSERT, UPDATE or DELETE query."""
    try:
        with sqlite3.connect(DB) as db:
            return f"{db.execute(query).rowcount} row(s) affected"
    except sqlite3.Error as exc:
        return f"Database error: {exc}"


uvicorn.run(mcp.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


TORN_DOCUMENT = '''
"""Keeps tasks in one JSON document (TASKS_FILE) it rewrites in place (write over the old bytes, then
truncate), as an embedded document store does, pretty-printed. The TORN_AT-th save writes the
document compact, and shorter, and the process dies before its truncate: a whole document, then the
tail of the older one. At start-up it loads the document, and a document that does not parse stops
it (a traceback, exit 1)."""
import json, os, signal

STORE = os.environ["TASKS_FILE"]
TORN_AT = int(os.environ.get("TORN_AT", "0"))
if os.path.exists(STORE):
    with open(STORE) as f:
        tasks = json.load(f)["tasks"]
else:
    tasks = []
saves = 0

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("tasks")


@mcp.tool()
def add_task(title: str) -> str:
    """Adds a task."""
    global saves
    saves += 1
    tasks.append({"title": title, "done": False})
    compact = saves == TORN_AT
    text = json.dumps({"tasks": tasks}, indent=None if compact else 2).encode()
    fd = os.open(STORE, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, text)
    if compact:
        os.kill(os.getpid(), signal.SIGKILL)
    os.ftruncate(fd, len(text))
    os.close(fd)
    return "added"


mcp.run("stdio")
'''


WEDGED_AFTER = '''
"""Appends items to a JSON-lines file, as a store that commits under a lock file does. Its first start
serves every call (WEDGE_AFTER=0), or WEDGE_AFTER calls and then none. A start after a kill finds the
lock file its predecessor held: it answers one call from its cache, then every call waits for that
lock, for ever (as a git-backed store waits on a stale index.lock)."""
import asyncio, json, os, sys
import uvicorn
from mcp.server.mcpserver import MCPServer

STORE = os.path.join(os.environ["DATA"], "items.jsonl")
FLAG = os.path.join(os.environ["DATA"], "started")
serves = 1 if os.path.exists(FLAG) else int(os.environ.get("WEDGE_AFTER", "0"))
open(FLAG, "a").close()
served = 0
mcp = MCPServer("items")


@mcp.tool()
async def add(text: str) -> str:
    """Adds an item."""
    global served
    served += 1
    if serves and served > serves:
        print("items: waiting for items.lock", file=sys.stderr, flush=True)
        await asyncio.Event().wait()
    with open(STORE, "a") as f:
        f.write(json.dumps({"text": text}) + "\\n")
    return "ok"


uvicorn.run(mcp.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


NO_TABLE = '''
"""Answers every add_row OK with its database's error, as a server whose migration never ran does
("Database error: no such table: rows", isError false). Its one argument must not be empty (a
minLength), so a call that sends it empty is its SDK's to refuse, not its own code's."""
import os
from typing import Annotated
import uvicorn
from pydantic import Field
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("rows")


@mcp.tool()
def add_row(memo: Annotated[str, Field(min_length=1)]) -> str:
    """Adds a row."""
    return "Database error: no such table: rows"


uvicorn.run(mcp.streamable_http_app(json_response=True, stateless_http=True), host="127.0.0.1",
            port=int(os.environ["PORT"]), log_level="warning")
'''


TODO_LIST = '''
"""Keeps a to-do list as plain text, one "- item" line each, rewritten whole on every change (a file
named by TODO_FILE, made at the first write)."""
import os
from mcp.server.mcpserver import MCPServer

FILE = os.environ["TODO_FILE"]
mcp = MCPServer("todo")


@mcp.tool()
def add_todo(text: str) -> str:
    """Adds an item to the list."""
    items = open(FILE).read().splitlines() if os.path.exists(FILE) else []
    items.append(f"- {text}")
    with open(FILE, "w") as f:
        f.write("\\n".join(items) + "\\n")
    return "added"


mcp.run("stdio")
'''


ASKING = '''
"""A notes server that asks its host what the hosts servers are written for answer: on each call,
the roots (it writes into the first), a confirmation form (with a default), a model (only where the
client declares sampling); it logs and reports progress. What the host answered goes in the note.
Stdio (ASKING_TRANSPORT=stdio) or HTTP with 2025 sessions (the questions ride on the call's stream)."""
import json, os
from urllib.parse import urlsplit, unquote
from pydantic import BaseModel
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("asking-notes")


class Confirm(BaseModel):
    confirmed: bool = True
    tag: str = "from-the-form"


@mcp.tool()
async def add_note(body: str, ctx: Context) -> str:
    """Adds a note to the first root the host gives."""
    await ctx.info(f"adding {body}")
    await ctx.report_progress(0.5, 1.0)
    roots = (await ctx.request_context.session.list_roots()).roots
    form = await ctx.elicit("Add this note?", Confirm)
    sampling = "not declared"
    session = ctx.request_context.session
    if session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
        try:
            hi = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
            await session.create_message([hi], max_tokens=5)
            sampling = "answered"
        except Exception as exc:  # the host declined
            sampling = f"declined: {exc}"
    directory = unquote(urlsplit(str(roots[0].uri)).path)
    note = {"body": body, "roots": [str(r.uri) for r in roots], "form": form.action,
            "content": form.data.model_dump() if form.action == "accept" else None, "sampling": sampling}
    with open(os.path.join(directory, "notes.jsonl"), "a") as f:
        f.write(json.dumps(note) + "\\n")
    await ctx.report_progress(1.0, 1.0)
    return "added"


if os.environ.get("ASKING_TRANSPORT") == "stdio":
    mcp.run()
else:
    mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]))
'''


WIPED = '''
"""Keeps items in a JSON-lines file; every start after its first finds it "unreadable", sets it
aside as empty (logging a stack trace for each call it then takes) and keeps each later item in
memory only, answering ok: a store the first kill emptied, and every later write acknowledged and
lost. HTTP (stateless), so it is killed mid-workload like any pod."""
import json, os, traceback
from mcp.server.mcpserver import MCPServer

FILE = os.environ["ITEMS_FILE"]
restarted = os.path.exists(FILE + ".started")
open(FILE + ".started", "w").close()
if restarted:
    open(FILE, "w").close()  # "recovered" as empty
kept = []
mcp = MCPServer("wiped")


@mcp.tool()
def add(text: str) -> str:
    """Adds an item."""
    if restarted:
        kept.append(text)
        try:
            raise OSError(f"{FILE}: store unreadable, keeping items in memory")
        except OSError:
            traceback.print_exc()
        return "ok"
    with open(FILE, "a") as f:
        f.write(json.dumps({"text": text}) + "\\n")
    return "ok"


mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]), stateless_http=True)
'''


CHINESE = '''
"""Notes in a JSON-lines file, answered in Chinese: every FAIL_EVERY-th call (all of them with 1)
fails and stores nothing, yet answers ok (isError false) with an error in Chinese words."""
import json, os
from mcp.server.mcpserver import MCPServer

FILE, EVERY = os.environ["NOTES_FILE"], int(os.environ.get("FAIL_EVERY", "1"))
calls = 0
mcp = MCPServer("zh-notes")


@mcp.tool()
def add_note(text: str) -> str:
    """添加一条笔记。"""
    global calls
    calls += 1
    if calls % EVERY == 0:
        return "错误：数据库暂时不可用，笔记未保存"
    with open(FILE, "a") as f:
        f.write(json.dumps({"text": text}, ensure_ascii=False) + "\\n")
    return f"已创建笔记 {calls}：{text}"


mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]), stateless_http=True)
'''


TASKS = '''
"""A task manager whose likeliest-looking tools store nothing: plan_task answers a plan (a prompt,
nothing stored), create_pull_request needs branches that do not exist; add_task keeps each task in a
SQLite table (its body in the column ``details``, not in the argument's name ``notes``)."""
import os, sqlite3
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DB = os.environ["TASKS_DB"]
mcp = MCPServer("tasks")


@mcp.tool()
def plan_task(title: str, description: str, idempotency_key: str) -> str:
    """Creates a plan for a task: the steps an assistant should take."""
    return f"Plan for {title}: 1. understand {description} 2. do it 3. check it"


@mcp.tool()
def create_pull_request(title: str, body: str, head: str, base: str, idempotency_key: str) -> str:
    """Creates a pull request from head into base."""
    raise ToolError(f"branch {head!r} does not exist")


@mcp.tool()
def add_task(title: str, notes: str) -> str:
    """Adds a task."""
    with sqlite3.connect(DB) as db:
        db.execute("CREATE TABLE IF NOT EXISTS tasks (id INTEGER PRIMARY KEY, title TEXT, details TEXT)")
        cur = db.execute("INSERT INTO tasks (title, details) VALUES (?, ?)", (title, notes))
    return f"task {cur.lastrowid} added"


mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]), stateless_http=True)
'''


PLAIN_TEXT = '''
"""A to-do list in a plain text file, one item a line (the todo.txt way)."""
import os
from mcp.server.mcpserver import MCPServer

FILE = os.environ["TODO_FILE"]
mcp = MCPServer("todo-txt")


@mcp.tool()
def add_todo(text: str) -> str:
    """Adds an item to the to-do list."""
    with open(FILE, "a") as f:
        f.write(f"(A) {text}\\n")
    return "added"


mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]), stateless_http=True)
'''


HOME_NOTES = '''
"""Notes kept where many published servers keep theirs: a JSON file under the user's home
(~/.config/home-notes/notes.json), with no option to point it anywhere else."""
import json, os
from pathlib import Path
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("home-notes")


@mcp.tool()
def create_note(title: str) -> str:
    """Creates a note."""
    store = Path.home() / ".config" / "home-notes" / "notes.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    notes = json.loads(store.read_text()) if store.exists() else []
    notes.append({"title": title})
    store.write_text(json.dumps(notes))
    return f"note {len(notes)} created"


mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["PORT"]), stateless_http=True)
'''


EARLY_SDK = '''
"""A stdio server on an early SDK (the TypeScript SDK 1.0 that many published servers still pin):
it speaks 2024-11-05 only, whatever the client offers. create_entry appends a JSON line to ENTRY_FILE."""
import json, os, sys

FILE = os.environ["ENTRY_FILE"]
TOOL = {"name": "create_entry", "description": "Creates an entry.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "early-entries", "version": "0.1.0"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [TOOL]}
    else:
        with open(FILE, "a") as f:
            f.write(json.dumps({"text": msg["params"]["arguments"]["text"]}) + "\\n")
        result = {"content": [{"type": "text", "text": "created"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\\n")
    sys.stdout.flush()
'''
