"""A live target for contract checks: calls with chosen keys and payloads, effects read at will.

The target is the scenario's (process or image, HTTP or stdio, its services),
wired and supervised as in a run, into a run directory whose history records
every call. Payloads come from the scenario's argument template, so a check
that needs "the same payload" or "another payload" takes an intent's arguments
and sends them with the key it chooses. Effects are read through the
scenario's effect source whenever a check asks, a live source (PostgreSQL, a
read tool, a command) by a final read each time.

A 2025 server keeps its sessions in memory: after a restart it answers 404 to
the old ``Mcp-Session-Id``. As a run does, the session opens a new one and
sends the request again, and counts the loss, so a check can say that the
session was lost apart from what the tool did.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from harness import rundir
from harness.client import McpClient
from harness.client.http import LIST_PAGES, McpHttpClient
from harness.client.messages import CallResult, ToolCall
from harness.errors import StoreNotMade, TargetError
from harness.history import Outcome
from harness.run.wiring import TargetWiring
from harness.scenario import Scenario
from harness.workload import Intent, Workload

RETRIED = frozenset({Outcome.TRANSPORT_ERROR, Outcome.TIMEOUT, Outcome.SESSION_LOST})
"""What a client retries: the call may not have reached a server that was not there."""
INTENTS = 1000
"""Intents a contract run may draw (the checks use a dozen); independent of the scenario's workload size."""


def variant_session(
    scenario: Scenario, env: dict[str, str], run_dir: Path, namespace: str
) -> ContractSession:
    """A session of the scenario's target with more environment, in a run directory of its own."""
    data = scenario.model_dump(mode="json")
    data["target"]["env"] = {**data["target"]["env"], **env}
    (run_dir / rundir.DATA).mkdir(parents=True)
    (run_dir / rundir.PODS).mkdir()
    return ContractSession(Scenario.model_validate(data), run_dir, namespace)


