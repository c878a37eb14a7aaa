"""The effect sink: a downstream the target calls, so effects can be counted without its store.

For a black-box image (the harness cannot read its database) the sink stands in
for the payment or mail provider the server calls as its side effect. It is an
HTTP server on 127.0.0.1 (``{sink_url}``): every POST with a JSON body is one
effect, of the marker in ``marker_field``, appended to ``sink.jsonl`` in the run
directory with one unbuffered write, before it is acknowledged, so a
harness that dies loses nothing it confirmed. The auditor counts markers in
that file (``harness.audit.effects``); it never asks the target.

Each record also keeps the call's idempotency key (the ``Idempotency-Key``
header, else an ``idempotency_key`` field of the body), the way a payment
provider sees it. With ``dedupe_by_key`` the sink behaves like one: a call whose
key it has seen is answered as the first was and recorded as a replay, which is
not an effect. So a server that forwards its key downstream is told apart from
one that does not. Each recorded call is the ``downstream`` point of the run's decision router
(``harness.crashpoints.router``): for crash points its reply may be held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import httptools
import orjson

from harness import rundir
from harness.crashpoints.decisions import Decision, Reached, Site
from harness.crashpoints.points import PointKind
from harness.crashpoints.router import Router
from harness.loopback import LoopbackServer

_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
_BAD = b'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok":false}'


KEY_HEADER = b"idempotency-key"
KEY_FIELD = "idempotency_key"


class _Request:
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.body = bytearray()
        self.key: str | None = None
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == KEY_HEADER:
            self.key = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


class EffectSink(LoopbackServer):
    """Records every call as one effect line; answers 200 once the line is written."""

    def __init__(
        self,
        run_dir: Path,
        marker_field: str = "marker",
        port: int = 0,
        *,
        dedupe_by_key: bool = False,
        redact: Callable[[str], str] = str,
        router: Router | None = None,
    ) -> None:
        super().__init__(port)
        self.redact = redact
        """The scenario's secrets hidden: a server may send its token as the key (the record keeps it so)."""
        self.path = run_dir / rundir.SINK
        self.marker_field = marker_field
        self.dedupe_by_key = dedupe_by_key
        self.router = router
        """Where each recorded call is reported (the ``downstream`` point), and may be held."""
        self._keys: set[str] = set()
        self._file: BinaryIO | None = None
        self._t0 = time.monotonic()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/effects"

    async def start(self, port: int | None = None) -> int:
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        return await super().start(port)

    async def close(self) -> None:
        await super().close()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _record(self, request: _Request) -> tuple[str | None, bool] | None:
        """Write the call's line; (its key, whether it was a replay), or None for a call without a marker."""
        try:
            payload = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return None
        marker = payload.get(self.marker_field) if isinstance(payload, dict) else None
        if not isinstance(marker, str) or self._file is None:
            return None
        key = request.key
        if key is None and isinstance(payload.get(KEY_FIELD), str):
            key = payload[KEY_FIELD]
        line: dict[str, object] = {"t": round(time.monotonic() - self._t0, 6), "marker": marker}
        if key is not None:
            line["key"] = self.redact(key)
        replayed = self.dedupe_by_key and key is not None and key in self._keys
        if replayed:
            line["replay"] = True
        elif key is not None and self.dedupe_by_key:
            self._keys.add(key)
        self._file.write(orjson.dumps(line) + b"\n")
        return key, replayed

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        router = self.router
        connection = None if router is None else router.connection()
        with contextlib.suppress(httptools.HttpParserError):
            while True:
                request = _Request()
                while not request.complete:
                    data = await reader.read(65536)
                    if not data:
                        return
                    request.parser.feed_data(data)
                if router is not None and router.cut(connection):
                    return  # a call from a pod killed at a crash point: it never reached us
                recorded = self._record(request)
                if recorded is not None and router is not None:
                    key, replayed = recorded
                    point = Reached(
                        Site.SINK,
                        PointKind.DOWNSTREAM,
                        connection=connection,
                        detail={"key": key, "replayed": replayed},
                        payload=bytes(request.body),
                    )
                    if await router.reached(point) is not Decision.PASS:
                        await reader.read()  # held: no reply; the pod dies and its connection with it
                        return
                writer.write(_OK if recorded is not None else _BAD)
                await writer.drain()
