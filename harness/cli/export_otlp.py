"""``mcp-chaos export-otlp``: a run as OpenTelemetry spans (the SDK is the ``otlp`` extra)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import say
from harness.cli.outputs import output_file
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    export = sub.add_parser(
        "export-otlp",
        help="a run's intents and attempts as OpenTelemetry spans (OTLP), to a local collector or a file",
    )
    export.add_argument("run_dir")
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--endpoint",
        help="an OTLP/HTTP collector on this machine (http://127.0.0.1:4318; /v1/traces unless a path given)",
    )
    where.add_argument("--file", help="write OTLP JSON lines here, as the collector's file exporter does")
    export.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """The run's intents and attempts as OTLP spans, to a collector on this machine or a file."""
    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    path = output_file(args.file, "--file")
    try:  # the SDK is an optional extra, imported only by this command
        from harness import otlp
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"export-otlp needs the OpenTelemetry SDK ({exc.name} is missing): pip install 'mcp-chaos[otlp]'"
        ) from None
    if path is not None:
        done, where = otlp.export_file(run_dir, path), str(path)
    else:
        done, where = otlp.export_endpoint(run_dir, args.endpoint), otlp.collector_url(args.endpoint)
    say(f"exported {done.spans} spans of {done.traces} intents (one trace each) to {where}")
    return 0
