"""An MCP server whose tool needs the name of a database that exists, and answers a wrong one with a
success whose text is the failure: the shape of a published server ``init`` drafted wrong.

``python records.py --db-path FILE`` serves MCP on stdio with one tool, ``add_record(db_name,
contact_id, note)``. Only ``db_name`` ``main`` exists: a record is then inserted into FILE (a SQLite
file made at the first write). Any other name stores nothing and is answered OK (isError false) with
``Error adding record: relation "records" does not exist``, as the SQL layer said it.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3

from mcp.server.mcpserver import MCPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db-path", required=True)
    db_path = parser.parse_args().db_path
    server: MCPServer[object] = MCPServer("records", version="1.0.0", log_level="WARNING")

    @server.tool(description="Adds a record with a note to a contact in the named database.")
    async def add_record(db_name: str, contact_id: str, note: str) -> str:
        if db_name != "main":
            return 'Error adding record: relation "records" does not exist'
        db = sqlite3.connect(db_path)
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS records (contact_id TEXT, note TEXT)")
            db.execute("INSERT INTO records VALUES (?, ?)", (contact_id, note))
        db.close()
        return "Record added."

    asyncio.run(server.run_stdio_async())


if __name__ == "__main__":
    main()
