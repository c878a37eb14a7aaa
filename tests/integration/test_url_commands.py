"""The commands of a server the harness does not start (``target.kill_command``, ``restart_command``), run
by real shells: the values they are given are data, never code."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from harness.pods.factory import user_command
from harness.pods.remote import UrlPod

pytestmark = pytest.mark.integration

CODE = "$(touch pwned-dollar) `touch pwned-backquote` \"; touch pwned-quote; \" '; touch pwned-single; '"
"""A value that runs ``touch`` wherever a shell reads it as code, whatever the quotes around it."""


def url_pod(
    tmp_path: Path,
    kill: str | list[str] | None,
    restart: str | list[str] | None = None,
    *,
    run_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> UrlPod:
    """The pod of a url target whose server nothing here runs: only its commands are real."""
    environ = {**os.environ, **(env or {})}
    run_dir = run_dir or tmp_path / "run"
    return UrlPod(
        "pod-0",
        url="http://127.0.0.1:9/mcp",
        kill=user_command(kill, "target.kill_command", run_dir, environ),
        restart=user_command(restart, "target.restart_command", run_dir, environ),
        env=environ,
        log_path=tmp_path / "pod-0.log",
        timeout_s=60,
    )


async def kill_once(pod: UrlPod) -> int:
    """Reach the pod, run its kill command, wait for it to exit."""
    await pod.start()
    assert pod.kill()
    return await pod.wait()


def pwned(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith("pwned"))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The commands run in ``tmp_path`` (a ``touch`` that runs leaves its file there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_shell_line_gets_the_run_directory_and_variables_as_data(in_tmp: Path) -> None:
    """A results path holding ``$(...)`` ran it, and a variable holding ``"; ...`` too; now each value
    arrives whole, in every place of the line a shell reads differently, and nothing runs."""
    run_dir = in_tmp / f"results {CODE}"
    line = (
        "printf '%s\\n' {run_dir} \"{run_dir}\" '{run_dir}' ${SECRET} \"${SECRET}\" '${SECRET}' "
        "x{run_dir}y \"$(printf '%s' '{run_dir}')\" > seen; "
        "sub=`printf '%s' {run_dir}`; printf '%s\\n' \"$sub\" >> seen "
        "# {run_dir} it's the log's line, and a comment"
    )
    pod = url_pod(in_tmp, line, run_dir=run_dir, env={"SECRET": f"s3cret {CODE}"})
    assert asyncio.run(kill_once(pod)) == -1
    assert pwned(in_tmp) == []
    where, secret = str(run_dir.resolve()), f"s3cret {CODE}"
    assert (in_tmp / "seen").read_text().splitlines() == [
        *[where] * 3,
        *[secret] * 3,
        f"x{where}y",
        where,
        where,
    ]
    assert pod.kill_command is not None
    assert "s3cret" not in " ".join(pod.kill_command.argv)  # in the command's environment only


def test_an_argv_command_gets_each_value_as_one_word(in_tmp: Path) -> None:
    run_dir = in_tmp / f"results {CODE}"
    write = "import json, sys; open('seen', 'w').write(json.dumps(sys.argv[1:]))"
    argv = ["{python}", "-c", write, "{run_dir}", "${SECRET}", "x{run_dir}"]
    pod = url_pod(in_tmp, argv, run_dir=run_dir, env={"SECRET": CODE})
    asyncio.run(kill_once(pod))
    where = str(run_dir.resolve())
    assert json.loads((in_tmp / "seen").read_text()) == [where, CODE, f"x{where}"]
    assert pwned(in_tmp) == []


def test_the_python_placeholder_runs_the_harness_interpreter_in_a_shell_line(in_tmp: Path) -> None:
    """The documented placeholders still work in a shell line: ``{python}`` is a command word there."""
    pod = url_pod(in_tmp, "{python} -c 'import sys; print(sys.executable)' > seen")
    asyncio.run(kill_once(pod))
    assert (in_tmp / "seen").read_text().strip() == sys.executable
