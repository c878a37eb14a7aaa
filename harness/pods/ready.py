"""When is a pod ready: the readiness check for each transport, as the supervisor uses it.

HTTP: the pod answers MCP at its URL (``harness.client.readiness``), in the
scenario's protocol; with ``auto`` the first answer fixes the protocol for the
rest of the run, so a restarted pod is asked in the protocol it spoke before.
stdio: the pod's process takes the ``initialize`` handshake on its pipes; the
channel that did it is the one the driver then uses, until the process dies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol
from urllib.parse import urlsplit

from harness.client.host import Host
from harness.client.oauth import OAuthTokens
from harness.client.readiness import Readiness, Refused, wait_ready
from harness.client.stdio import StdioChannel
from harness.history import HistoryWriter, Outcome
from harness.pods.pod import Pod
from harness.pods.remote import UrlPod
from harness.proctree import listening


class ReadyCheck(Protocol):
    def describe(self) -> str:
        """What "ready" means here, for messages: "answer server/discover at URL"."""
        ...

    async def wait(self, pod: Pod, *, timeout_s: float, alive: Callable[[], bool]) -> Readiness: ...

    async def close(self) -> None: ...


class HttpReady:
    """Ready when the pod answers ``server/discover`` or ``initialize`` at its URL."""

    def __init__(
        self,
        url: str,
        *,
        protocol: str,
        headers: Mapping[str, str],
        auth: OAuthTokens | None = None,
        port_env: str = "PORT",
    ) -> None:
        self.url = url
        self.port_env = port_env
        """The variable the pod's port is handed in (``target.port_env``), for the message of a server
        that listens elsewhere."""
        self.waits = 0
        """Starts waited for so far: the first of a ``target.url`` server is one nothing the harness ran
        started."""
        self.auth = auth
        """``target.auth``'s tokens: a probe's 401 is answered as any request's is."""
        self.protocol = protocol
        """What to ask in: the scenario's setting until a pod first answered, then what it spoke."""
        self.headers = dict(headers)

    def describe(self) -> str:
        probe = {"auto": "server/discover or initialize", "2026-07-28": "server/discover"}
        return f"answer {probe.get(self.protocol, 'initialize')} at {self.url}"

    async def wait(self, pod: Pod, *, timeout_s: float, alive: Callable[[], bool]) -> Readiness:
        readiness = await wait_ready(
            self.url,
            timeout_s=timeout_s,
            protocol=self.protocol,
            headers=self.headers,
            alive=alive,
            auth=self.auth,
            refused=self._refused(pod),
        )
        self.waits += 1
        if readiness.ready and readiness.protocol is not None:
            self.protocol = readiness.protocol
        return readiness

    def _refused(self, pod: Pod) -> Refused | None:
        """Why a refused connection will stay so: a ``target.url`` server at its first start (the
        harness starts nothing there), or a pod whose processes listen, but on other addresses than the
        URL's (a server that ignores the port it was handed); None: it may yet listen (a restart command
        ran, a pod on no machine of ours)."""
        parts = urlsplit(self.url)
        if isinstance(pod, UrlPod):
            if self.waits:
                return None
            return lambda: (
                f"connection refused: nothing listens on {parts.hostname}:{parts.port}, and the harness "
                "does not start a target.url server: start it first, or check target.url"
            )
        port_env = self.port_env
        since: list[float] = []

        def elsewhere() -> str | None:
            pid = pod.pid
            where = listening(pid) if pid else []
            if not where or any(p == parts.port and a in TAKES_LOOPBACK for a, p in where):
                since.clear()
                return None
            since[:] = since or [time.monotonic()]
            if time.monotonic() - since[0] < ELSEWHERE_S:
                return None
            said = ", ".join(f"[{a}]:{p}" if ":" in a else f"{a}:{p}" for a, p in where)
            return (
                f"connection refused on {parts.hostname}:{parts.port}, and it listens on {said} instead: "
                f"start it on the port it is handed (${port_env}, or {{port}} in target.command), "
                f"on 127.0.0.1 or 0.0.0.0; or name the variable it reads in target.port_env"
            )

        return elsewhere

    async def close(self) -> None:
        return None


ELSEWHERE_S = 5.0
"""How long a pod must listen only elsewhere before that is its answer: a server may open another port
(metrics, a debugger) before the one it serves MCP on."""
TAKES_LOOPBACK = frozenset({"127.0.0.1", "0.0.0.0", "::"})
"""Listening addresses a connection to 127.0.0.1 reaches (``::`` where IPv6 sockets take IPv4 too)."""


class StdioPod(Pod, Protocol):
    def stdio(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]: ...


class StdioReady:
    """Ready when the pod's process takes the ``initialize`` handshake on its stdin and stdout."""

    def __init__(self, *, history: HistoryWriter, key_meta: str | None, host: Host | None = None) -> None:
        self.history = history
        self.key_meta = key_meta
        self.host = host
        """What answers the server's requests on each channel (:mod:`harness.client.host`)."""
        self.channel: StdioChannel | None = None
        """The channel of the current process, once it is initialized."""

    def describe(self) -> str:
        return "answer initialize on its stdin and stdout"

    async def wait(self, pod: Pod, *, timeout_s: float, alive: Callable[[], bool]) -> Readiness:
        assert hasattr(pod, "stdio"), "a stdio target runs as a process pod with pipes"
        stdio_pod: StdioPod = pod  # type: ignore[assignment]
        await self.close()
        started = time.monotonic()
        stdout, stdin = stdio_pod.stdio()
        channel = StdioChannel(
            stdout, stdin, key_meta=self.key_meta, history=self.history, name="stdio", host=self.host
        )

        # A channel that breaks while its process lives on (an unreadable line) is a dead server to
        # a host: the process is killed, the supervisor records the exit and starts it again.
        def broken(closed: StdioChannel) -> None:
            if closed.close_reason is not None:
                pod.kill()

        channel.on_close = broken
        # A server reads its stdin when it is ready: one handshake, waited on for the whole timeout.
        failed = await channel.initialize(timeout=timeout_s)
        after = time.monotonic() - started
        if failed is None:
            self.channel = channel
            return Readiness(True, after, protocol=channel.protocol)
        ended = channel.closed  # before aclose, which closes it too
        await channel.aclose()
        if channel.close_reason is not None:
            return Readiness(False, after, last=failed, fatal=channel.close_reason)
        if channel.garbled is not None:
            fatal = f"it printed a line that mentions jsonrpc but is not JSON: {channel.garbled!r}"
            return Readiness(False, after, last=failed, fatal=fatal)
        if channel.stray is not None and failed.outcome is Outcome.TIMEOUT:
            said = f"it printed {channel.stray!r} on stdout, where only JSON-RPC may go, and nothing else"
            failed = replace(failed, message=said)
        if failed.outcome is Outcome.PROTOCOL_ERROR:
            fatal = f"it answered {failed.message or failed.detail} to initialize"
            return Readiness(False, after, last=failed, fatal=fatal, exited=ended or not alive())
        return Readiness(False, after, last=failed, exited=ended or not alive())

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.aclose()
            self.channel = None
