"""The rules across sections: what one section's choice needs or forbids in another.

Each section validates itself; these see the whole scenario. They run in the
order of :data:`RULES` and the first one broken is the error, at the top level
of the scenario (``s.yaml: (top level): ...``), so they read as one list here
instead of hiding among the sections' own checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from harness.crashpoints.points import FILE_KINDS, KINDS, PointKind, Site, parse_path, parse_point
from harness.scenario.serving import SERVICES

if TYPE_CHECKING:
    from harness.scenario.model import Scenario


def services_used(s: Scenario) -> None:
    """A placeholder for a service needs the service (:data:`~harness.scenario.serving.SERVICES`)."""
    texts = [*(s.target.command or ()), *s.target.env.values()]
    if s.audit.effects.sql is not None:
        texts.append(s.audit.effects.sql.url)
    for service in SERVICES:
        if service.present(s):
            continue
        used = next((p for p in service.placeholders for t in texts if "{" + p + "}" in t), None)
        if used is not None:
            raise ValueError(f"{{{used}}} is used but {service.section} is not set")
    if s.services.downstream is None and s.audit.effects.downstream is not None:
        raise ValueError(
            "audit.effects.downstream counts the calls services.downstream records; set "
            "services.downstream (its upstream: the API the target calls)"
        )


def victims_exist(s: Scenario) -> None:
    """A kill or a pause that names its victim names a replica that runs."""
    replicas = s.target.replicas
    for name, fault in (("kill", s.faults.kill), ("pause", s.faults.pause)):
        victim = None if fault is None else fault.victim
        if isinstance(victim, int) and not 0 <= victim < replicas:
            raise ValueError(
                f"faults.{name}.victim: there is no replica {victim} "
                f"(target.replicas is {replicas}: use 0..{replicas - 1}, random or all)"
            )


def balancer_fits(s: Scenario) -> None:
    """The balancer fronts HTTP replicas that the harness runs."""
    if s.services.balancer is None:
        return
    if s.target.transport == "stdio" or s.target.kubernetes is not None:
        raise ValueError(
            "services.balancer goes in front of HTTP replicas the harness runs; not with a stdio "
            "or Kubernetes target"
        )


def kubernetes_fits(s: Scenario) -> None:
    """With pods in a cluster, only what the cluster's API can do to them."""
    if s.target.kubernetes is None:
        return
    if s.target.replicas > 1:
        raise ValueError(
            "target.replicas runs pods on this machine; with target.kubernetes the cluster's "
            "Deployment has the replicas (its Service spreads the calls)"
        )
    kill = s.faults.kill
    if kill is not None and (kill.signal != "SIGKILL" or kill.victim != "random"):
        raise ValueError(
            "faults.kill.signal and victim are for pods the harness runs; with target.kubernetes "
            "use target.kubernetes.grace_period_s (the victim is a seeded Ready pod)"
        )
    if s.faults.rollout is not None:
        raise ValueError(
            "faults.rollout is for pods the harness runs; with target.kubernetes roll out with "
            "kubectl rollout restart, outside the run"
        )
    if s.faults.pause is not None:
        raise ValueError(
            "faults.pause is not supported with target.kubernetes (the API cannot freeze a pod); "
            "use faults.kill"
        )
    if s.faults.stream:
        raise ValueError(
            "faults.stream is not supported with target.kubernetes yet (the fault proxy fronts a pod "
            "the harness runs on 127.0.0.1)"
        )
    if s.audit.effects.sink is not None or s.services.downstream is not None:
        raise ValueError(
            "audit.effects.sink and services.downstream listen on the harness's 127.0.0.1, which pods "
            "in a cluster cannot call; use sql, tool, command or jsonl"
        )


