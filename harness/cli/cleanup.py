"""``mcp-chaos cleanup``: what a killed harness left, removed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.errors import TargetError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    cleanup = sub.add_parser(
        "cleanup",
        help="remove what a killed harness left: PostgreSQL clusters, init's and audits' files, containers",
    )
    cleanup.add_argument("--run", help="only those of this run id")
    cleanup.add_argument("--force", action="store_true", help="also those of runs whose harness still runs")
    cleanup.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Remove what a SIGKILLed harness left: its temporary PostgreSQL clusters, file tracers' copies of
    what was durable, init's throwaway
    directories and audits' temporary files (which belong to no run: only without ``--run``), and
    containers (by label)."""
    from harness.audit import scratch
    from harness.crashpoints.fsholds import remove_stale_shadows
    from harness.init.connect import remove_stale_probes
    from harness.pods.container import docker_client, remove_containers
    from harness.services import remove_stale_clusters

    for path in remove_stale_clusters(args.run):
        print(f"removed temporary PostgreSQL cluster {path}")
    for path in remove_stale_shadows(args.run):
        print(f"removed a file tracer's copy of what was durable {path}")
    for path in remove_stale_probes() if args.run is None else ():
        print(f"removed init's temporary directory {path}")
    for path in scratch.remove_stale() if args.run is None else ():
        print(f"removed a killed audit's temporary directory {path}")
    try:
        client = docker_client()
    except TargetError as exc:
        print(f"containers not checked: {exc.message}")
        return 0
    try:
        removed, kept = remove_containers(client, args.run, force=args.force)
    finally:
        client.close()
    for name in removed:
        print(f"removed container {name}")
    for name in kept:
        print(f"kept container {name}: its harness still runs (--force removes it anyway)")
    print(f"{len(removed)} container(s) removed")
    return 0
