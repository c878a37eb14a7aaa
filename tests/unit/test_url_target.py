"""``target.url``: a server the harness does not start. What it accepts, what it refuses (one line each,
naming the fix), how its commands are made ready to run, and the ``Host`` a fault proxy sends it."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ScenarioError
from harness.faults.proxy import with_host
from harness.pods.factory import make_pod, user_command
from harness.pods.remote import UrlPod
from harness.scenario import load_scenario, parse_scenario
from harness.scenario.target import http_endpoint

URL: dict[str, Any] = {
    "name": "remote",
    "target": {
        "url": "http://staging.example:8080/mcp?tenant=a",
        "kill_command": ["docker", "compose", "kill", "app"],
        "restart_command": "docker compose start app",
    },
    "workload": {"intents": 3, "tool": "create_invoice", "arguments": {"memo": "{marker}"}},
    "faults": {"kill": {"count": 1}, "stream": [{"fault": "sever_response", "probability": 0.1}]},
    "audit": {"effects": {"tool": {"tool": "count_invoices"}}},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(URL)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return data


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="s.yaml")
    assert "\n" not in info.value.message
    return info.value.message


def test_a_url_target_with_stream_faults_and_kills() -> None:
    scenario = parse_scenario(copy.deepcopy(URL))
    target = scenario.target
    assert target.runtime == "url"
    assert target.endpoint_path == "/mcp?tenant=a"  # what the client sends the fault proxy
    assert scenario.faults.kill is not None
    assert scenario.faults.stream


def test_stream_faults_alone_need_no_kill_command() -> None:
    data = with_("faults.kill", None)
    data["target"] = {"url": "http://staging.example:8080/mcp"}  # any host: users test what they run
    assert parse_scenario(data).target.kill_command is None


@pytest.mark.parametrize(
    ("faults", "first"),
    [
        ({"kill": {"count": 2}}, "faults.kill kills the server"),
        ({"crash_points": {"holds": [{"at": "response"}]}}, "faults.crash_points kills the server"),
    ],
)
def test_pod_faults_without_a_kill_command_are_refused_with_the_reason(
    faults: dict[str, Any], first: str
) -> None:
    data = with_("faults", faults)
    data["target"] = {"url": "http://127.0.0.1:8080/mcp"}
    if "crash_points" in faults:
        data["workload"]["concurrency"] = 1
    assert error_of(data) == (
        f"s.yaml: (top level): {first}, and with target.url the harness did not start it and has no way "
        "to kill it: give target.kill_command (e.g. [docker, compose, kill, app]; and "
        "target.restart_command if nothing restarts it), or drop the fault and use faults.stream"
    )


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("target.command", ["python", "server.py"], "target.command does not go with target.url"),
        ("target.image", "x:1", "target.image does not go with target.url"),
        ("target.env", {"A": "1"}, "target.env does not go with target.url"),
        ("target.path", "/other", "target.path does not go with target.url"),
        ("target.replicas", 2, "target.replicas does not go with target.url"),
        ("target.transport", "stdio", "target.url needs transport: http"),
        ("target.url", "https://staging.example/mcp", "target.url must be http://HOST:PORT/PATH"),
        ("target.url", "http://staging.example/mcp", "target.url must be http://HOST:PORT/PATH"),
        ("target.kill_command", [], "target.kill_command is empty"),
        ("target.kill_command", ["kill", "{port}"], "target.kill_command: unknown placeholder {port}"),
        ("target.kill_command", None, "target.restart_command starts the server again after"),
        ("faults.pause", {"count": 1, "duration_s": 1}, "faults.pause freezes a process the harness runs"),
        ("faults.rollout", {"count": 1}, "faults.rollout replaces replicas the harness runs"),
        ("faults.kill.signal", "SIGTERM", "target.kill_command decides how the server dies"),
        ("services.postgres", {}, "a server that already runs cannot be given them"),
        ("audit.effects", {"sink": {}}, "audit.effects.sink and services.downstream listen on ports"),
    ],
)
def test_what_a_url_target_refuses(path: str, value: Any, expected: str) -> None:
    assert expected in error_of(with_(path, value))


def test_commands_are_for_a_url_target_only() -> None:
    data = with_("target", {"command": ["python", "server.py"], "kill_command": ["pkill", "x"]})
    assert "target.kill_command and restart_command are for a server the harness does not start" in (
        error_of(data)
    )


def test_commands_are_argv_or_a_shell_line_with_placeholders_and_variables(tmp_path: Path) -> None:
    env = {"APP": "invoices", "TOKEN": "s3cr3t-value"}
    argv = user_command(["{python}", "stop.py", "${APP}", "{run_dir}"], "target.kill_command", tmp_path, env)
    assert argv is not None
    assert argv.argv == [sys.executable, "stop.py", "invoices", str(tmp_path.resolve())]
    assert argv.written == "{python} stop.py ${APP} {run_dir}"  # what the log shows: no expanded value
    line = user_command("cloud kill --token ${TOKEN} $HOME", "target.kill_command", tmp_path, env)
    assert line is not None
    # The shell line refers to the value, which its environment holds: no shell ever parses it.
    assert line.argv == ["/bin/sh", "-c", 'cloud kill --token "${MCP_CHAOS_ENV_TOKEN}" $HOME']
    assert line.env == {"MCP_CHAOS_ENV_TOKEN": "s3cr3t-value"}
    assert "s3cr3t" not in line.written


@pytest.mark.parametrize(
    ("written", "line"),
    [
        ("stop {run_dir}", 'stop "${R}"'),
        ('stop "{run_dir}/x"', 'stop "${R}/x"'),
        ("stop '{run_dir}/x'", "stop ''\"${R}\"'/x'"),
        ("stop x{run_dir}y ${TOKEN}", 'stop x"${R}"y "${T}"'),
        ("echo it\\'s {run_dir}", 'echo it\\\'s "${R}"'),  # an escaped quote opens nothing
        ('echo "it\\"s" {run_dir}', 'echo "it\\"s" "${R}"'),
        ("echo \"$(cat '{run_dir}')\" '$(' {run_dir}", "echo \"$(cat ''\"${R}\"'')\" '$(' \"${R}\""),
        ('echo "$( (cd {run_dir}) )" {run_dir}', 'echo "$( (cd "${R}") )" "${R}"'),
        ('x=`ls {run_dir}`; echo "`ls {run_dir}`"', 'x=`ls "${R}"`; echo "`ls "${R}"`"'),
        ("stop # it's {run_dir}\necho {run_dir}", 'stop # it\'s ${R}\necho "${R}"'),
        ("stop{run_dir}#'{run_dir}'", "stop\"${R}\"#''\"${R}\"''"),  # a # inside a word starts no comment
    ],
)
def test_a_shell_line_refers_to_each_value_as_its_quoting_needs(written: str, line: str) -> None:
    """Outside quotes a reference is one double-quoted word, inside double quotes a bare reference, inside
    single quotes one with the quotes closed around it; command substitutions have quoting of their own,
    comments none. (The shells' own reading of these lines: tests/integration/test_url_commands.py.)"""
    env = {"TOKEN": "t"}
    command = user_command(written, "target.kill_command", Path("/r"), env)
    assert command is not None
    short = command.argv[2].replace("MCP_CHAOS_RUN_DIR", "R").replace("MCP_CHAOS_ENV_TOKEN", "T")
    assert short == line


def test_a_scenario_directory_a_shell_would_read_as_code_is_refused_in_a_shell_line(tmp_path: Path) -> None:
    """``{scenario_dir}`` is written into the line as the file is loaded, where it cannot be told from the
    user's own text: a directory holding ``$(...)`` would run it. In a list of words it is one argument."""
    folder = tmp_path / "scenarios $(touch pwned)"
    folder.mkdir()
    data = with_("target.kill_command", "{scenario_dir}/kill.sh app")
    (folder / "s.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder / "s.yaml")
    assert info.value.message == (
        f"{folder / 's.yaml'}: target.kill_command is a shell line with {{scenario_dir}}, and the scenario's "
        f"directory {str(folder.resolve())!r} holds '$', which a shell would read as code: write the command "
        "as a list of words (each one argument), or move the scenario"
    )
    data["target"]["kill_command"] = ["{scenario_dir}/kill.sh", "app"]
    (folder / "s.yaml").write_text(yaml.safe_dump(data))
    assert load_scenario(folder / "s.yaml").target.kill_command == [f"{folder.resolve()}/kill.sh", "app"]
    plain = tmp_path / "my scenarios"
    plain.mkdir()
    data["target"]["kill_command"] = "'{scenario_dir}/kill.sh' app"
    (plain / "s.yaml").write_text(yaml.safe_dump(data))
    assert load_scenario(plain / "s.yaml").target.kill_command == f"'{plain.resolve()}/kill.sh' app"


def test_the_variables_of_its_commands_are_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_KEY", "k-0123456789")
    data = with_("target.kill_command", ["cloud", "kill", "--key", "${DEPLOY_KEY}"])
    assert "k-0123456789" in parse_scenario(data).secrets()


def test_the_pod_is_the_url_with_its_commands(tmp_path: Path) -> None:
    scenario = parse_scenario(copy.deepcopy(URL))
    pod = make_pod(scenario.target, tmp_path, port=1, name="pod-0", urls={})
    assert isinstance(pod, UrlPod)
    assert pod.pid is None  # not reached yet: nothing to kill
    assert pod.kill() is False
    assert pod.identity() == {"url": "http://staging.example:8080/mcp?tenant=a"}
    assert pod.kill_command is not None
    assert pod.kill_command.argv == ["docker", "compose", "kill", "app"]
    assert pod.restart_command is not None
    assert pod.restart_command.argv == ["/bin/sh", "-c", "docker compose start app"]


def test_a_fault_proxy_names_the_server_in_the_host_header() -> None:
    raw = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:4000\r\ncontent-length: 13\r\n\r\nHost: in body"
    assert with_host(raw, "staging.example:8080") == (
        b"POST /mcp HTTP/1.1\r\nHost: staging.example:8080\r\ncontent-length: 13\r\n\r\nHost: in body"
    )
    bare = b"POST /mcp HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
    assert with_host(bare, "s:1") == b"POST /mcp HTTP/1.1\r\nHost: s:1\r\ncontent-length: 0\r\n\r\n"


def test_an_endpoint_at_the_servers_root_may_be_written_without_its_slash() -> None:
    """The conformance suite names its servers so (``http://localhost:39425``)."""
    assert http_endpoint("http://localhost:39425", "target.url", "x") == "http://localhost:39425/"
    assert http_endpoint("http://localhost:39425/mcp", "target.url", "x") == "http://localhost:39425/mcp"
    with pytest.raises(ValueError, match="HOST:PORT/PATH"):
        http_endpoint("http://localhost/mcp", "target.url", "x")
