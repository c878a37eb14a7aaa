"""A reference MCP server with one side-effecting tool, ``create_invoice``, and known idempotency.

It is an ordinary MCP server on the official SDK (``MCPServer``, Streamable
HTTP, the 2026-07-28 stateless path, uvicorn on 127.0.0.1:$PORT) with a real
SQLite store, exactly like a user's server would be; it never imports the
harness. Its idempotency design is chosen at start-up, so the harness can be
shown to catch the bugs it claims to catch and to pass the design that has
none:

``naive``   ignores the key: every call that commits creates an invoice.
``keyed``   read-then-write: look the key up; create the invoice and commit;
            then store the key record in a *second* commit. A crash (or a
            cancellation) between the two commits, or two concurrent attempts
            with one key, gives a duplicate.
``atomic``  the invoice and the key record in *one* transaction, with a unique
            constraint on the key: a retry replays. An attempt whose key is
            still in flight in this pod gets a retryable ``idempotency_key_in_use``
            (the IETF draft's 409) with ``retry_after_ms``; a loser that got
            past that (the key was in flight in a pod that died) rolls back in
            the transaction and replays the winner.

Replays return the stored original result byte for byte. Configuration is by
environment variable (see ``targets/invoices/README.md``):

PORT, HOST                      where to listen (HOST must be a loopback address)
INVOICES_DB                     SQLite file (WAL; survives SIGKILL) or a postgresql:// URL
INVOICES_SINK_URL               optional downstream: every invoice created is POSTed there
                                ({"marker": memo, ...}), as a payment provider would be called,
                                with the intent's key in an Idempotency-Key header
INVOICES_DOWNSTREAM             after_commit (default: the downstream hears of an invoice once it
                                exists) | before_commit (it is called first, as a card is charged
                                before the invoice is recorded: a retry after a crash calls it
                                again, which is safe only if it deduplicates by the key)
INVOICES_LEDGER                 optional JSON-lines file: every invoice created is appended there
                                ({"marker": memo, ...}), a store that no SQL query reads
INVOICES_MODE                   naive | keyed | atomic
INVOICES_TRANSPORT              json | sse (sse streams progress notifications) | stdio (MCP on
                                stdin and stdout; PORT is then not needed)
INVOICES_SESSIONS               stateless (default) | stateful: 2025-protocol clients get a
                                session (Mcp-Session-Id, kept in this process's memory, so a
                                restarted server answers 404 to the old id); 2026-07-28 requests
                                are served stateless either way
INVOICES_KEY_FROM               argument (default: the idempotency_key argument) | meta (the
                                request's _meta.idempotencyKey) | header (Idempotency-Key)
INVOICES_EVENT_STORE            memory: keep every SSE event of stateful sessions in this process's
                                memory, with ids, so a 2025 client whose stream broke can resume
                                it (GET with Last-Event-ID), until the process dies
INVOICES_SSE_POLL_MS            with INVOICES_EVENT_STORE=memory and SSE: the server closes a
                                create_invoice's stream right after its priming event, which tells
                                the client to come back after this many milliseconds (retry:), as
                                2025-11-25 servers may (SEP-1699); the answer waits in the event
                                store for the client's GET with Last-Event-ID
INVOICES_SSE_POLLS              with INVOICES_SSE_POLL_MS: close the stream this many times (default
                                1), every 2 intervals, so the client's GET finds it closed again
INVOICES_BEARER_TOKEN           if set, HTTP requests need "Authorization: Bearer <token>";
                                others get 401 with WWW-Authenticate
INVOICES_OAUTH_ISSUER           an OAuth authorization server's URL (targets/authserver): the
                                server is a protected resource as the MCP specification says
                                (its metadata at /.well-known/oauth-protected-resource/mcp, a 401
                                naming it, tokens with the scope "invoices" required); tokens are
                                JWTs checked with INVOICES_OAUTH_KEY (HS256, shared with the
                                authorization server), so a restarted server takes them still
INVOICES_PRE_COMMIT_MS          work before the business commit
INVOICES_BETWEEN_COMMITS_MS     work between the business commit and the key record
INVOICES_POST_COMMIT_MS         work after the commits, before the response
INVOICES_LATENCY_JITTER         0..1: each wait is drawn uniformly from base*(1±jitter), so
                                concurrent calls drift out of lockstep as real work does
INVOICES_FAILPOINT              POINT@N: SIGKILL this process the N-th time (1-based,
                                counted per store) a call reaches POINT, one of
                                before_business_commit, after_business_commit,
                                after_key_record, before_response
INVOICES_FLAW                   one contract bug on top of keyed or atomic, for the contract checks
                                to find: payload_dedup (a payload seen before is a replay, whatever
                                its key), rerender (a replay is rendered again, with a new
                                timestamp), exists_error (a replay is an "already exists" error),
                                memory_keys (atomic, but the keys live in this process's memory),
                                apologize (answers success and does nothing), sloppy_errors
                                (errors as bare text, no code or recovery), endless_questions (the
                                MRTR question about an ambiguous customer is asked forever),
                                key_first (keyed, but the key record, holding the response to be,
                                commits before the invoice: a crash between them loses it, and a
                                retry between them is answered an invoice not made yet),
                                unkeyed_downstream (the downstream is called without the key),
                                swallowed_errors (an empty customer_id stores nothing and answers a
                                success whose text is the database's error)
INVOICES_REQUEST_STATE          process (default: the SDK's per-process key, lost with the process) |
                                shared (INVOICES_REQUEST_STATE_KEY, else a key file beside the store):
                                the key that seals the requestState of the customer question (see
                                questions.py: customer_id "acme" is asked about)
INVOICES_ANNOTATIONS            what create_invoice declares of itself: idempotent (idempotentHint:
                                true) or readonly (readOnlyHint: true, a lie); default none
INVOICES_CATALOG                default | demo: the source article's six-tool catalog (demo_catalog.py,
                                with INVOICES_DESCRIPTIONS, INVOICES_HANDLE_TTL_MS, INVOICES_SEND_QUOTA,
                                INVOICES_QUOTA_WINDOW_MS and the flaws raw_cursor, expired_500)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import random
import signal
import sys
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt
import uvicorn
from demo_catalog import DEMO_FLAWS, DemoConfig, install_demo
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.streamable_http import EventMessage, EventStore
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from questions import STATE_MODES, Unresolved, resolve_customer, state_security
from stores import open_store

MODES = ("naive", "keyed", "atomic")
FLAWS = (
    "payload_dedup",
    "rerender",
    "exists_error",
    "memory_keys",
    "apologize",
    "sloppy_errors",
    "endless_questions",
    "key_first",
    "unkeyed_downstream",
    "swallowed_errors",
)
DOWNSTREAM = ("after_commit", "before_commit")
FAILPOINTS = ("before_business_commit", "after_business_commit", "after_key_record", "before_response")


class ConfigError(Exception):
    """A bad environment variable; printed as one line, exit code 2."""


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    db: str
    sink_url: str | None
    downstream_first: bool
    ledger: str | None
    mode: str
    transport: str
    stateful: bool
    bearer_token: str | None
    oauth: tuple[str, str] | None
    """The authorization server's URL and the key its tokens are signed with (INVOICES_OAUTH_*)."""
    key_from: str
    event_store: bool
    sse_poll_ms: int | None
    sse_polls: int
    pre_commit_s: float
    between_commits_s: float
    post_commit_s: float
    jitter: float
    failpoint: tuple[str, int] | None
    flaw: str | None
    annotations: str | None
    request_state: RequestStateSecurity | None
    """What seals the requestState of the customer question; None: the SDK's per-process key."""
    demo: DemoConfig | None

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Config:
        def number(name: str, default: str) -> float:
            raw = env.get(name, default)
            try:
                value = float(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a number of milliseconds") from None
            if value < 0:
                raise ConfigError(f"{name}={raw!r} must be >= 0")
            return value / 1000.0

        transport = env.get("INVOICES_TRANSPORT", "json")
        if transport not in ("json", "sse", "stdio"):
            raise ConfigError(f"INVOICES_TRANSPORT={transport!r}; choose json, sse or stdio")
        if "INVOICES_DB" not in env or ("PORT" not in env and transport != "stdio"):
            raise ConfigError(
                "PORT and INVOICES_DB must be set (e.g. PORT=8123 INVOICES_DB=/tmp/invoices.db)"
            )
        try:
            port = int(env.get("PORT", "0"))
        except ValueError:
            raise ConfigError(f"PORT={env['PORT']!r} is not a port number") from None
        mode = env.get("INVOICES_MODE", "atomic")
        if mode not in MODES:
            raise ConfigError(f"INVOICES_MODE={mode!r}; choose one of {', '.join(MODES)}")
        key_from = env.get("INVOICES_KEY_FROM", "argument")
        if key_from not in ("argument", "meta", "header"):
            raise ConfigError(f"INVOICES_KEY_FROM={key_from!r}; choose argument, meta or header")
        poll = env.get("INVOICES_SSE_POLL_MS", "")
        if poll and not poll.isdigit():
            raise ConfigError(f"INVOICES_SSE_POLL_MS={poll!r}; give milliseconds, e.g. 500")
        polls = env.get("INVOICES_SSE_POLLS", "1")
        if not polls.isdigit() or int(polls) < 1:
            raise ConfigError(f"INVOICES_SSE_POLLS={polls!r}; give how many times, 1 or more")
        issuer, oauth_key = env.get("INVOICES_OAUTH_ISSUER", ""), env.get("INVOICES_OAUTH_KEY", "")
        if bool(issuer) != bool(oauth_key):
            raise ConfigError("INVOICES_OAUTH_ISSUER and INVOICES_OAUTH_KEY go together")
        oauth = (issuer, oauth_key) if issuer else None
        sessions = env.get("INVOICES_SESSIONS", "stateless")
        if sessions not in ("stateless", "stateful"):
            raise ConfigError(f"INVOICES_SESSIONS={sessions!r}; choose stateless or stateful")
        host = env.get("HOST", "127.0.0.1")
        if not (host.startswith("127.") or host in ("::1", "localhost")):
            raise ConfigError(f"HOST={host!r}: the reference target only listens on loopback")
        raw_jitter = env.get("INVOICES_LATENCY_JITTER", "0")
        try:
            jitter = float(raw_jitter)
        except ValueError:
            jitter = -1.0
        if not 0 <= jitter <= 1:
            raise ConfigError(f"INVOICES_LATENCY_JITTER={raw_jitter!r} must be a number from 0 to 1")
        failpoint = None
        if raw := env.get("INVOICES_FAILPOINT", ""):
            point, _, nth = raw.partition("@")
            if point not in FAILPOINTS or not nth.isdigit() or int(nth) < 1:
                raise ConfigError(
                    f"INVOICES_FAILPOINT={raw!r}; use POINT@N with POINT in {', '.join(FAILPOINTS)}"
                )
            failpoint = (point, int(nth))
        flaw = env.get("INVOICES_FLAW") or None
        flaws = FLAWS + DEMO_FLAWS  # the demo catalog's (demo_catalog.py) need INVOICES_CATALOG=demo too
        if flaw is not None and (flaw not in flaws or mode == "naive"):
            raise ConfigError(
                f"INVOICES_FLAW={flaw!r}; choose one of {', '.join(flaws)}, with mode keyed or atomic"
            )
        if flaw == "key_first" and mode != "keyed":
            raise ConfigError("INVOICES_FLAW='key_first' is a keyed design's bug: use INVOICES_MODE=keyed")
        downstream = env.get("INVOICES_DOWNSTREAM", "after_commit")
        if downstream not in DOWNSTREAM:
            raise ConfigError(f"INVOICES_DOWNSTREAM={downstream!r}; choose after_commit or before_commit")
        annotations = env.get("INVOICES_ANNOTATIONS") or None
        if annotations not in (None, "idempotent", "readonly"):
            raise ConfigError(f"INVOICES_ANNOTATIONS={annotations!r}; choose idempotent or readonly")
        state_mode = env.get("INVOICES_REQUEST_STATE", "process")
        if state_mode not in STATE_MODES:
            raise ConfigError(f"INVOICES_REQUEST_STATE={state_mode!r}; choose process or shared")
        try:
            request_state = state_security(state_mode, env, env["INVOICES_DB"])
            demo = DemoConfig.from_env(env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            host=host,
            port=port,
            db=env["INVOICES_DB"],
            sink_url=env.get("INVOICES_SINK_URL") or None,
            downstream_first=downstream == "before_commit",
            ledger=env.get("INVOICES_LEDGER") or None,
            mode=mode,
            transport=transport,
            stateful=sessions == "stateful",
            bearer_token=env.get("INVOICES_BEARER_TOKEN") or None,
            oauth=oauth,
            key_from=key_from,
            event_store=env.get("INVOICES_EVENT_STORE", "") == "memory",
            sse_poll_ms=int(poll) if poll else None,
            sse_polls=int(polls),
            pre_commit_s=number("INVOICES_PRE_COMMIT_MS", "0"),
            between_commits_s=number("INVOICES_BETWEEN_COMMITS_MS", "0"),
            post_commit_s=number("INVOICES_POST_COMMIT_MS", "0"),
            jitter=jitter,
            failpoint=failpoint,
            flaw=flaw,
            annotations=annotations,
            request_state=request_state,
            demo=demo,
        )


def error_result(
    code: str, message: str, *, retryable: bool, recovery: str, retry_after_ms: int | None = None
) -> CallToolResult:
    """A tool error following the article's error contract, as JSON in the text block."""
    body = {
        "code": code,
        "message": message,
        "retryable": retryable,
        "retry_after_ms": retry_after_ms,
        "recovery": recovery,
    }
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], is_error=True)


