"""Plain helpers and constants of the tests, imported by name (``from tests.helpers.scenarios import
invoice_scenario``); the fixtures and pytest hooks are in ``tests/conftest.py``, which uses these.

- ``paths``: where things are (the checkout, the reference targets, the published servers).
- ``scenarios``: scenario dicts for the reference invoices target, whole runs in-process, their rows.
- ``processes``: the reference target as a real child process, and whether a process still runs.
- ``cli``: ``mcp-chaos`` in this process (``mcp_chaos``) or as a real one (``CLI``,
  ``mcp_chaos_process``, ``start_cli_run``).
- ``containers``: the reference images (built when missing or stale) and the harness's containers.
- ``node``: Node.js, npm and ``npm ci`` one at a time, for the TypeScript target and published servers.
"""
