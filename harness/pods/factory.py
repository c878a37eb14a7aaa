"""From a scenario's target to a pod: the runtime it names, with its placeholders filled in."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.pods.container import DockerPod
from harness.pods.pod import Pod
from harness.pods.process import ProcessPod
from harness.pods.remote import UrlPod, UserCommand
from harness.pods.shellline import Ref, shell_line
from harness.scenario import TARGET_PLACEHOLDERS, TargetSpec
from harness.scenario.headers import HEADER_VALUE_CONTROL
from harness.scenario.placeholders import COMMAND_PLACEHOLDERS
from harness.scenario.serving import SERVICE_PLACEHOLDERS
from harness.template import TemplateError, expand_env, parse_text, render_text, split_env_refs

if TYPE_CHECKING:
    from harness.client.oauth import OAuthSettings


def placeholder_values(
    target: TargetSpec, *, run_dir: Path, port: int, pod: str, urls: Mapping[str, str]
) -> dict[str, str]:
    """What the target's ``{placeholders}`` stand for in this run (for an image: inside the container).

    Paths are absolute: a target may change directory, and Docker takes a
    relative bind source for the name of a volume.
    """
    run_dir = run_dir.resolve()
    return {
        "python": sys.executable,
        "port": str(port),
        "data_dir": target.data_mount if target.runtime == "docker" else str(run_dir / rundir.DATA),
        "run_dir": str(run_dir),
        "pod": pod,
        "scenario_dir": "{scenario_dir}",  # resolved when the scenario was loaded
        # each service's, as its wiring filled them in; one the scenario does not run stays as written
        **{name: urls.get(name, "{" + name + "}") for name in SERVICE_PLACEHOLDERS},
    }


@dataclass(frozen=True, slots=True)
class Rendered:
    """A local runtime's pod, its placeholders and ``${VAR}`` filled in: command, environment, log."""

    name: str
    command: list[str] | None
    env: dict[str, str]
    log_path: Path
    mounts: Mapping[Path, str] = field(default_factory=dict)
    """Files of the run a container sees, read-only, at these paths (the downstream proxy's CA)."""


def render_pod(
    target: TargetSpec,
    run_dir: Path,
    port: int,
    name: str,
    urls: Mapping[str, str],
    environ: Mapping[str, str],
    handed: Mapping[str, str] | None = None,
    mounts: Mapping[Path, str] | None = None,
) -> Rendered:
    """The pod's command and environment: ``handed`` (what a service of the harness gives every target,
    the downstream proxy's variables) under the scenario's ``target.env``, which wins."""
    values = placeholder_values(target, run_dir=run_dir, port=port, pod=name, urls=urls)
    env = dict(handed or {})
    env |= {
        k: expand_env(
            render_text(v, values, TARGET_PLACEHOLDERS, f"target.env.{k}", env_refs=True),
            environ,
            f"target.env.{k}",
        )
        for k, v in target.env.items()
    }
    env[target.port_env] = str(port)
    command = (
        [render_text(part, values, TARGET_PLACEHOLDERS, "target.command") for part in target.command]
        if target.command
        else None
    )
    return Rendered(name, command, env, run_dir / rundir.PODS / f"{name}.log", dict(mounts or {}))


def _process(target: TargetSpec, run_dir: Path, pod: Rendered, environ: Mapping[str, str], seed: int) -> Pod:
    assert pod.command is not None
    return ProcessPod(
        pod.name, pod.command, {**environ, **pod.env}, pod.log_path, stdio=target.transport == "stdio"
    )


def _docker(target: TargetSpec, run_dir: Path, pod: Rendered, environ: Mapping[str, str], seed: int) -> Pod:
    assert target.image is not None
    return DockerPod(
        pod.name,
        image=target.image,
        command=pod.command,
        env=pod.env,
        data_dir=run_dir / rundir.DATA,
        data_mount=target.data_mount,
        mounts=pod.mounts,
        log_path=pod.log_path,
        run_id=run_dir.name,
        stdio=target.transport == "stdio",
    )


