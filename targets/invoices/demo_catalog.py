"""The source article's six-tool demo catalog, on the invoices server, in three description styles.

``INVOICES_CATALOG=demo`` replaces the default catalog (``create_invoice`` and
the harness's ``count_invoices``) with the article's demo: ``create_invoice``
(the server's own, unchanged), ``get_invoice``, ``search_invoices`` (a page
and an opaque, versioned ``h1_`` handle that expires), ``search_next`` (its
continuation), ``send_invoice`` (with a rate quota: ``quota_exceeded``,
retryable after ``retry_after_ms``) and ``void_invoice``. The side-effecting
ones take an idempotency key and record it in the transaction of their
effect, as the atomic design does. Handles live in the store, never in this
process, so they survive a restart and resolve on any replica.

The descriptions (of the tools, their arguments and the search page) come from
``demo_texts.py`` in the style ``INVOICES_DESCRIPTIONS`` names, so the
harness can price one catalog written three ways (the article's section 06).
Two flaws break the handle promises for ``mcp-chaos contract`` to find
(``INVOICES_FLAW``): ``raw_cursor`` (the cursor is readable, unversioned
offsets) and ``expired_500`` (an expired handle is a JSON-RPC internal error).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import inspect
import json
import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from demo_texts import STYLES, Texts, styled
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, create_model

DEMO_FLAWS = ("raw_cursor", "expired_500")
PAGE_MAX = 20
HANDLE_PREFIX = "h1_"
"""The handle format's version: a new encoding gets h2_, and h1_ handles keep working until they expire."""

Refuse = Callable[..., CallToolResult]
"""The server's error renderer: ``refuse(code, message, retryable=..., recovery=..., retry_after_ms=...)``."""


@dataclass(frozen=True)
class DemoConfig:
    style: str
    handle_ttl_ms: int
    send_quota: int
    quota_window_ms: int
    flaw: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DemoConfig | None:
        """The demo's settings, or None for the default catalog; ValueError (one line) when bad."""
        catalog = env.get("INVOICES_CATALOG") or "default"
        if catalog not in ("default", "demo"):
            raise ValueError(f"INVOICES_CATALOG={catalog!r}; choose default or demo")
        flaw = env.get("INVOICES_FLAW") or None
        if catalog == "default":
            named = [n for n in ("INVOICES_DESCRIPTIONS", "INVOICES_HANDLE_TTL_MS") if env.get(n)]
            if flaw in DEMO_FLAWS or named:
                what = f"INVOICES_FLAW={flaw}" if flaw in DEMO_FLAWS else named[0]
                raise ValueError(f"{what} needs INVOICES_CATALOG=demo")
            return None
        style = env.get("INVOICES_DESCRIPTIONS") or "engineered"
        if style not in STYLES:
            raise ValueError(f"INVOICES_DESCRIPTIONS={style!r}; choose one of {', '.join(STYLES)}")

        def whole(name: str, default: int) -> int:
            raw = env.get(name) or str(default)
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{name}={raw!r} must be a whole number >= 1")
            return int(raw)

        return cls(
            style=style,
            handle_ttl_ms=whole("INVOICES_HANDLE_TTL_MS", 15 * 60_000),
            send_quota=whole("INVOICES_SEND_QUOTA", 100),
            quota_window_ms=whole("INVOICES_QUOTA_WINDOW_MS", 60_000),
            flaw=flaw if flaw in DEMO_FLAWS else None,
        )


def _untitled(schema: dict[str, Any]) -> None:
    """Drop the titles pydantic derives from names ("Customer Id" for customer_id) from the result
    schemas this module declares: they repeat the name, and every token of a catalog is paid by every
    agent in every session. (The argument schemas keep theirs: the SDK builds that model.)"""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)


UNTITLED = ConfigDict(json_schema_extra=_untitled)