def stored_result(response: str) -> CallToolResult:
    """The result for a stored response text: the same bytes on every replay."""
    return CallToolResult(
        content=[TextContent(type="text", text=response)], structured_content=json.loads(response)
    )


class JwtTokens:
    """The token verifier of INVOICES_OAUTH_*: an HS256 JWT of the authorization server, for this
    resource, not expired, with the scope the tools need."""

    def __init__(self, issuer: str, key: str, resource: str) -> None:
        self.issuer, self.key, self.resource = issuer, key, resource

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = jwt.decode(
                token, self.key, algorithms=["HS256"], issuer=self.issuer, audience=self.resource
            )
        except jwt.PyJWTError:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("sub")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=self.resource,
        )


def oauth_settings(config: Config) -> dict[str, Any]:
    """MCPServer's arguments for INVOICES_OAUTH_*: a protected resource, tokens checked offline."""
    if config.oauth is None:
        return {}
    issuer, key = config.oauth
    resource = f"http://{config.host}:{config.port}/mcp"
    return {
        "auth": AuthSettings.model_validate(
            {"issuer_url": issuer, "resource_server_url": resource, "required_scopes": ["invoices"]}
        ),
        "token_verifier": JwtTokens(issuer, key, resource),
    }


def build_server(config: Config) -> MCPServer[Any]:
    store = open_store(config.db)
    server: MCPServer[Any] = MCPServer(
        "reference-invoices",
        version="1.0.0",
        log_level="WARNING",
        request_state_security=config.request_state,
        **oauth_settings(config),
    )
    in_flight: set[str] = set()  # atomic: keys of the calls this process is working on right now
    call_ms = (config.pre_commit_s + config.between_commits_s + config.post_commit_s) * 1000
    retry_after_ms = max(10, round(call_ms))

    def failpoint(point: str) -> None:
        if config.failpoint is None or config.failpoint[0] != point:
            return
        if store.failpoint_hit(point) == config.failpoint[1]:
            # The real thing, not an exception: the process dies as if the pod were killed. As PID 1
            # of a container it cannot SIGKILL itself (the kernel shields a namespace's init), so it
            # exits at once instead: no cleanup either way, and 137 is what `docker kill` leaves.
            if os.getpid() == 1:
                os._exit(137)
            os.kill(os.getpid(), signal.SIGKILL)

    memory_keys: dict[str, tuple[str, str]] = {}  # flaw memory_keys: key -> (request hash, response)

    def refuse(code: str, message: str, **contract: Any) -> CallToolResult:
        if config.flaw == "sloppy_errors":
            return CallToolResult(content=[TextContent(type="text", text=f"Error: {message}")], is_error=True)
        return error_result(code, message, **contract)

    def find(idempotency_key: str, request_hash: str) -> tuple[str, str] | None:
        """A recorded call: by key, or with the flaws, by payload or from this process's memory."""
        found: tuple[str, str] | None
        if config.flaw == "payload_dedup":
            found = store.find_hash(request_hash)
        elif config.flaw == "memory_keys":
            found = memory_keys.get(idempotency_key)
        else:
            found = store.find_key(idempotency_key)
        return found

    def replay(found: tuple[str, str], now: str) -> CallToolResult:
        if config.flaw == "exists_error":
            return refuse(
                "already_exists", "an invoice with this key already exists", retryable=False, recovery="None."
            )
        if config.flaw == "rerender":
            return stored_result(json.dumps({**json.loads(found[1]), "created_at": now}))
        return stored_result(found[1])

    def key_of(ctx: Context, argument: str | None) -> str | None:
        """The intent's key from where this server is configured to take it."""
        if config.key_from == "meta":
            meta = ctx.request_context.meta or {}
            key = meta.get("idempotencyKey")
            return key if isinstance(key, str) else None
        if config.key_from == "header":
            return (ctx.headers or {}).get("idempotency-key")
        return argument

    def log_trace(ctx: Context, memo: str) -> None:
        """One stderr line per call that carries a W3C ``traceparent`` (the HTTP header, else
        ``_meta.traceparent``, the only place over stdio), before any work: a server's own record
        of which attempt it served, as its tracer would keep it, written even if it dies next."""
        traceparent = (ctx.headers or {}).get("traceparent")
        if traceparent is None:
            value = (ctx.request_context.meta or {}).get("traceparent")
            traceparent = value if isinstance(value, str) else None
        if traceparent is not None:
            print(
                f"invoices: tools/call create_invoice memo={memo} traceparent={traceparent}",
                file=sys.stderr,
                flush=True,
            )

    async def work(seconds: float, ctx: Context, step: int) -> None:
        if config.transport == "sse":
            await ctx.report_progress(step, 3)
        if seconds > 0:
            await asyncio.sleep(seconds * random.uniform(1 - config.jitter, 1 + config.jitter))

    async def notify_downstream(invoice: dict[str, Any], key: str | None) -> None:
        """Tell the downstream (the effect sink, a ledger) of an invoice: effects outside our store.

        The intent's key goes with it (``Idempotency-Key``), so a downstream that deduplicates by it
        makes a second call for one intent harmless; naive ignores keys, and the flaw
        unkeyed_downstream leaves it out.
        """
        if config.ledger is not None:
            with open(config.ledger, "a", encoding="utf-8") as ledger:
                ledger.write(json.dumps({"marker": invoice["memo"], **invoice}) + "\n")
        if config.sink_url is None:
            return
        body = json.dumps({"marker": invoice["memo"], **invoice}).encode()
        headers = {"Content-Type": "application/json"}
        if key is not None and config.mode != "naive" and config.flaw != "unkeyed_downstream":
            headers["Idempotency-Key"] = key
        request = urllib.request.Request(config.sink_url, data=body, headers=headers, method="POST")
        await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=10).read())

    @server.tool(
        description=("Counts invoices per memo for memos starting with memo_prefix. Read-only; for audits.")
    )
    async def count_invoices(memo_prefix: str) -> CallToolResult:
        effects = store.effects(memo_prefix)
        return CallToolResult(
            content=[TextContent(type="text", text=f"{len(effects)} memos")],
            structured_content={"effects": effects},
        )

    declared = {
        "idempotent": ToolAnnotations(idempotent_hint=True, read_only_hint=False),
        "readonly": ToolAnnotations(read_only_hint=True),
    }.get(config.annotations or "")

    @server.tool(
        annotations=declared,
        description=(
            "Creates an invoice. Pass an idempotency_key that is unique per business intent; "
            "a retry with the same key returns the first invoice instead of creating a new one."
        ),
    )
    async def create_invoice(
        customer_id: str, amount_cents: int, memo: str, ctx: Context, idempotency_key: str | None = None
    ) -> CallToolResult | InputRequiredResult:
        log_trace(ctx, memo)
        if config.sse_poll_ms is not None:
            await PRIMED.wait(ctx.request_id)  # a stream closed before its priming event is no poll
            await ctx.close_sse_stream()  # the client comes back for the answer after retry:
            for _ in range(config.sse_polls - 1):  # and finds the stream closed again, each time
                await asyncio.sleep(2 * config.sse_poll_ms / 1000)
                await ctx.close_sse_stream()
        if config.flaw == "apologize":
            return CallToolResult(content=[TextContent(type="text", text="Sorry, something went wrong.")])
        if config.flaw == "swallowed_errors" and not customer_id:
            # The insert failed below the tool and the error text went back as its answer.
            text = 'Error adding record: relation "customers" does not exist'
            return CallToolResult(content=[TextContent(type="text", text=text)])
        if amount_cents <= 0:
            return refuse(
                "invalid_amount",
                "amount_cents must be positive",
                retryable=False,
                recovery="Send a positive amount.",
            )
        # Before the key: a question makes no effect, and the answer decides the payload.
        customer = resolve_customer(
            customer_id, ctx.input_responses, ctx.request_state, endless=config.flaw == "endless_questions"
        )
        if isinstance(customer, InputRequiredResult):
            return customer
        if isinstance(customer, Unresolved):
            return refuse(
                "customer_ambiguous",
                f"{customer.name!r} matches {len(customer.choices)} customers and no answer chose one",
                retryable=False,
                recovery=f"Call again with customer_id set to one of: {', '.join(customer.choices)}.",
            )
        customer_id = customer
        idempotency_key = key_of(ctx, idempotency_key)
        request_hash = hashlib.sha256(
            json.dumps([customer_id, amount_cents, memo], separators=(",", ":")).encode()
        ).hexdigest()
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
        if config.mode != "naive":
            if not idempotency_key:
                return refuse(
                    "idempotency_key_required",
                    "create_invoice needs an idempotency_key",
                    retryable=False,
                    recovery="Generate a unique key for this invoice and call again with it.",
                )
            found = find(idempotency_key, request_hash)
            if found is not None:
                if found[0] != request_hash:
                    return refuse(
                        "idempotency_key_reused",
                        "this idempotency_key was used for a different invoice",
                        retryable=False,
                        recovery="Use a new key for a new invoice; reuse a key only to retry the same one.",
                    )
                return replay(found, now)
            if config.mode == "atomic":
                if idempotency_key in in_flight:
                    return refuse(
                        "idempotency_key_in_use",
                        "another call with this idempotency_key is still in progress",
                        retryable=True,
                        retry_after_ms=retry_after_ms,
                        recovery="Wait retry_after_ms, then retry with the same key to get its result.",
                    )
                in_flight.add(idempotency_key)
                try:
                    return await create(
                        customer_id, amount_cents, memo, idempotency_key, request_hash, now, ctx
                    )
                finally:
                    in_flight.discard(idempotency_key)
        return await create(customer_id, amount_cents, memo, idempotency_key, request_hash, now, ctx)

    async def create(
        customer_id: str,
        amount_cents: int,
        memo: str,
        idempotency_key: str | None,
        request_hash: str,
        now: str,
        ctx: Context,
    ) -> CallToolResult:
        """The work and the commit(s), after the key checks."""
        await work(config.pre_commit_s, ctx, 1)
        if config.downstream_first:  # charge first, record after: a retry charges again
            charge = {"customer_id": customer_id, "amount_cents": amount_cents, "memo": memo}
            await notify_downstream(charge, idempotency_key)
        failpoint("before_business_commit")
        if config.mode == "atomic" and config.flaw != "memory_keys":
            assert idempotency_key is not None
            response, created = store.create_invoice_with_key(
                idempotency_key, request_hash, customer_id, amount_cents, memo, now
            )
            failpoint("after_business_commit")
            failpoint("after_key_record")
            if created and not config.downstream_first:
                await notify_downstream(json.loads(response), idempotency_key)
            await work(config.between_commits_s, ctx, 2)
        elif config.flaw == "key_first":
            assert idempotency_key is not None
            # The key record promises an invoice that does not exist yet: a crash before the invoice's
            # own commit leaves a key that replays a result nobody created.
            invoice_id, response = store.reserve_invoice(customer_id, amount_cents, memo, now)
            store.record_key(idempotency_key, request_hash, response, now)
            await work(config.between_commits_s, ctx, 2)
            store.create_invoice(customer_id, amount_cents, memo, now, invoice_id)
            failpoint("after_business_commit")
            if not config.downstream_first:
                await notify_downstream(json.loads(response), idempotency_key)
        else:
            response = store.create_invoice(customer_id, amount_cents, memo, now)
            failpoint("after_business_commit")
            if not config.downstream_first:
                await notify_downstream(json.loads(response), idempotency_key)
            await work(config.between_commits_s, ctx, 2)
            if config.flaw == "memory_keys":
                assert idempotency_key is not None
                memory_keys[idempotency_key] = (request_hash, response)
            elif config.mode != "naive":
                assert idempotency_key is not None
                store.record_key(idempotency_key, request_hash, response, now)
            failpoint("after_key_record")
        await work(config.post_commit_s, ctx, 3)
        failpoint("before_response")
        return stored_result(response)

    if config.demo is not None:
        install_demo(
            server,
            config.demo,
            store=store,
            create_invoice=create_invoice,
            refuse=refuse,
            annotations=declared,
        )
    return server


