"""``python -m harness.cli``: the ``mcp-chaos`` console script."""

from harness.cli import entry

entry()
