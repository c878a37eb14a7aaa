"""The effect sink: a downstream the target calls, so effects can be counted without its store.

For a black-box image (the harness cannot read its database) the sink stands in
for the payment or mail provider the server calls as its side effect. It is an
HTTP server on 127.0.0.1 (``{sink_url}``): every POST with a JSON body is one
effect, of the marker in ``marker_field``, appended to ``sink.jsonl`` in the run
directory with one unbuffered write, before it is acknowledged, so a
harness that dies loses nothing it confirmed. The auditor counts markers in
that file (``harness.audit.effects``); it never asks the target.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import BinaryIO

import httptools
import orjson

from harness import rundir
from harness.loopback import LoopbackServer

_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
_BAD = b'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok":false}'


class _Request:
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.body = bytearray()
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


class EffectSink(LoopbackServer):
    """Records every call as one effect line; answers 200 once the line is written."""

    def __init__(self, run_dir: Path, marker_field: str = "marker", port: int = 0) -> None:
        super().__init__(port)
        self.path = run_dir / rundir.SINK
        self.marker_field = marker_field
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

    def _record(self, body: bytes) -> bool:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return False
        marker = payload.get(self.marker_field) if isinstance(payload, dict) else None
        if not isinstance(marker, str) or self._file is None:
            return False
        line = {"t": round(time.monotonic() - self._t0, 6), "marker": marker}
        self._file.write(orjson.dumps(line) + b"\n")
        return True

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(httptools.HttpParserError):
            while True:
                request = _Request()
                while not request.complete:
                    data = await reader.read(65536)
                    if not data:
                        return
                    request.parser.feed_data(data)
                writer.write(_OK if self._record(bytes(request.body)) else _BAD)
                await writer.drain()
