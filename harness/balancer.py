"""A real load balancer in front of the replicas: nginx, started by the harness on 127.0.0.1.

A balancer with a retry policy is itself a source of duplicates: when a backend
dies after it got a POST, nginx's ``proxy_next_upstream ... non_idempotent``
sends the same request to the next backend, and the client sees one success for
two effects. nginx's default (``error timeout``, without ``non_idempotent``)
re-sends a POST only if it never reached a backend. The harness writes the
configuration into the run directory, runs nginx in the foreground in its own
process group (the watchdog knows it), and stops it with the run.

What nginx did is read back from its access log, written as JSON lines: the
JSON-RPC id of each request (from its body) and every upstream it tried. A
request that went to more than one upstream is a ``balancer_retry`` of the
attempt with that id (:func:`record_retries`), recorded in the history once
nginx has stopped. The wiring (:mod:`harness.run.wiring`) starts and stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import rundir
from harness.errors import TargetStartError
from harness.events import BalancerRetry
from harness.history import EventType, HistoryWriter, read_history
from harness.pods.process import start_logged, wait_up
from harness.pods.watchdog import guard

NEXT_UPSTREAM = {
    "default": "error timeout",
    "non_idempotent": "error timeout non_idempotent",
    "off": "off",
}
"""``services.balancer.retry`` -> nginx's ``proxy_next_upstream``."""

ACCESS_LOG = "access.jsonl"


@dataclass(frozen=True, slots=True)
class Resend:
    """A request nginx sent again to another upstream after an earlier one had received it."""

    request_id: object
    upstreams: list[str]
    statuses: list[str]


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None:
        raise TargetStartError(
            "services.balancer needs nginx: install it, e.g. apt-get install -y nginx-light"
        )
    return found


class Nginx:
    """nginx for one run: round-robin over ``upstreams`` (127.0.0.1 ports), listening on ``port``."""

    def __init__(
        self,
        run_dir: Path,
        upstreams: list[int],
        port: int,
        retry: str,
        *,
        max_fails: int = 1,
        fail_timeout_s: float = 10.0,
    ) -> None:
        self.dir = run_dir / rundir.BALANCER
        self.upstreams = upstreams
        self.port = port
        self.retry = retry
        self.max_fails = max_fails
        self.fail_timeout_s = fail_timeout_s
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def config(self) -> str:
        d = self.dir
        health = f"max_fails={self.max_fails} fail_timeout={self.fail_timeout_s:g}s"
        servers = "\n".join(f"    server 127.0.0.1:{p} {health};" for p in self.upstreams)
        user = "user root;\n" if os.geteuid() == 0 else ""
        return f"""# Written by mcp-chaos for one run: nginx's defaults but the retry policy and health check.
# max_fails={self.max_fails}, fail_timeout={self.fail_timeout_s:g}s (nginx's own: 1, 10s).
{user}worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  log_format chaos escape=json '{{"t":$msec,"status":"$status","upstreams":"$upstream_addr",'
                               '"upstream_status":"$upstream_status","sent":"$upstream_bytes_sent",'
                               '"body":"$request_body"}}';
  client_body_buffer_size 1m;  # $request_body (the JSON-RPC id) is logged only from memory
  client_max_body_size 16m;
  access_log {d}/{ACCESS_LOG} chaos;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  upstream replicas {{
{servers}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;  # servers that guard against DNS rebinding check it
      proxy_buffering off;
      proxy_read_timeout 3600s;
      proxy_next_upstream {NEXT_UPSTREAM[self.retry]};
    }}
  }}
}}
"""

    async def start(self, timeout_s: float = 10.0) -> None:
        binary = nginx_binary()
        (self.dir / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.dir / "nginx.conf"
        conf.write_text(self.config(), encoding="utf-8")
        self._proc = await start_logged(
            [
                binary,
                "-p",
                str(self.dir),
                "-c",
                str(conf),
                "-e",
                str(self.dir / "error.log"),
                "-g",
                "daemon off;",
            ],
            self.dir / "nginx.out",
        )
        guard.group(self._proc.pid)
        await wait_up(
            self._proc,
            "nginx",
            "listening",
            self._listening,
            timeout_s=timeout_s,
            poll_s=0.05,
            tail=self._tail,
        )

    async def _listening(self) -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        return True

    def _tail(self) -> str:
        lines: list[str] = []
        for name in ("nginx.out", "error.log"):
            with contextlib.suppress(OSError):
                lines += (self.dir / name).read_text(errors="replace").splitlines()[-10:]
        return "\n".join(lines) or "(no log)"

    async def stop(self) -> None:
        """Fast shutdown (SIGTERM), SIGKILL after 10 s; the access log is complete afterwards."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        guard.ungroup(proc.pid)

    def resends(self) -> list[Resend]:
        """Requests nginx re-sent after an upstream had received them, from its access log.

        A request whose earlier upstreams all refused the connection (0 bytes sent) went to
        the next one without reaching a replica: it cannot have taken effect twice.
        """
        found = []
        try:
            lines = (self.dir / ACCESS_LOG).read_bytes().splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                entry = orjson.loads(line)
                upstreams = [u.strip() for u in entry["upstreams"].split(",") if u.strip()]
                sent = [s.strip() for s in str(entry.get("sent", "")).split(",")]
                if len(upstreams) < 2 or not any(s.isdigit() and int(s) > 0 for s in sent[:-1]):
                    continue
                request_id = orjson.loads(entry["body"]).get("id")
            except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError):
                continue  # not a JSON-RPC request (a probe, a GET), or a torn last line
            statuses = [s.strip() for s in str(entry.get("upstream_status", "")).split(",")]
            found.append(Resend(request_id, upstreams, statuses))
        return found


def retries(
    resends: Sequence[Resend], events: Iterable[dict[str, Any]], pods: Mapping[str, str]
) -> Iterator[dict[str, Any]]:
    """The ``balancer_retry`` fields of each attempt nginx re-sent, matched by its JSON-RPC id.

    The driver's ids are integers unique within a run, so an id names one
    attempt: the ``attempt_started`` that carries it. Upstream addresses are
    named by ``pods`` (``127.0.0.1:<port>`` -> ``pod-<i>``) where known.
    """
    pending = {r.request_id: r for r in resends if isinstance(r.request_id, int)}
    if not pending:
        return
    for ev in events:
        if ev["type"] == EventType.ATTEMPT_STARTED and ev["id"] in pending:
            r = pending.pop(ev["id"])
            yield {
                "intent": ev["intent"],
                "attempt": ev["attempt"],
                "id": ev["id"],
                "upstreams": [pods.get(u, u) for u in r.upstreams],
                "statuses": r.statuses,
            }
            if not pending:
                return


def record_retries(nginx: Nginx, history: HistoryWriter, pods: Mapping[str, str]) -> None:
    """Append a ``balancer_retry`` to the history for each attempt a stopped nginx re-sent."""
    for fields in retries(nginx.resends(), read_history(history.path), pods):
        history.emit(BalancerRetry(**fields))