class MemoryEventStore(EventStore):
    """Every SSE event of this process, in order, for resuming a broken stream (2025 resumability).

    In memory, like the SDKs' own examples: a stream can be resumed while this
    process lives, never after it was killed.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []  # (event id, stream id, message or None)
        self.position: dict[str, int] = {}

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self.events) + 1)
        self.position[event_id] = len(self.events)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        start = self.position.get(last_event_id)
        if start is None:
            return None
        stream_id = self.events[start][1]
        for event_id, stream, message in self.events[start + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class PrimingSent:
    """ASGI middleware (INVOICES_SSE_POLL_MS): which calls' event streams have sent their priming event.

    The SDK sends a stream's priming event (its id and ``retry:``) from a task of its own; a tool that
    closes its stream before that task ran leaves the client nothing to come back with, and a client
    then sends the call again: a duplicate of the reference target's making, not of the design under
    test. So the tool waits until the bytes of the priming event have gone to the client.
    """

    def __init__(self) -> None:
        self.app: Any = None
        """The server's ASGI app, set once it is built."""
        self._sent: dict[str, asyncio.Event] = {}

    async def wait(self, request_id: str, timeout_s: float = 10.0) -> None:
        sent = self._sent.setdefault(request_id, asyncio.Event())
        try:
            await asyncio.wait_for(sent.wait(), timeout_s)
        except TimeoutError:
            pass  # a client that never read its stream: close it all the same
        finally:
            self._sent.pop(request_id, None)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, ids = bytearray(), []

        async def reading() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        request = json.loads(body)
                    except ValueError:
                        request = None
                    if isinstance(request, dict) and "id" in request:
                        ids.append(str(request["id"]))
            return message

        async def sending(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and ids and b"id:" in message.get("body", b""):
                self._sent.setdefault(ids[0], asyncio.Event()).set()

        await self.app(scope, reading, sending)


PRIMED = PrimingSent()
"""One per process, as the server is."""


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>``, else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            body = json.dumps(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Unauthorized"}}
            ).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="invoices"'),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def main() -> int:
    try:
        config = Config.from_env(dict(os.environ))
    except ConfigError as exc:
        print(f"invoices: {exc}", file=sys.stderr)
        return 2
    server = build_server(config)
    if config.transport == "stdio":
        # stdout carries the protocol: everything for people goes to stderr.
        print(
            f"invoices: mode={config.mode} db={config.db} serving MCP on stdio", file=sys.stderr, flush=True
        )
        asyncio.run(server.run_stdio_async())
        return 0
    app: Any = server.streamable_http_app(
        json_response=config.transport == "json",
        stateless_http=not config.stateful,
        event_store=MemoryEventStore() if config.event_store else None,
        retry_interval=config.sse_poll_ms,
        host=config.host,
    )
    if config.sse_poll_ms is not None:
        PRIMED.app, app = app, PRIMED
    if config.bearer_token is not None:
        app = BearerAuth(app, config.bearer_token)
    print(
        f"invoices: mode={config.mode} transport={config.transport} "
        f"sessions={'stateful' if config.stateful else 'stateless'} db={config.db} "
        f"listening on http://{config.host}:{config.port}/mcp",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
