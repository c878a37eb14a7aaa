"""``mcp-chaos init``: a server started (or reached), its tools listed, a scenario drafted."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.arguments import pairs
from harness.cli.common import drive, say
from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.cli.options import Commands


def add(sub: Commands) -> None:
    """The command's arguments."""
    init = sub.add_parser("init", help="start a server, list its tools and draft a scenario for it")
    where = init.add_mutually_exclusive_group(required=True)
    where.add_argument("--image", help="a Docker image whose server the harness starts")
    where.add_argument(
        "--command", dest="command_line", help='the command that starts it, e.g. "python server.py"'
    )
    where.add_argument(
        "--url",
        help="a server that already runs, serving MCP over HTTP (drafted as target.url; the command that "
        "kills it is left as TODO)",
    )
    init.add_argument("--transport", choices=["http", "stdio"], default="http")
    init.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment for the server")
    init.add_argument(
        "--header",
        action="append",
        metavar="NAME:VALUE",
        help="in single quotes, so the scenario keeps the variable: 'Authorization: Bearer ${TOKEN}'",
    )
    init.add_argument("--tool", help="the tool the workload calls (default: asked, or the likeliest)")
    init.add_argument("--name", help="the scenario's name")
    init.add_argument(
        "-o", "--output", default="scenario.yaml", help="where to write it (default: scenario.yaml)"
    )
    init.add_argument("--force", action="store_true", help="overwrite the output file")
    init.set_defaults(func=command)


RACES_NEED = "{postgres_url}"
"""What a drafted scenario holds when ``races`` can place a retry at its target's statements."""


def command(args: argparse.Namespace) -> int:
    from harness.init import Origin, init_scenario

    output = Path(args.output)
    if output.is_dir():
        raise UsageError(f"-o {args.output}: is a directory; name a file")
    if output.exists() and not args.force:
        raise UsageError(f"{output} already exists; pass -o with another file, or --force to overwrite it")
    origin = Origin(
        image=args.image,
        command=args.command_line,
        url=args.url,
        transport=args.transport,
        env=pairs(args.env, "=", "--env"),
        headers=pairs(args.header, ":", "--header"),
    )
    doing = f"asking {origin.url}" if origin.url else f"starting {origin.describe()}"
    sys.stderr.write(f"init: {doing} for its tools ...\n")
    prompt = _ask if sys.stdin.isatty() and sys.stderr.isatty() else None

    def tell(line: str) -> None:
        say(line, err=True)

    text = drive(init_scenario(origin, name=args.name, tool=args.tool, prompt=prompt, say=tell), [])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    todos = sum(1 for line in text.splitlines() if "TODO" in line)
    print(
        f"wrote {output}"
        + (f": do what its {todos} TODO line(s) say and delete them, then" if todos else "; next:")
    )
    print(f"  mcp-chaos validate --preflight {output}")
    print(f"  mcp-chaos run {output}")
    if RACES_NEED in text:  # the harness's PostgreSQL in the draft: races can hold its statements
        print(f"  mcp-chaos races {output}   # a retry beside its original, at each of its statements")
    return 0


async def _ask(names: Sequence[str]) -> str:
    """Which tool to test, asked at a terminal (``init`` only asks where one is attached)."""
    for number, name in enumerate(names, 1):
        say(f"  {number}. {name}", err=True)
    while True:
        sys.stderr.write(f"Which tool should the workload call? [1-{len(names)}, default 1] ")
        sys.stderr.flush()
        answer = (await _typed_line()).strip() or "1"
        if answer.isdigit() and 1 <= int(answer) <= len(names):
            return names[int(answer) - 1]
        if answer in names:
            return answer


async def _typed_line() -> str:
    """A line typed at the terminal, read without blocking the event loop: ``input()`` would hold it,
    and Ctrl-C with it, until Enter."""
    import asyncio

    loop = asyncio.get_running_loop()
    typed: asyncio.Future[bytes] = loop.create_future()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not typed.done():
            typed.set_result(os.read(fd, 4096))

    loop.add_reader(fd, readable)
    try:
        line = await typed
    finally:
        loop.remove_reader(fd)
    if not line:
        raise UsageError("no tool was chosen (end of input); name it with --tool")
    return line.decode(errors="replace")
