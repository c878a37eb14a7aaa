"""The official MCP conformance suite's client scenarios, acted out by the harness's own client.

``mcp-chaos conformance-client URL`` is the command the suite runs (``conformance client
--command``): :mod:`harness.conformance.client` acts as the scenario the suite names in
``MCP_CONFORMANCE_SCENARIO`` requires, through :class:`harness.client.http.McpHttpClient` (and
its OAuth, :mod:`harness.client.oauth`), so what the suite judges is what the driver does.
:mod:`harness.conformance.suite` installs the suite and the Node it needs and runs it
(``make conformance``).
"""
