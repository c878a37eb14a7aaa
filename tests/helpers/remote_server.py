"""A reference target started outside the harness, as a deployment's tooling would: ``start`` and ``kill``.

Run as a script, it is what a ``target.url`` scenario's ``restart_command`` and ``kill_command`` call in
the tests (``docker compose start app`` and ``docker compose kill app`` to a user)::

    python remote_server.py start STATE_DIR   # start the invoices server detached; exits at once
    python remote_server.py kill STATE_DIR    # SIGKILL it; exits once it is gone

``STATE_DIR`` holds ``server.json`` (its port, environment and database, written by the test fixture),
``server.pid`` (the running instance) and ``server.log``. The server is started in a session of its
own, so it outlives this script and the harness that ran it, as a compose service outlives
``docker compose start``; it always listens on the same port, so the URL the scenario names stays
true. Imports only the standard library: the harness runs it as any user command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

INVOICES = Path(__file__).resolve().parents[2] / "targets" / "invoices" / "server.py"


def _gone(pid: int) -> bool:
    """Whether the process is gone (a zombie, reparented to a parent that has not reaped it yet, is)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def start(state: Path) -> int:
    config = json.loads((state / "server.json").read_text())
    env = {**os.environ, "PORT": str(config["port"]), **config["env"]}
    with open(state / "server.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, str(INVOICES)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (state / "server.pid").write_text(str(proc.pid))
    print(f"started invoices server pid {proc.pid} on port {config['port']}")
    return 0


def kill(state: Path) -> int:
    pid_file = state / "server.pid"
    if not pid_file.exists():
        print("no server is running", file=sys.stderr)
        return 1
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGKILL)  # its session's group: anything it started goes too
    except ProcessLookupError:
        print(f"server pid {pid} was not running", file=sys.stderr)
        return 1
    while not _gone(pid):  # the harness bounds how long this may take (target.command_timeout_s)
        time.sleep(0.01)
    pid_file.unlink()
    print(f"killed invoices server pid {pid}")
    return 0


if __name__ == "__main__":
    action, state_dir = sys.argv[1], Path(sys.argv[2])
    sys.exit({"start": start, "kill": kill}[action](state_dir))
