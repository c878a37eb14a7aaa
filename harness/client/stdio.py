"""MCP over stdio: newline-delimited JSON-RPC on a server process's stdin and stdout.

About two thirds of published MCP servers speak only this. A :class:`StdioChannel`
is one server process: requests are written to its stdin, responses read from
its stdout and matched by id, many in flight at once. It starts with the 2025
``initialize`` handshake, as a host does, and again after every restart (a new
process is a new channel); a server on an early SDK may choose 2024-11-05, whose
stdio messages are the same. When the process dies, every call in flight ends as
a transport error whose outcome is unknown, exactly like a severed HTTP
response; a call with no process to write to certainly did not reach a server.

A timeout cannot close a connection here, so the channel sends
``notifications/cancelled`` for the request, as the 2025 protocol asks. Lines
on stdout that are not JSON-RPC (a server that logs to stdout) are counted and
skipped, as the SDKs' clients skip them; a message after text that has no newline
of its own (``booting... {"jsonrpc": ...}``) is read from its first brace. What
was skipped last is kept for messages: a handshake that fails says what the
server printed instead, and one whose answer is unreadable fails at once.
Requests from the server are answered as the channel's :class:`~harness.client.host.Host`
answers them (``roots/list``, ``elicitation/create``, ``ping``), and declared in
``initialize``; a channel without one answers ``ping`` and refuses the rest.

With crash points, the host is where a stdio call is held (as the fault proxy holds an
HTTP one): :class:`StdioClient` tells the hold points that a call's request is at the
server's door and that its answer came, before the server gets the one or the client
the other, and drops whichever the pod was killed at.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import orjson

from harness._version import __version__
from harness.client.host import Host
from harness.client.messages import (
    SESSION_VERSIONS,
    STDIO_VERSIONS,
    CallResult,
    ToolCall,
    interpret_message,
    refused_version,
)
from harness.crashpoints.decisions import Decision, Reached, Site
from harness.crashpoints.points import PointKind
from harness.crashpoints.router import Router
from harness.events import SessionLost, SessionOpened
from harness.history import Detail, HistoryWriter, Outcome, excerpt

_FORM = "stdio"
HANDSHAKE_ID = -1
Gate = Callable[[], Awaitable[bool]]
"""Asked when a call's answer comes, before the caller gets it: True drops it (the pod was killed there)."""
SALVAGE_TRIES = 8
"""Braces of a line that is not JSON from which a message is tried (noise before a message)."""


def salvage(line: bytes) -> tuple[object, bytes]:
    """A message after noise that had no newline of its own, and the noise; ``(None, line)`` if none."""
    start = line.find(b"{")
    for _ in range(SALVAGE_TRIES):
        if start < 0:
            break
        try:
            return orjson.loads(line[start:]), line[:start]
        except orjson.JSONDecodeError:
            start = line.find(b"{", start + 1)
    return None, line


