"""Where things are: the checkout, the reference targets, the MCP servers published by others."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOICES = ROOT / "targets" / "invoices" / "server.py"
PGCLIENTS = ROOT / "targets" / "pgclients" / "server.py"
TS_DIR = ROOT / "targets" / "invoices-ts"
PAYMENTS = ROOT / "targets" / "payments" / "server.py"
"""A server whose one tool calls an https:// API host fixed in its code."""
PROVIDER = ROOT / "targets" / "payments" / "provider.py"
"""A fake payment provider (deduplicates by Idempotency-Key): the upstream behind the downstream proxy."""

SERVERS_DIR = ROOT / "tests" / "servers"
PUBLISHED = SERVERS_DIR / "node_modules" / "@modelcontextprotocol"
MEMORY_SERVER = PUBLISHED / "server-memory" / "dist" / "index.js"
"""The official memory server (stdio; a JSON-lines file named by MEMORY_FILE_PATH)."""
FILESYSTEM_SERVER = PUBLISHED / "server-filesystem" / "dist" / "index.js"
"""The official filesystem server (stdio; the directories it may touch are its arguments)."""
