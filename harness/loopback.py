"""Loopback networking: free ports, and TCP servers whose handlers end when they close.

Everything the harness listens on is on 127.0.0.1. The fault proxy and the
effect sink are both small servers the harness runs beside the pod; they share
this lifecycle: listen on a loopback port, handle each connection in its own
task, and on close drop every connection and wait for the handlers, so nothing
of them outlives the run (and asyncio has no cancelled handler left to complain
about at shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from pathlib import Path
from typing import Any

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The ports the kernel hands out to outgoing connections (Linux)."""
LOWEST = 10_000
_given: set[int] = set()
_draw = random.Random()


def _outside_ephemeral() -> range:
    """Ports no outgoing connection is given: below the kernel's ephemeral range (or above it)."""
    try:
        low, high = map(int, EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    below, above = range(LOWEST, low), range(high + 1, 65536)
    return below if len(below) >= len(above) else above  # empty when the range covers them all


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, outside the kernel's ephemeral range.

    The harness picks every port before anything starts, so each placeholder is
    known up front and a pod keeps its port across restarts. A port of the
    ephemeral range (what binding port 0 gives) may be handed to an outgoing
    connection while the pod is down (a client's retry, a database connection),
    and the restarted pod then cannot listen on it; so the port is drawn from
    outside that range, and never twice in one process (any free port, where that range leaves
    fewer than a hundred).
    """
    ports = _outside_ephemeral()
    for _ in range(200 if len(ports) >= 100 else 0):
        port = _draw.choice(ports)
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackServer:
    """Subclasses implement :meth:`handle`; connection errors just end that connection."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self, port: int | None = None) -> int:
        """Listen on 127.0.0.1 (``port``, else the one given at construction, 0: any); returns the port."""
        if port is not None:
            self.port = port
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stop listening, end every handler and wait for them."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._handlers.add(me)
        try:
            await self.handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # close(): the handler ends quietly (re-raising would be logged by asyncio)
        finally:
            if me is not None:
                self._handlers.discard(me)
            writer.transport.abort()