@dataclass(eq=False)
class StdioChannel:
    """One stdio server process's pipes, as an MCP client sees them; it reads ``stdout`` from the start."""

    stdout: asyncio.StreamReader
    stdin: asyncio.StreamWriter
    _: KW_ONLY
    key_meta: str | None = None
    history: HistoryWriter | None = None
    name: str = "stdio"
    host: Host | None = None
    """What answers the server's requests and is declared in ``initialize``."""
    protocol: str | None = field(default=None, init=False)
    server_info: object = field(default=None, init=False)
    """What ``initialize`` said of the server (``serverInfo``: its name and version), as it sent it."""
    closed: bool = field(default=False, init=False)
    close_reason: str | None = field(default=None, init=False)
    """Why the channel broke while its process may live on (a line too long to read)."""
    on_close: Callable[[StdioChannel], None] | None = field(default=None, init=False)
    """Called once when stdout ends or breaks: the host's cue that this server is gone."""
    stray_lines: int = field(default=0, init=False)
    """Lines on stdout that were not JSON-RPC messages (a server logging to stdout)."""
    stray: str | None = field(default=None, init=False)
    """The last text on stdout that was not a message, as an excerpt."""
    garbled: str | None = field(default=None, init=False)
    """A line that mentions ``jsonrpc`` and is not JSON (an answer the server broke), as an excerpt."""
    _pending: dict[Any, asyncio.Future[dict[str, Any] | None]] = field(default_factory=dict, init=False)
    """Request id -> asked when its answer comes; True: the answer is dropped (the pod was killed)."""
    _progress: dict[Any, int] = field(default_factory=dict, init=False)
    _reading: asyncio.Future[None] = field(init=False)

    def __post_init__(self) -> None:
        self._reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while line := await self.stdout.readline():
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    msg = self._stray(line)
                if isinstance(msg, dict):
                    self._dispatch(msg)
        except ValueError:
            self.close_reason = "it wrote a line on stdout longer than the harness reads (64 MiB)"
        except OSError as exc:
            self.close_reason = f"its stdout broke: {exc.strerror or exc}"
        except asyncio.CancelledError:
            self.closed = True  # closed by us (aclose): not the server's doing
            raise
        finally:
            was_open, self.closed = not self.closed, True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_result(None)
            self._pending.clear()
            if was_open:
                self._lost()

    def _stray(self, line: bytes) -> object:
        """A line that is not JSON: noise to count and skip, or noise with a message after it."""
        msg, noise = salvage(line)
        if noise.strip():
            self.stray_lines += 1
            self.stray = excerpt(noise.decode(errors="replace"), 120)
        if msg is None and b'"jsonrpc"' in line:
            self.garbled = excerpt(line.decode(errors="replace"), 120)
            handshake = self._pending.get(HANDSHAKE_ID)
            if self.protocol is None and handshake is not None and not handshake.done():
                handshake.set_result(None)  # its answer came, unreadable: waiting longer is no use
        return msg

    def _lost(self) -> None:
        """The server's stdout ended: the session ends with it (recorded), and the host is told."""
        if self.history is not None and self.protocol is not None:
            self.history.emit(
                SessionLost(session=None, status=None, client=self.name, reason=self.close_reason)
            )
        if self.on_close is not None:
            self.on_close(self)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" not in msg:
            fut = self._pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            return
        if "id" not in msg:  # a notification: progress is counted for the request it is about
            params = msg.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if token in self._progress:
                self._progress[token] += 1
            return
        # A request from the server: answered as the host answers it; without one, ping only.
        method, params = msg["method"], msg.get("params")
        if self.host is not None:
            member = self.host.member(str(method), params if isinstance(params, dict) else {})
        elif method == "ping":
            member = {"result": {}}
        else:
            member = {"error": {"code": -32601, "message": f"mcp-chaos does not offer {method}"}}
        self._write({"jsonrpc": "2.0", "id": msg["id"], **member})

    def _write(self, msg: dict[str, Any]) -> bool:
        if self.closed or self.stdin.is_closing():
            return False
        try:
            self.stdin.write(orjson.dumps(msg) + b"\n")
        except (OSError, RuntimeError):
            return False
        return True

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        request_id: int,
        *,
        timeout: float,
        progress: bool = False,
        gate: Gate | None = None,
    ) -> CallResult:
        """One request and its response, classified like any other transport's. ``gate`` is asked when the
        answer comes, before the caller gets it: True drops it (the pod was killed there). It may wait
        (a hold): it is asked outside the call's timeout."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        if progress:
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": request_id}}
            self._progress[request_id] = 0
        self._pending[request_id] = fut
        try:
            if not self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}):
                return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED, form=_FORM)
            try:
                async with asyncio.timeout(timeout):
                    await self.stdin.drain()
                    msg = await fut
            except TimeoutError:
                self._write(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "timeout"},
                    }
                )
                return CallResult(Outcome.TIMEOUT, Detail.TIMEOUT_NO_RESPONSE, form=_FORM)
            except (OSError, RuntimeError):  # the pipe broke while we wrote
                return CallResult(Outcome.TRANSPORT_ERROR, Detail.CLOSED_BEFORE_RESPONSE, form=_FORM)
        finally:
            self._pending.pop(request_id, None)
            notifications = self._progress.pop(request_id, 0)
        if msg is not None and gate is not None and await gate():
            msg = None  # the pod was killed with the answer here: the client gets none of it
        if msg is None:  # the process went away with the request in flight: outcome unknown
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CLOSED_BEFORE_RESPONSE, form=_FORM)
        res = interpret_message(msg, request_id, status=None, form=_FORM)
        res.notifications = notifications
        return res

    async def initialize(self, *, timeout: float, version: str = SESSION_VERSIONS[0]) -> CallResult | None:
        """The handshake a host makes with a server it started; None on success."""
        params = {
            "protocolVersion": version,
            "capabilities": dict(self.host.capabilities) if self.host is not None else {},
            "clientInfo": {"name": "mcp-chaos", "version": __version__},
        }
        res = await self.request("initialize", params, HANDSHAKE_ID, timeout=timeout)
        if res.outcome is not Outcome.OK or res.result is None:
            return res
        chosen = res.result.get("protocolVersion")
        refused = refused_version(chosen, form=_FORM, spoken=STDIO_VERSIONS)
        if refused is not None:
            return refused
        self.protocol = str(chosen)
        self.server_info = res.result.get("serverInfo")
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if self.history is not None:
            self.history.emit(SessionOpened(session=None, version=self.protocol, client=self.name))
        return None

    async def call_tool(self, call: ToolCall, *, timeout: float, gate: Gate | None = None) -> CallResult:
        params = call.params()
        if call.key is not None and self.key_meta is not None:
            params["_meta"] = {self.key_meta: call.key}
        if call.traceparent is not None:  # no head to carry it: _meta only
            params["_meta"] = {**params.get("_meta", {}), "traceparent": call.traceparent}
        return await self.request(
            "tools/call", params, call.request_id, timeout=timeout, progress=call.request_progress, gate=gate
        )

    async def aclose(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading


class StdioClient:
    """The driver's client for a stdio target: each call goes to the pod's current channel; with crash
    points, the host is the call's hold site (``router``; ``lookup`` gives a request id's intent and
    attempt), as the fault proxy is an HTTP pod's."""

    def __init__(
        self,
        channel: Callable[[], StdioChannel | None],
        *,
        router: Router | None = None,
        lookup: Callable[[object], tuple[int, int] | None] | None = None,
    ) -> None:
        self._channel = channel
        self._router = router
        self._lookup = lookup

    async def call_tool(self, call: ToolCall, *, timeout: float) -> CallResult:
        channel = self._channel()
        if channel is None or channel.closed:
            # No process to write to (it is down): the call certainly did not reach a server.
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED, form=_FORM)
        where = self._lookup(call.request_id) if self._lookup is not None else None
        router = self._router
        if router is None or where is None:
            return await channel.call_tool(call, timeout=timeout)
        if not router.serving():  # killed before it was ready, the run would end: as a proxy, refuse it
            return CallResult(Outcome.TRANSPORT_ERROR, Detail.CONNECT_REFUSED, form=_FORM)
        router.opened(*where)
        try:
            door = Reached(Site.PROXY, PointKind.REQUEST, attempt=where)
            if await router.reached(door) is not Decision.PASS:  # killed at the door: nothing was sent
                return CallResult(Outcome.TRANSPORT_ERROR, Detail.CLOSED_BEFORE_RESPONSE, form=_FORM)

            async def gate() -> bool:
                back = Reached(Site.PROXY, PointKind.RESPONSE, attempt=where)
                return await router.reached(back) is not Decision.PASS

            return await channel.call_tool(call, timeout=timeout, gate=gate)
        finally:
            router.closed(*where)

    async def aclose(self) -> None:
        return None