def url_fits(s: Scenario) -> None:
    """With a server that already runs, only what its URL and the user's commands can do to it."""
    target = s.target
    if target.url is None:
        return
    f = s.faults
    killing = [
        name
        for name, fault in (
            ("faults.kill", f.kill),
            ("faults.rollout", f.rollout),
            ("faults.crash_points", f.crash_points if f.crash_points and f.crash_points.kills() else None),
        )
        if fault is not None
    ]
    if killing and target.kill_command is None:
        raise ValueError(
            f"{killing[0]} kills the server, and with target.url the harness did not start it and has no "
            "way to kill it: give target.kill_command (e.g. [docker, compose, kill, app]; and "
            "target.restart_command if nothing restarts it), or drop the fault and use faults.stream"
        )
    if f.pause is not None:
        raise ValueError(
            "faults.pause freezes a process the harness runs; with target.url there is none to freeze "
            "(use faults.stream stall, which holds the exchange instead)"
        )
    if f.rollout is not None:
        raise ValueError(
            "faults.rollout replaces replicas the harness runs; with target.url roll out with your own "
            "tooling, outside the run, or use faults.kill"
        )
    kill = f.kill
    if kill is not None and (kill.signal != "SIGKILL" or kill.victim != "random" or kill.power_loss):
        raise ValueError(
            "faults.kill.signal, victim and power_loss are for pods the harness runs; with target.url "
            "target.kill_command decides how the server dies"
        )
    if s.services.balancer is not None or s.services.postgres is not None:
        raise ValueError(
            "services.balancer and services.postgres are started with the target by the harness; a "
            "server that already runs cannot be given them (their ports are chosen when a run starts)"
        )
    if s.audit.effects.sink is not None or s.services.downstream is not None:
        raise ValueError(
            "audit.effects.sink and services.downstream listen on ports the harness chooses when a run "
            "starts, which a server that already runs cannot be told; use sql, tool, command, jsonl or files"
        )


def power_loss_fits(s: Scenario) -> None:
    """A power loss rolls back the data directory of the one pod the harness runs and traces."""
    kill = s.faults.kill
    if kill is None or not kill.power_loss:
        return
    if s.target.runtime not in ("process", "docker") or s.target.replicas != 1 or kill.signal != "SIGKILL":
        raise ValueError(
            "faults.kill.power_loss rolls back the data directory of one pod the harness runs and traces: "
            "it needs target.replicas 1, a process or Docker runtime and signal SIGKILL"
        )


def transport_fits(s: Scenario) -> None:
    """A stdio target has no HTTP: no fault proxy, no header, no read over HTTP."""
    if s.target.transport != "stdio":
        return
    if s.faults.stream:
        raise ValueError(
            "faults.stream needs an HTTP target (the fault proxy sits between the driver and an "
            "HTTP server); a stdio target can be killed and paused"
        )
    if s.client.key_in == "header":
        raise ValueError("client.key_in: header needs an HTTP target; use meta or argument")
    if s.audit.effects.tool is not None:
        raise ValueError(
            "audit.effects.tool reads over HTTP; with a stdio target use sql, jsonl, files or command"
        )


def crash_points_fit(s: Scenario) -> None:
    """What each plan of ``faults.crash_points`` needs of the other sections. Holds and an exploration
    count the points of one call at a time, on one pod the harness kills (itself, or with
    ``target.kill_command``): concurrency 1, no other fault. An order holds several attempts at once and
    kills nothing. Every plan holds only where the harness stands (its PostgreSQL, its sink, its
    downstream proxy, the pod's file operations)."""
    crash = s.faults.crash_points
    if crash is None:
        return
    target = s.target
    if crash.kills():
        _one_call_at_a_time(s)
    kinds: set[PointKind] = set().union(*(hold.kinds() for hold in crash.holds))
    if crash.explore is not None and crash.explore.only:
        kinds |= {p.kind for name in crash.explore.only for p in parse_path(name)}
    if crash.order is not None:
        kinds.add(parse_point(crash.order.at).kind)
        if s.workload.concurrency < 2 and not s.faults.stream:
            raise ValueError(
                "faults.crash_points.order holds attempts that run side by side: give workload.concurrency "
                "2 or more, or a stall stream fault that sends a retry beside its original"
            )
    if crash.race is not None:
        _race_fits(s)
    _sites_served(s, kinds)
    power_loss = any("@power_loss" in hold.at for hold in crash.holds)
    if (kinds & FILE_KINDS or power_loss) and target.url is not None:
        raise ValueError(
            "file hold points and power losses trace the pod's file operations, and with target.url "
            "the harness runs no pod to trace: hold request or response"
        )
    if (kinds & FILE_KINDS or power_loss) and not crash.files:
        raise ValueError(
            "file hold points and power losses need the pod's file operations traced "
            "(faults.crash_points.files: true)"
        )