class ContractSession:
    """One started target and what the checks do with it."""

    def __init__(self, scenario: Scenario, run_dir: Path, namespace: str) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.namespace = namespace
        self.tool = scenario.workload.tool
        self.wiring = TargetWiring(scenario, run_dir)
        self.history = self.wiring.history
        self.supervisor = self.wiring.supervise()
        self.client: McpClient | None = None
        self._ids = itertools.count(1)
        self.workload = Workload(scenario, namespace, size=INTENTS)
        self._intents: Iterator[Intent] = iter(self.workload)
        self.source_error: str | None = None
        """Why the effect source could not be read the last time, if it could not."""
        self.sessions_lost = 0
        """Requests answered "session not found" (a restarted 2025 server), each sent again in a new one."""

    @property
    def keyed(self) -> bool:
        """Whether an idempotency key travels with each call: ``{key}`` in the arguments, or in
        ``_meta`` or a header (``client.key_in``). Without one, a retry is the same call again."""
        travels_apart = self.scenario.client.key_in != "argument"
        return travels_apart or "key" in self.scenario.workload.template.placeholders

    def key_shown(self, intent: Intent) -> str:
        """The intent's key as evidence, or why there is none."""
        if self.keyed:
            return intent.key
        return "none travels (no {key} in workload.arguments, client.key_in: argument)"

    @contextlib.asynccontextmanager
    async def started(self) -> AsyncIterator[ContractSession]:
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(self.history)
            stack.callback(self.wiring.redact_logs)  # once the pod and the services have stopped writing
            await stack.enter_async_context(self.wiring.running_services())
            await stack.enter_async_context(self.wiring.running_pods())
            (client,) = self.wiring.clients()
            self.client = client
            stack.push_async_callback(client.aclose)
            await self.wiring.mirror_marks(
                [client]
            )  # its calls send the tool's Mcp-Param-* headers, as a run's
            yield self

    def variant(self, env: dict[str, str], name: str) -> ContractSession:
        """Another session of the same target with more environment, in ``<run_dir>/<name>/``."""
        return variant_session(self.scenario, env, self.run_dir / name, f"{self.namespace}c")

    async def wait_ready(self) -> None:
        """Until the supervisor has the pod ready (again, after it died)."""
        timeout = self.scenario.target.restart_delay_s + self.scenario.target.ready_timeout_s + 5
        try:
            async with asyncio.timeout(timeout):
                await self.supervisor.ready.wait()
        except TimeoutError:
            raise TargetError(f"the pod was not ready again within {timeout:g}s") from None

    async def retry(self, intent: Intent) -> CallResult:
        """Call again, as a client does after a broken attempt: new request id, same key, until the
        pod answers (it may be restarting); the last answer."""
        deadline = asyncio.get_running_loop().time() + self.scenario.target.ready_timeout_s + 10
        while True:
            res = await self.call(intent)
            if res.outcome not in RETRIED or asyncio.get_running_loop().time() > deadline:
                return res
            await asyncio.sleep(0.2)

    def intent(self) -> Intent:
        """A fresh intent: its own marker, key and payload."""
        return next(self._intents)

    def payload(self, intent: Intent, key: str | None = None) -> dict[str, Any]:
        return self.workload.arguments(intent, key)

    async def call(
        self,
        intent: Intent,
        *,
        key: str | None = None,
        payload_of: Intent | None = None,
        answer: dict[str, Any] | None = None,
    ) -> CallResult:
        """One ``tools/call`` of the workload's tool as a client makes it: ``intent``'s key (or
        ``key``) with the payload of ``payload_of`` (default: the intent's own), its questions
        (``input_required``) answered from the scenario's answers; the last answer. ``answer``:
        start by answering a question asked before."""
        res = await self.exchange(intent, key=key, payload_of=payload_of, answer=answer)
        for _ in range(self.scenario.client.max_input_rounds):
            if res.outcome is not Outcome.INPUT_REQUIRED:
                break
            reply = self.workload.respond(res.result or {})
            if isinstance(reply, str):  # the scenario has no answer: the question is the last word
                break
            res = await self.exchange(intent, key=key, payload_of=payload_of, answer=reply)
        return res

    async def exchange(
        self,
        intent: Intent,
        *,
        key: str | None = None,
        payload_of: Intent | None = None,
        answer: dict[str, Any] | None = None,
    ) -> CallResult:
        """One request and its answer, a question included; ``answer`` answers the last question."""
        client = self.client
        assert client is not None, "call inside started()"
        key = intent.key if key is None else key
        arguments = self.payload(payload_of or intent, key)
        return await self._in_session(
            lambda: client.call_tool(
                ToolCall(self.tool, arguments, next(self._ids), key=key, answer=answer),
                timeout=self.scenario.client.attempt_timeout_s,
            )
        )

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> CallResult:
        """One ``tools/call`` of any tool with the arguments given (no key of an intent's)."""
        client = self.client
        assert client is not None, "call inside started()"
        return await self._in_session(
            lambda: client.call_tool(
                ToolCall(tool, arguments, next(self._ids)), timeout=self.scenario.client.attempt_timeout_s
            )
        )

    async def _in_session(self, send: Callable[[], Awaitable[CallResult]]) -> CallResult:
        """``send()``, and once more in a new session if the server forgot this one (a restarted 2025
        server answers 404): what a run's client does, so no check fails on a session, only on a tool."""
        client = self.client
        sent_in = client.session if isinstance(client, McpHttpClient) else None
        res = await send()
        if res.outcome is not Outcome.SESSION_LOST:
            return res
        self.sessions_lost += 1
        if isinstance(client, McpHttpClient) and sent_in is not None and client.session == sent_in:
            # A request other than a tool call leaves the dead session in place: open the next one here.
            failed = await client.initialize(timeout=self.scenario.client.attempt_timeout_s)
            if failed is not None:
                return failed
        return await send()

    async def effects(self) -> Counter[str]:
        """Effects per marker now, through the scenario's effect source; none when its store is not there
        (a server that has not written yet: no file, no table), with why in :attr:`source_error`.
        AuditError when the read failed otherwise (a command that exits non-zero, a locked database): a
        check cannot judge on a count it never got, so it ends ERROR, never PASS or FAIL on "0 effects"."""
        try:
            counts = (await self.wiring.read_effects_now(self.namespace)).counts
        except StoreNotMade as exc:
            self.source_error = exc.message
            return Counter()
        self.source_error = None
        return counts

    async def restart(self, check: str) -> None:
        """SIGKILL the pod and wait until the supervisor has it ready again."""
        target = self.scenario.target
        if target.url is not None and target.kill_command is None:
            raise TargetError(
                "target.url has no kill_command: the harness cannot restart a server it did not start; "
                "give target.kill_command (and restart_command if nothing restarts it) to run this check"
            )
        if not self.supervisor.kill(trigger=f"contract {check}"):
            raise TargetError("the pod was not running when the check meant to kill it")
        await self.wait_ready()

    async def catalog(self) -> dict[str, Any]:
        """The server's ``tools/list`` result, its pages followed (``nextCursor``, at most LIST_PAGES) and
        their tools joined into the first page's result; a ``nextCursor`` left in it says the listing went
        on past them. TargetError if the server will not list them."""
        client = self.client
        assert client is not None, "call inside started()"
        listed: dict[str, Any] = {}
        tools: list[Any] = []
        cursor: object = None
        for _ in range(LIST_PAGES):
            params = {} if cursor is None else {"cursor": cursor}
            res = await self._in_session(partial(self._list, client, params))
            if res.result is None:
                raise TargetError(
                    f"the server did not list its tools: {res.outcome.value} {res.message or ''}"
                )
            listed = listed or dict(res.result)
            page = res.result.get("tools")
            tools += page if isinstance(page, list) else []
            cursor = res.result.get("nextCursor")
            if not isinstance(cursor, str):
                break
        listed["tools"] = tools
        listed.pop("nextCursor", None)
        if isinstance(cursor, str):
            listed["nextCursor"] = cursor
        return listed

    def _list(self, client: McpClient, params: dict[str, Any]) -> Awaitable[CallResult]:
        """One ``tools/list`` request, a new id each time it is sent."""
        return self.wiring.request(client, "tools/list", params, next(self._ids), timeout=30)

    async def tools(self) -> list[dict[str, Any]]:
        """The server's tools (``tools/list``, every page :meth:`catalog` reads)."""
        tools = (await self.catalog()).get("tools")
        return [t for t in tools or [] if isinstance(t, dict)]