def _kubernetes(
    target: TargetSpec, run_dir: Path, pod: Rendered, environ: Mapping[str, str], seed: int
) -> Pod:
    # Imported here, not at the top: the official client costs about half a second of imports,
    # which every command (`--version`, `validate`, `audit`, a run of a local process) would pay.
    from harness.pods.kubernetes import KubernetesPod

    assert target.kubernetes is not None
    return KubernetesPod(
        target.kubernetes,
        logs_dir=run_dir / rundir.PODS,
        run_id=run_dir.name,
        seed=seed,
        ready_timeout_s=target.ready_timeout_s,
    )


COMMAND_VARIABLES = {
    "python": "MCP_CHAOS_PYTHON",
    "run_dir": "MCP_CHAOS_RUN_DIR",
    "scenario_dir": "MCP_CHAOS_SCENARIO_DIR",
}
"""The environment variable a shell line's placeholder becomes (:mod:`harness.pods.shellline`);
``${NAME}`` becomes ``MCP_CHAOS_ENV_NAME`` (the shell sets some names itself: ``PWD``, ``IFS``)."""


def user_command(
    command: str | list[str] | None, field: str, run_dir: Path, environ: Mapping[str, str]
) -> UserCommand | None:
    """A url target's kill or restart command, ready to run, its values data that no shell parses.

    An argv list gets ``{python}``, ``{run_dir}`` and ``${VAR}`` (from ``environ``) filled into its
    words, each word one argument. A shell line gets each as an environment variable it refers to,
    quoted for where it stands (:func:`~harness.pods.shellline.shell_line`)."""
    if command is None:
        return None
    values = {"python": sys.executable, "run_dir": str(run_dir.resolve()), "scenario_dir": "{scenario_dir}"}
    if isinstance(command, list):
        argv = [
            expand_env(render_text(word, values, COMMAND_PLACEHOLDERS, field, env_refs=True), environ, field)
            for word in command
        ]
        return UserCommand(field, argv, " ".join(command))
    line, env = shell_line(list(_shell_pieces(command, values, field, environ)))
    return UserCommand(field, ["/bin/sh", "-c", line], command, env)


def _shell_pieces(
    command: str, values: Mapping[str, str], field: str, environ: Mapping[str, str]
) -> Iterator[str | Ref]:
    """A shell line's text and, where it holds a placeholder or ``${VAR}``, the value as a :class:`Ref`."""
    text = parse_text(command, COMMAND_PLACEHOLDERS, field, env_refs=True)
    for i, part in enumerate(text.parts):
        if i % 2:
            yield Ref(COMMAND_VARIABLES[part], values[part])
            continue
        for j, bit in enumerate(split_env_refs(part)):
            if j % 2:
                yield Ref(f"MCP_CHAOS_ENV_{bit}", expand_env(f"${{{bit}}}", environ, field))
            elif bit:
                yield bit


def _url(target: TargetSpec, run_dir: Path, pod: Rendered, environ: Mapping[str, str], seed: int) -> Pod:
    assert target.url is not None
    return UrlPod(
        pod.name,
        url=target.url,
        kill=user_command(target.kill_command, "target.kill_command", run_dir, environ),
        restart=user_command(target.restart_command, "target.restart_command", run_dir, environ),
        env=environ,
        log_path=pod.log_path,
        timeout_s=target.command_timeout_s,
    )


Runtime = Callable[[TargetSpec, Path, Rendered, Mapping[str, str], int], Pod]
RUNTIMES: dict[str, Runtime] = {
    "process": _process,
    "docker": _docker,
    "kubernetes": _kubernetes,
    "url": _url,
}
"""Every runtime, by ``target.runtime``: a new one is a row here, a ``Pod``, and a case of the
conformance kit (``tests/integration/test_runtime_conformance.py``)."""