def _race_fits(s: Scenario) -> None:
    """A race places one intent's retry beside its original, one intent at a time (two calls: two intents
    at a time), and breaks the original's stream where the fault proxy stands: one pod the harness runs
    over HTTP, no other fault."""
    target = s.target
    race = s.faults.crash_points.race if s.faults.crash_points is not None else None
    calls = 2 if race is not None and race.second == "call" else 1
    if s.workload.concurrency != calls or target.replicas != 1 or target.kubernetes is not None:
        raise ValueError(
            "faults.crash_points.race places a retry beside its original, one intent at a time (second: "
            "call, two at a time): it needs workload.concurrency 1 (2) and one pod (no replicas or "
            "Kubernetes target)"
        )
    if target.transport == "stdio" or target.url is not None:
        raise ValueError(
            "faults.crash_points.race breaks the original's response stream in the fault proxy: it needs "
            "an HTTP target the harness runs (not stdio, not target.url)"
        )
    f = s.faults
    if f.kill is not None or f.pause is not None or f.rollout is not None or f.stream:
        raise ValueError(
            "faults.crash_points.race makes its own retries; it does not mix with faults.kill, pause, "
            "rollout or stream"
        )


SERVICE_SECTIONS: dict[Site, tuple[str, str]] = {
    service.site: (service.section, service.holds) for service in SERVICES if service.site is not None
}
"""The section a service's hold site needs, and why it holds there
(:data:`~harness.scenario.serving.SERVICES`). The fault proxy is in every run; the file tracer's needs
are a rule of their own (a traced pod, ``faults.crash_points.files``)."""


def _section(s: Scenario, path: str) -> object:
    return functools.reduce(getattr, path.split("."), s)


def _sites_served(s: Scenario, kinds: Collection[PointKind]) -> None:
    """Each point named is seen at one of its sites (:data:`~harness.crashpoints.points.KINDS`) whose
    service the scenario has."""
    for kind in sorted(kinds, key=list(PointKind).index):
        sites = KINDS[kind].sites
        needed = [SERVICE_SECTIONS[site] for site in Site if site in sites and site in SERVICE_SECTIONS]
        if not needed or any(_section(s, path) is not None for path, _ in needed):
            continue
        raise ValueError(f"a {kind} point needs {' or '.join(path for path, _ in needed)} ({needed[0][1]})")


def _one_call_at_a_time(s: Scenario) -> None:
    """What crash points' holds and explorations need: their points are counted per attempt, one call at a
    time, and the pod is killed only at them."""
    target = s.target
    if (
        s.workload.concurrency != 1
        or target.replicas != 1
        or target.kubernetes is not None
        or s.services.balancer is not None
    ):
        raise ValueError(
            "faults.crash_points holds and explore count the points of one call at a time: they need "
            "workload.concurrency 1 and one pod the harness runs (no replicas, balancer or "
            "Kubernetes target)"
        )
    f = s.faults
    if f.kill is not None or f.pause is not None or f.rollout is not None or f.stream:
        raise ValueError(
            "faults.crash_points kills the pod itself, at its points; it does not mix with "
            "faults.kill, pause, rollout or stream"
        )


RULES: tuple[Callable[[Scenario], None], ...] = (
    services_used,
    victims_exist,
    balancer_fits,
    kubernetes_fits,
    url_fits,
    power_loss_fits,
    transport_fits,
    crash_points_fit,
)


def check_sections(s: Scenario) -> None:
    """Raise ValueError with the first rule the scenario breaks."""
    for rule in RULES:
        rule(s)
