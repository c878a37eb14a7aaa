"""``mcp-chaos conformance-client URL``: the client command the official conformance suite runs."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    client = sub.add_parser(
        "conformance-client",
        help="act out one scenario of the official MCP conformance suite with the harness's client "
        "(the suite runs it: make conformance)",
    )
    client.add_argument("url", help="the scenario server's MCP endpoint (the suite appends it)")
    client.add_argument(
        "--scenario",
        help="the scenario (default: $MCP_CONFORMANCE_SCENARIO, which the suite sets)",
    )
    client.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Do what the scenario asks of a client; exit 0 when the client got through it (the suite judges
    what it saw), 1 when it could not."""
    import asyncio  # here, not at the top: every command would pay for it (see harness.cli)

    from harness.client.messages import PROTOCOLS
    from harness.conformance.client import act

    scenario = args.scenario or os.environ.get("MCP_CONFORMANCE_SCENARIO")
    if not scenario:
        raise UsageError("conformance-client: no scenario; set MCP_CONFORMANCE_SCENARIO or pass --scenario")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None
    if version is not None and version not in PROTOCOLS:
        known = ", ".join(PROTOCOLS)
        raise UsageError(f"conformance-client: protocol version {version!r} is not one of {known}")
    asyncio.run(act(args.url, scenario, os.environ.get("MCP_CONFORMANCE_CONTEXT"), version))
    return 0
