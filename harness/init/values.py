"""A draft's values found where init can abandon them: a child process, each search with a deadline.

Most fields get a value by looking at their schema (:func:`harness.catalog.obvious_value`).
The rest need a search (hypothesis-jsonschema's minimal example), or a default
matched against the field's ``pattern``, and the drafted arguments are checked
against the whole schema; each of these can take forever on a server's schema. A
pattern such as ``^(a+)+$`` backtracks exponentially on a default that does not
match, and ``re`` holds the GIL while it does: measured, a thread given 0.5 s
to match ``a`` * 28 + ``!`` returned after 6 s, and nothing else in the process
ran meanwhile, the event loop (and so Ctrl-C) included. A thread with a deadline
cannot abandon it; a pre-check of patterns cannot know every slow one, nor a
search that rarely succeeds. So they run in a child process, one at a time, each
with a deadline (:data:`SEARCH_S`, :data:`CHECK_S`, all of them within
:data:`TOTAL_S`): a search past its deadline is killed with the child, its field
becomes a TODO that says so, and a new child takes the rest. Ctrl-C cancels the
wait and the child is killed on the way out; the child is in its own session
(the terminal's Ctrl-C reaches only init) and dies with init if init is killed
(``PR_SET_PDEATHSIG``).

A schema that needs none of it (no search, no pattern anywhere: the common case)
is drafted and checked in init's own process, at no cost.

The protocol is one JSON line per request on the child's stdin and one per answer
on its stdout: ``{"search": SCHEMA, "first": VALUE}`` → ``{"value": VALUE}``;
``{"check": SCHEMA, "arguments": ARGS}`` → ``{"arguments": ARGS, "problem": ..., "unchecked": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from harness.catalog import Leaf, Search, searched_value
from harness.init.draft import Checked, Draft, TooSlow, check_arguments, plan_arguments
from harness.proctree import die_with_parent

SEARCH_S = 3.0
"""How long one field's search (or its default's match against its pattern) may take."""
CHECK_S = 5.0
"""How long checking the drafted arguments against the whole schema may take."""
TOTAL_S = 20.0
"""How long all of a draft's searches and its check may take together; what is left is a TODO."""
START_S = 30.0
"""How long a child may take to start (its imports); not counted in the deadlines above."""
LINE_LIMIT = 64 << 20
"""The longest answer read from the child (a schema is the server's, and so its values)."""
READY = b"ready\n"


def uses_patterns(schema: Any) -> bool:
    """Whether ``pattern`` or ``patternProperties`` appears anywhere in the schema (walked without
    recursion: a server's schema may nest deeper than Python's stack)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if "pattern" in node or "patternProperties" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


async def draft_bounded(schema: Mapping[str, Any], marker: Leaf | None = None) -> Draft:
    """The tool's drafted arguments within :data:`TOTAL_S` (plus a child's start), whatever its schema;
    ``marker``: the field the marker goes in, where a trial call showed it (else the likeliest)."""
    plan = plan_arguments(schema, marker)
    if not plan.searches and not uses_patterns(schema):
        return plan.draft(check_arguments(schema, plan.arguments([])))
    deadline = time.monotonic() + TOTAL_S
    async with _Child() as child:
        found = []
        for leaf, search in plan.searches:
            request = {"search": dict(leaf.schema), "first": search.first}
            answer = await child.ask(request, min(SEARCH_S, deadline - time.monotonic()))
            found.append(answer if isinstance(answer, TooSlow) else (answer or {}).get("value"))
        arguments = plan.arguments(found)
        answer = await child.ask(
            {"check": dict(schema), "arguments": arguments}, min(CHECK_S, deadline - time.monotonic())
        )
    if isinstance(answer, TooSlow):
        return plan.draft(Checked(arguments, unchecked=answer.said("checking them")))
    if answer is None:
        return plan.draft(Checked(arguments, unchecked=child.failure or "the checking process ended"))
    return plan.draft(
        Checked(answer.get("arguments", arguments), answer.get("problem"), answer.get("unchecked"))
    )


class _Child:
    """The process searches and checks run in; started on first use, and again after a kill."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self.failure: str | None = None
        """Why the last child ended without answering (it crashed, or would not start)."""

    async def __aenter__(self) -> _Child:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()

    async def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | TooSlow | None:
        """The child's answer; TooSlow when it took longer than ``timeout_s`` (the child is killed);
        None when the child ended without one (:attr:`failure` says why)."""
        if timeout_s <= 0:
            return TooSlow(0)
        proc = self._proc or await self._start()
        if proc is None:
            return None
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            async with asyncio.timeout(timeout_s):
                await proc.stdin.drain()
                line = await proc.stdout.readline()
        except TimeoutError:
            await self._stop()
            return TooSlow(timeout_s)
        except (OSError, ValueError):  # a broken pipe, an answer past LINE_LIMIT
            line = b""
        if not line.endswith(b"\n"):
            await self._died()
            return None
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else None

    async def _start(self) -> asyncio.subprocess.Process | None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "harness.init.values",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
            limit=LINE_LIMIT,
        )
        self._proc = proc
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(START_S):
                started = await proc.stdout.readline()
        except TimeoutError:
            started = b""
        if started != READY:
            await self._died()
            return None
        return proc

    async def _died(self) -> None:
        """The child ended (or answered nothing sensible): what it said on stderr is the failure."""
        proc = self._proc
        await self._stop()
        said = b""
        if proc is not None and proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                said = await proc.stderr.read(4096)
        last = said.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
        self.failure = f"the drafting process ended ({last[0][:200]})"

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        # Shielded: a second Ctrl-C while it is reaped leaves no zombie and no unreaped transport.
        await asyncio.shield(proc.wait())


def _answer(request: Mapping[str, Any]) -> dict[str, Any]:
    if "search" in request:
        return {"value": searched_value(request["search"], Search(request.get("first")))}
    checked = check_arguments(request["check"], request["arguments"])
    return {"arguments": checked.arguments, "problem": checked.problem, "unchecked": checked.unchecked}


def main() -> None:  # pragma: no cover - runs as the child process; tested through draft_bounded
    # What searches and checks import, imported before the child says it is ready: the deadlines
    # count the work, not the imports (close to a second, more on a busy machine).
    import hypothesis_jsonschema  # noqa: F401
    import jsonschema  # type: ignore[import-untyped]  # noqa: F401

    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    for line in sys.stdin.buffer:
        answer = _answer(json.loads(line))
        sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