def make_pod(
    target: TargetSpec,
    run_dir: Path,
    *,
    port: int,
    name: str,
    urls: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    seed: int = 0,
    handed: Mapping[str, str] | None = None,
    mounts: Mapping[Path, str] | None = None,
) -> Pod:
    """The pod for the target's runtime, with its placeholders and ``${VAR}`` (from ``environ``) filled in.

    ``seed`` picks the victims of kills where a runtime has several pods to choose from (Kubernetes).
    """
    environ = os.environ if environ is None else environ
    rendered = (
        Rendered(name, None, {}, run_dir / rundir.PODS / f"{name}.log")
        if target.runtime in ("kubernetes", "url")  # it already runs, with what its own start gave it
        else render_pod(target, run_dir, port, name, urls, environ, handed, mounts)
    )
    return RUNTIMES[target.runtime](target, run_dir, rendered, environ, seed)


def target_headers(target: TargetSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The HTTP headers of every request to the target, ``${VAR}`` expanded from ``environ``.

    TemplateError when an expanded value cannot be a header value (a line break
    would end the header, and start another or a whole request); the value is
    never quoted, it is a secret.
    """
    environ = os.environ if environ is None else environ
    headers = {k: expand_env(v, environ, f"target.headers.{k}") for k, v in target.headers.items()}
    for name, value in headers.items():
        if any(c in value for c in "\r\n\0"):
            raise TemplateError(
                f"target.headers.{name}: a variable it uses holds a line break or NUL, "
                "which no header value may carry"
            )
        if HEADER_VALUE_CONTROL.search(value) is not None:  # a server answers 400 to every request
            raise TemplateError(
                f"target.headers.{name}: a variable it uses holds a control character, "
                "which no header value may carry (HTTP allows none but a tab)"
            )
    return headers


def target_oauth(target: TargetSpec, environ: Mapping[str, str] | None = None) -> OAuthSettings | None:
    """``target.auth`` with its ``${VAR}`` expanded from ``environ`` (None without it)."""
    from harness.client.oauth import IdentityProvider, OAuthSettings

    auth = target.auth
    if auth is None:
        return None
    environ = os.environ if environ is None else environ

    def value(name: str, text: str | None) -> str | None:
        return None if text is None else expand_env(text, environ, f"target.auth.{name}")

    idp = None
    if auth.idp is not None:
        idp = IdentityProvider(
            token_endpoint=auth.idp.token_endpoint,
            id_token=expand_env(auth.idp.id_token, environ, "target.auth.idp.id_token"),
            client_id=value("idp.client_id", auth.idp.client_id),
            client_secret=value("idp.client_secret", auth.idp.client_secret),
        )
    return OAuthSettings(
        grant=auth.grant,
        client_id=value("client_id", auth.client_id),
        client_secret=value("client_secret", auth.client_secret),
        auth_method=auth.token_endpoint_auth,
        private_key=value("private_key", auth.private_key),
        signing_algorithm=auth.signing_algorithm,
        scope=value("scope", auth.scope),
        redirect_uri=auth.redirect_uri,
        client_metadata_url=auth.client_metadata_url,
        issuer=auth.issuer,
        idp=idp,
    )


def require_env_refs(target: TargetSpec, environ: Mapping[str, str] | None = None) -> None:
    """TemplateError naming the first ``${VAR}`` of the target's env, headers, auth or commands the
    environment lacks."""
    environ = os.environ if environ is None else environ
    user_command(target.kill_command, "target.kill_command", Path("."), environ)
    user_command(target.restart_command, "target.restart_command", Path("."), environ)
    for name, text in target.env.items():
        if "\0" in expand_env(text, environ, f"target.env.{name}"):
            raise TemplateError(
                f"target.env.{name}: a variable it uses holds a NUL, which no environment can"
            )
    target_headers(target, environ)
    target_oauth(target, environ)
