"""mcp-chaos: a chaos / pod-kill retry-safety harness for MCP servers.

The public surface is small on purpose: load a scenario, run it, audit a run
directory. Everything else is implementation and may change between releases.
"""

__version__ = "0.1.0"