def described(
    fn: Callable[..., Any], texts: Texts, output: type[BaseModel] | None = None
) -> Callable[..., Any]:
    """``fn`` as a tool whose arguments carry the style's descriptions (and, with ``output``, whose
    result declares that schema); the SDK reads both from the signature. Behaviour is ``fn``'s."""
    signature = inspect.signature(fn, eval_str=True)
    params = [
        p
        if isinstance(p.annotation, type) and issubclass(p.annotation, Context)
        else p.replace(annotation=Annotated[p.annotation, Field(description=texts.args.get(p.name))])
        for p in signature.parameters.values()
    ]
    returns = signature.return_annotation if output is None else Annotated[CallToolResult, output]

    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    tool.__signature__ = signature.replace(parameters=params, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
    return tool


class Invoice(BaseModel):
    model_config = UNTITLED

    invoice_id: str
    customer_id: str
    amount_cents: int
    memo: str
    created_at: str
    status: str


def page_model(texts: Texts) -> type[BaseModel]:
    """The search page's schema, its fields described in the style."""
    return create_model(
        "SearchPage",
        __config__=UNTITLED,
        results=(list[Invoice], Field(description=texts.output.get("results"))),
        next_page=(str | None, Field(description=texts.output.get("next_page"))),
    )


def _result(body: Mapping[str, Any] | str) -> CallToolResult:
    text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=json.loads(text))


def _now() -> tuple[str, int]:
    now = dt.datetime.now(dt.UTC)
    return now.isoformat(timespec="microseconds"), int(now.timestamp() * 1000)


