"""``mcp-chaos export``: a run in another tool's format: Jepsen's history (``--format jepsen``) or
OpenTelemetry spans (``--format otlp``, the SDK is the ``otlp`` extra). ``export-otlp`` is the old
spelling of ``export --format otlp`` and keeps working, with a notice."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness import rundir
from harness.cli.common import say
from harness.cli.outputs import output_file
from harness.errors import ExportError, UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands

JEPSEN_FILE = "history.edn"
"""Where ``--format jepsen`` writes in the run directory when no ``--file`` is given."""


def add(sub: Commands) -> None:
    """The command's arguments, and the old spelling's."""
    export = sub.add_parser(
        "export",
        help="a run in another tool's format: Jepsen's history (EDN), or OpenTelemetry spans (OTLP)",
    )
    export.add_argument("run_dir")
    export.add_argument(
        "--format",
        required=True,
        choices=("jepsen", "otlp"),
        help="jepsen: the attempts as :add operations, the faults as the nemesis's, the final read as one "
        ":read (Jepsen's set-full checker reads lost and duplicated from it); "
        "otlp: intents and attempts as spans",
    )
    export.add_argument(
        "--file",
        help=f"write here (jepsen: EDN, one operation a line, default RUN_DIR/{JEPSEN_FILE}, - for standard "
        "output; otlp: OTLP JSON lines, as the collector's file exporter writes them)",
    )
    export.add_argument(
        "--endpoint",
        help="otlp: an OTLP/HTTP collector on this machine "
        "(http://127.0.0.1:4318; /v1/traces unless a path given)",
    )
    export.set_defaults(func=command)
    old = sub.add_parser("export-otlp", help="the old spelling of `export --format otlp` (kept working)")
    old.add_argument("run_dir")
    where = old.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", help="as `export --format otlp --endpoint`")
    where.add_argument("--file", help="as `export --format otlp --file`")
    old.set_defaults(func=command, format="otlp", renamed=True)


def command(args: argparse.Namespace) -> int:
    """The run in the format asked for."""
    if getattr(args, "renamed", False):
        say("export-otlp is now `mcp-chaos export --format otlp`; the old spelling keeps working", err=True)
    run_dir = Path(args.run_dir)
    rundir.require_run_dir(run_dir)
    if args.format == "jepsen":
        if args.endpoint:
            raise UsageError(
                "--endpoint is for --format otlp; a Jepsen history goes to --file (or - for stdout)"
            )
        return _jepsen(run_dir, args.file)
    if (args.file is None) == (args.endpoint is None):
        raise UsageError("--format otlp needs one of --file FILE or --endpoint URL")
    return _otlp(run_dir, args.file, args.endpoint)


def _jepsen(run_dir: Path, file: str | None) -> int:
    from harness import jepsen

    if file == "-":
        done, where = jepsen.export(run_dir, sys.stdout), "standard output"
    else:
        path = output_file(file, "--file") or run_dir / JEPSEN_FILE
        try:
            with open(path, "w", encoding="utf-8") as out:
                done, where = jepsen.export(run_dir, out), str(path)
        except OSError as exc:
            raise ExportError(f"cannot write the history to {path}: {exc.strerror or exc}") from None
    read = (
        "the final read"
        if done.read
        else "the final read as :info (no audit of the effects: run `mcp-chaos audit` first)"
    )
    say(
        f"exported {done.operations} operations ({done.attempts} attempts, {done.faults} faults, {read}) "
        f"to {where}",
        err=file == "-",
    )
    return 0


def _otlp(run_dir: Path, file: str | None, endpoint: str | None) -> int:
    path = output_file(file, "--file")
    try:  # the SDK is an optional extra, imported only by this command
        from harness import otlp
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"export --format otlp needs the OpenTelemetry SDK ({exc.name} is missing): "
            "pip install 'mcp-chaos[otlp]'"
        ) from None
    if path is not None:
        done, where = otlp.export_file(run_dir, path), str(path)
    else:
        assert endpoint is not None
        done, where = otlp.export_endpoint(run_dir, endpoint), otlp.collector_url(endpoint)
    say(f"exported {done.spans} spans of {done.traces} intents (one trace each) to {where}")
    return 0
