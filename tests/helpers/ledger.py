"""A third party's MCP server, as the official SDK's low-level API writes one: the tests' stand-in for
servers the harness did not write (paged tools/list, an ``x-mcp-header`` argument, a key)."""

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