def install_demo(
    server: MCPServer[Any],
    config: DemoConfig,
    *,
    store: Any,
    create_invoice: Callable[..., Any],
    refuse: Refuse,
    annotations: ToolAnnotations | None,
) -> None:
    """Replace the server's default catalog with the demo's six tools, in name order (a stable
    catalog is a cacheable prompt prefix)."""
    store.enable_demo()
    texts = styled(
        config.style,
        handle_ttl_ms=config.handle_ttl_ms,
        send_quota=config.send_quota,
        quota_window_ms=config.quota_window_ms,
    )

    def number_of(invoice_id: str) -> int | None:
        digits = invoice_id.removeprefix("inv_")
        return int(digits) if invoice_id.startswith("inv_") and digits.isdigit() else None

    def not_found(invoice_id: str) -> CallToolResult:
        return refuse(
            "invoice_not_found",
            f"no invoice {invoice_id!r}",
            retryable=False,
            recovery="Check the invoice_id, or find the invoice with search_invoices.",
        )

    def find(invoice_id: str) -> dict[str, Any] | None:
        number = number_of(invoice_id)
        found = [] if number is None else store.invoices(invoice_id=number)
        return found[0] if found else None

    async def get_invoice(invoice_id: str) -> CallToolResult:
        invoice = find(invoice_id)
        return not_found(invoice_id) if invoice is None else _result(invoice)

    def page(query: dict[str, Any], after_id: int) -> CallToolResult:
        found = store.invoices(
            customer_id=query.get("customer_id"),
            status=query.get("status"),
            after_id=after_id,
            limit=query["limit"] + 1,
        )
        results, more = found[: query["limit"]], len(found) > query["limit"]
        next_page = None
        if more:
            last = int(results[-1]["invoice_id"].removeprefix("inv_"))
            next_page = handle_for(query, last)
        return _result({"results": results, "next_page": next_page})

    def handle_for(query: dict[str, Any], after_id: int) -> str:
        if config.flaw == "raw_cursor":  # what an opaque handle prevents: a cursor an agent can edit
            return urllib.parse.urlencode(
                {**{k: v for k, v in query.items() if v is not None}, "after": after_id}
            )
        handle = HANDLE_PREFIX + secrets.token_urlsafe(16)
        _, now_ms = _now()
        state = json.dumps({"query": query, "after_id": after_id})
        store.save_handle(handle, state, now_ms + config.handle_ttl_ms, now_ms)
        return handle

    async def search_invoices(
        customer_id: str | None = None, status: str | None = None, limit: int = PAGE_MAX
    ) -> CallToolResult:
        if not 1 <= limit <= PAGE_MAX or status not in (None, "open", "sent", "void"):
            return refuse(
                "invalid_search",
                f"limit must be 1 to {PAGE_MAX} and status open, sent or void",
                retryable=False,
                recovery=f"Call again with limit from 1 to {PAGE_MAX} and status open, sent, void or none.",
            )
        return page({"customer_id": customer_id, "status": status, "limit": limit}, 0)

    async def search_next(next_page: str) -> CallToolResult:
        if config.flaw == "raw_cursor":
            fields = dict(urllib.parse.parse_qsl(next_page))
            query = {"customer_id": fields.get("customer_id"), "status": fields.get("status")}
            return page({**query, "limit": int(fields.get("limit", PAGE_MAX))}, int(fields.get("after", 0)))
        found = store.load_handle(next_page) if next_page.startswith(HANDLE_PREFIX) else None
        if found is None:
            return refuse(
                "handle_invalid",
                "next_page is not a handle this server issued",
                retryable=False,
                recovery="Pass next_page exactly as it was returned, or run search_invoices again.",
            )
        state, expires_at_ms = found
        if _now()[1] >= expires_at_ms:
            if config.flaw == "expired_500":
                raise MCPError(INTERNAL_ERROR, "Internal error")
            return refuse(
                "handle_expired",
                f"this next_page expired (handles live {config.handle_ttl_ms // 1000} s)",
                retryable=False,
                recovery="Run search_invoices again and continue from its first page.",
            )
        saved = json.loads(state)
        return page(saved["query"], saved["after_id"])

    def keyed_event(
        tool: str, invoice_id: str, idempotency_key: str, kind: str, extra: Mapping[str, Any]
    ) -> tuple[str, str, int, dict[str, Any]] | CallToolResult:
        """The checks before a keyed event: a replay's response, a refusal, or what to record."""
        request_hash = hashlib.sha256(json.dumps([tool, invoice_id, *extra.values()]).encode()).hexdigest()
        recorded = store.find_key(idempotency_key)
        if recorded is not None:
            if recorded[0] != request_hash:
                return refuse(
                    "idempotency_key_reused",
                    "this idempotency_key was used for another request",
                    retryable=False,
                    recovery="Use a new key for a new intent; reuse a key only to retry the same one.",
                )
            return _result(recorded[1])
        invoice = find(invoice_id)
        if invoice is None:
            return not_found(invoice_id)
        if invoice["status"] == "void":
            return refuse(
                "invoice_void",
                f"{invoice_id} is void",
                retryable=False,
                recovery="Nothing can change a void invoice; create a new one if one is needed.",
            )
        at, at_ms = _now()
        return request_hash, at, at_ms, {"invoice_id": invoice_id, "status": kind, f"{kind}_at": at, **extra}

    async def send_invoice(invoice_id: str, idempotency_key: str) -> CallToolResult:
        checked = keyed_event("send_invoice", invoice_id, idempotency_key, "sent", {})
        if isinstance(checked, CallToolResult):
            return checked
        request_hash, at, at_ms, body = checked
        window = store.events_since("sent", at_ms - config.quota_window_ms)
        if len(window) >= config.send_quota:
            wait_ms = window[-config.send_quota] + config.quota_window_ms - at_ms
            return refuse(
                "quota_exceeded",
                f"at most {config.send_quota} invoices are sent per {config.quota_window_ms // 1000} s",
                retryable=True,
                retry_after_ms=max(1, wait_ms),
                recovery="Wait retry_after_ms, then retry with the same idempotency_key.",
            )
        number = number_of(invoice_id)
        response = json.dumps(body, separators=(",", ":"))
        stored, _ = store.record_event_with_key(
            idempotency_key, request_hash, number, "sent", response, at, at_ms
        )
        return _result(stored)

    async def void_invoice(invoice_id: str, reason: str, idempotency_key: str) -> CallToolResult:
        checked = keyed_event("void_invoice", invoice_id, idempotency_key, "void", {"reason": reason})
        if isinstance(checked, CallToolResult):
            return checked
        request_hash, at, at_ms, body = checked
        number = number_of(invoice_id)
        response = json.dumps(body, separators=(",", ":"))
        stored, _ = store.record_event_with_key(
            idempotency_key, request_hash, number, "void", response, at, at_ms
        )
        return _result(stored)

    read_only = ToolAnnotations(read_only_hint=True)
    page_schema = page_model(texts["search_invoices"])
    tools: list[tuple[Callable[..., Any], ToolAnnotations | None, type[BaseModel] | None]] = [
        (create_invoice, annotations, None),
        (get_invoice, read_only, None),
        (search_invoices, read_only, page_schema),
        (search_next, read_only, page_schema),
        (send_invoice, None, None),
        (void_invoice, None, None),
    ]
    for name in ("create_invoice", "count_invoices"):
        server.remove_tool(name)
    for fn, declared, output in tools:
        text = texts[fn.__name__]
        server.add_tool(described(fn, text, output), description=text.description, annotations=declared)
