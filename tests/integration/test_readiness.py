"""Readiness against servers that answer wrongly: never mistaken for ready, never waited on forever."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import mcp_chaos_process
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

# A real HTTP server (a child process, like any target) that answers every POST with BODY, either
# at once or as an event stream that never ends.
SERVER = """
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
BODY, ENDLESS = sys.argv[1].encode(), sys.argv[2] == "endless"
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        if ENDLESS:
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            while True:
                self.wfile.write(b": still here\\n\\n")
                self.wfile.flush()
                time.sleep(0.2)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
ERROR_SAYING_RESULT = '{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no \\"result\\" for you"}}'


def run_against(tmp_path: Path, body: str, mode: str, ready_timeout_s: float) -> tuple[int, str, float]:
    data = invoice_scenario()
    literal = body.replace("{", "{{").replace("}", "}}")  # braces in a command are placeholders
    data["target"]["command"] = ["{python}", "-c", SERVER, literal, mode]
    data["target"]["ready_timeout_s"] = ready_timeout_s
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    # A real process: its timeout fails the test if a regression lets the wait hang.
    proc = mcp_chaos_process("run", str(path), "--results", str(tmp_path / "r"), timeout=120)
    return proc.returncode, proc.stderr, time.monotonic() - started


def test_an_error_that_mentions_result_is_not_ready(tmp_path: Path) -> None:
    code, err, elapsed = run_against(tmp_path, ERROR_SAYING_RESULT, "json", 30)
    assert code == 3
    assert "did not answer server/discover or initialize" in err
    assert 'it answered JSON-RPC error -32601: no "result" for you to initialize' in err
    assert elapsed < 15  # a definitive wrong answer ends the wait: not the 30 s ready_timeout_s


def test_an_answer_that_never_ends_cannot_hold_readiness(tmp_path: Path) -> None:
    code, err, elapsed = run_against(tmp_path, "", "endless", 3)
    assert code == 3
    assert "did not answer server/discover" in err
    assert elapsed < 3 + 10  # the deadline bounds the whole wait, probes included


BUSY_THEN_SILENT = """
import os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
seen = []
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen.append(1)
        if len(seen) > 2:
            time.sleep(30)  # from the third request on: no answer at all
        self.send_response(429)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def test_what_the_server_last_said_survives_a_probe_that_got_no_answer() -> None:
    # Deterministically what happened by chance when the deadline cut the last probe: a 429, then
    # a probe that timed out. The 429 is what to report; "timeout" would hide why it was not ready.
    import asyncio

    from harness.client.readiness import wait_ready
    from harness.loopback import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", BUSY_THEN_SILENT], env={**os.environ, "PORT": str(port)})
    try:
        readiness = asyncio.run(wait_ready(f"http://127.0.0.1:{port}/mcp", timeout_s=4, probe_timeout_s=1))
    finally:
        server.kill()
        server.wait()
    assert not readiness.ready
    assert readiness.last is not None
    assert readiness.last.status == 429


# -- connections refused for good: said at once, with where the server is instead

ELSEWHERE = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)  # $PORT ignored: a port of its own
print("listening on", server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_server_that_listens_on_another_port_is_found_there(tmp_path: Path) -> None:
    data = invoice_scenario()
    data["target"]["command"] = ["{python}", "-c", ELSEWHERE]
    data["target"]["ready_timeout_s"] = 60  # told at once: the wait is not what ends it
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = mcp_chaos_process("validate", "--preflight", str(path), timeout=120)
    assert proc.returncode == 3, proc.stderr
    first = next(line for line in proc.stderr.splitlines() if line.startswith("mcp-chaos: error:"))
    port = next(line.split()[-1] for line in proc.stderr.splitlines() if "listening on" in line)
    assert f"and it listens on 127.0.0.1:{port} instead" in first, first
    assert "start it on the port it is handed ($PORT, or {port} in target.command)" in first
    assert "raise target.ready_timeout_s" not in first


def test_a_url_with_nothing_listening_is_said_to_refuse_at_once(tmp_path: Path) -> None:
    from harness.loopback import free_port

    data = invoice_scenario()
    del data["target"]["command"]
    data["target"].pop("env", None)
    data["target"]["url"] = f"http://127.0.0.1:{free_port()}/mcp"
    data["target"]["ready_timeout_s"] = 60
    data["faults"] = {}
    data["audit"] = {
        "effects": {"sql": {"url": "sqlite:////nonexistent/x.db", "query": "SELECT 1 AS marker"}}
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = mcp_chaos_process("validate", "--preflight", str(path), timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "connection refused: nothing listens on 127.0.0.1:" in proc.stderr, proc.stderr
    assert (
        "the harness does not start a target.url server: start it first, or check target.url" in proc.stderr
    )
    assert "within 60s" not in proc.stderr


def test_init_at_a_url_with_nothing_listening_says_so_at_once(tmp_path: Path) -> None:
    from harness.loopback import free_port

    port = free_port()
    proc = mcp_chaos_process(
        "init", "--url", f"http://127.0.0.1:{port}/mcp", "-o", str(tmp_path / "s.yaml"), timeout=120
    )
    assert proc.returncode == 3, proc.stderr
    assert (
        f"connection refused: nothing listens on 127.0.0.1:{port} (init --url reaches a server" in proc.stderr
    )
    assert "within 30s: no answer" not in proc.stderr


def test_the_addresses_a_process_tree_listens_on_are_read_from_proc() -> None:
    import socket

    from harness.proctree import listening

    code = (
        "import socket,time\ns=socket.socket(socket.AF_INET6)\n"
        "s.bind(('::1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            with socket.create_server(("127.0.0.1", 0)) as own:
                assert ("::1", port) in listening(child.pid)
                assert ("127.0.0.1", own.getsockname()[1]) not in listening(child.pid)  # not the child's
        finally:
            child.kill()
