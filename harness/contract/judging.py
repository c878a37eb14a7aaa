"""What the contract checks conclude from what they saw: pure functions, no server, no I/O.

A check (:mod:`harness.contract.checks`) makes the calls; what an answer says
(its error body, whether it keeps the error contract, whether it is a clear
refusal, whether it is a failure dressed as a success, which records it
acknowledges, whether two answers are the same) and what a catalog breaks of
the advice (keys where effects are, sentences, few tools, stable listings) is
judged here, so every judgement is tested on answers written by hand.

Errors are read as a model reads them: a JSON body in ``structuredContent``, in
the text, or in the text after the Python SDK's ``Error executing tool NAME: ``
prefix (how ``ToolError(json.dumps(...))`` reaches a client) all keep the
contract; the last earns a note that ``structuredContent`` is cleaner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.catalog import Tool
from harness.client.messages import CallResult
from harness.history import Outcome, excerpt
from harness.replies import reads_as_failure

MAX_TOOLS = 15
MAX_SENTENCES = 3
"""One sentence of purpose, one of rules (the first article's FAQ), and one to spare."""
SENTENCE_END = re.compile(r"[.!?](\s|$)")
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
SDK_PREFIX = re.compile(r"^Error executing tool [^:\s]+: ")
"""What the Python SDK puts before the text of an exception a tool raised (``ToolError``)."""
ID_NAME = re.compile(r"^(id|uuid)$|_id$|[a-z0-9]Id$", re.I)
"""A result field that names a record: ``id``, ``invoice_id``, ``noteId``."""
JSONRPC_STANDARD = {-32700, -32600, -32601, -32602, -32603}
SESSION_STYLE = re.compile(
    r"^(start|begin|open|end|close)_?session|^(log_?in|connect|set_?context|use_|select_)"
)
KEYLESS = " changes state but takes no idempotency key"
RETRY_WORDS = re.compile(r"\bretr(y|ies|ying)\b|\breuse\b|\bsame key\b", re.I)


# -- answers


def shown(res: CallResult) -> dict[str, Any]:
    """A response as evidence: outcome, and what the server said."""
    out: dict[str, Any] = {"outcome": res.outcome.value}
    if res.detail:
        out["detail"] = str(res.detail)
    if res.result is not None:
        out["content"] = res.result.get("content")
        if "structuredContent" in res.result:
            out["structuredContent"] = res.result.get("structuredContent")
    elif res.message:
        out["message"] = res.message
    return out


def same_result(a: CallResult, b: CallResult) -> bool:
    """Identical content and structuredContent, compared exactly."""
    ra, rb = a.result or {}, b.result or {}
    return ra.get("content") == rb.get("content") and ra.get("structuredContent") == rb.get(
        "structuredContent"
    )


def is_error(res: CallResult) -> bool:
    """An answer the error contract applies to: a tool error, or a JSON-RPC error with a code."""
    return res.outcome is Outcome.TOOL_ERROR or (
        res.outcome is Outcome.PROTOCOL_ERROR and bool(res.error_code)
    )


def _first_text(res: CallResult) -> str | None:
    for block in (res.result or {}).get("content") or ():
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
    return None


def _json_object(text: str) -> Mapping[str, Any] | None:
    try:
        body = json.loads(text)
    except (ValueError, TypeError):
        return None
    return body if isinstance(body, dict) else None


def error_body(res: CallResult) -> Mapping[str, Any] | None:
    """A tool error's machine-readable body: structuredContent, or a JSON object in its first text
    block, alone or after the SDK's ``Error executing tool NAME: `` prefix."""
    result = res.result or {}
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]  # type: ignore[no-any-return]
    text = _first_text(res)
    if text is None:
        return None
    return _json_object(text) or _json_object(SDK_PREFIX.sub("", text, count=1))


def sdk_wrapped(res: CallResult) -> bool:
    """Whether an error's body came only as JSON after the SDK's prefix (no structuredContent)."""
    result = res.result or {}
    text = _first_text(res)
    return (
        not isinstance(result.get("structuredContent"), dict)
        and text is not None
        and SDK_PREFIX.match(text) is not None
        and _json_object(SDK_PREFIX.sub("", text, count=1)) is not None
    )


def retryable(res: CallResult) -> bool:
    """Whether an error says to retry, in its body as a model reads it (the client reads only some)."""
    if res.retryable is not None:
        return res.retryable
    body = error_body(res) if res.outcome is Outcome.TOOL_ERROR else None
    return body is not None and body.get("retryable") is True


def said(res: CallResult) -> str:
    """An answer in a few words: ``tool_error idempotency_key_reused: this key was used for ...``."""
    body = error_body(res) if res.outcome is Outcome.TOOL_ERROR else None
    if body is not None and isinstance(body.get("code"), str):
        text = body.get("message")
        return f"{res.outcome.value} {body['code']}" + (f": {excerpt(str(text), 100)}" if text else "")
    message = f": {excerpt(res.message, 100)}" if res.message else ""
    return f"{res.outcome.value}{message}"


def contract_problem(res: CallResult) -> str | None:
    """What a tool error lacks of the error contract, or None."""
    if res.outcome is Outcome.PROTOCOL_ERROR:
        code = res.error_code
        if isinstance(code, int) and code not in JSONRPC_STANDARD and not -32099 <= code <= -32000:
            return f"JSON-RPC error code {code} is outside the standard codes and -32099..-32000"
        return None
    body = error_body(res)
    if body is None:
        return "no machine-readable body (structuredContent or JSON text)"
    code = body.get("code")
    if not isinstance(code, str) or not SNAKE_CASE.match(code):
        return f"code {code!r} is not a stable snake_case string"
    if not isinstance(body.get("retryable"), bool):
        return f"{code}: no boolean 'retryable'"
    if not isinstance(body.get("recovery"), str) or not body["recovery"].strip():
        return f"{code}: no 'recovery' saying what to do"
    if body["retryable"] and not isinstance(body.get("retry_after_ms"), int):
        return f"{code}: retryable without 'retry_after_ms'"
    return None


def failure_text(res: CallResult) -> str | None:
    """A success's text when it reads as a failure (``Database error: no such table``, ``sorry``): with
    no effect, a failure reported as success, the most common contract bug."""
    if res.outcome is not Outcome.OK:
        return None
    content = (res.result or {}).get("content")
    texts = [str(b["text"]) for b in content or () if isinstance(b, dict) and isinstance(b.get("text"), str)]
    text = " ".join(texts) if texts else json.dumps(content)
    return text if reads_as_failure(text) else None


def provoked_problem(res: CallResult, what: str) -> str | None:
    """Why the answer to arguments the tool's schema refuses (``what``) is not a clear refusal, or None.

    The refusal is the SDK's more often than the server's, so its words are not held
    to the error contract: any tool error or invalid-params error that does not say
    "retry" is clear; a success is not judged here (a server may take a default).
    """
    if res.outcome is Outcome.OK or res.outcome is Outcome.INPUT_REQUIRED:
        return None
    if res.outcome is Outcome.TOOL_ERROR:
        if retryable(res):
            return f"{what} got a refusal that says retryable: the same arguments cannot succeed"
        return None
    if res.outcome is Outcome.PROTOCOL_ERROR and res.error_code is not None:
        if res.error_code == -32603:  # internal error: the server broke, it did not refuse
            said_ = excerpt(res.message or "JSON-RPC error -32603", 100)
            return f"{what} got {said_}: a model reads 'this tool is broken', not what to send"
        return contract_problem(res)
    return f"{what} got {said(res)}: the server broke on arguments its schema refuses"


def record_ids(res: CallResult) -> tuple[tuple[str, str], ...] | None:
    """The record identifiers an acknowledgement carries (``id``, ``invoice_id``, ``noteId`` fields, at
    any depth of structuredContent or of JSON text), or None when it names none."""
    result = res.result or {}
    body: Any = result.get("structuredContent")
    if body is None and (text := _first_text(res)) is not None:
        body = _json_object(text)
    found: list[tuple[str, str]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}" if path else str(key)
                if ID_NAME.search(str(key)) and isinstance(value, str | int) and not isinstance(value, bool):
                    found.append((here, str(value)))
                else:
                    walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}.{i}")

    walk(body, "")
    return tuple(sorted(found)) or None


def lost_writes(results: Sequence[CallResult], effects: int) -> str | None:
    """Acknowledgements naming more distinct records than the store holds: the words of a lost-writes
    finding, or None. Judged only where every success names its record (an id field)."""
    oks = [r for r in results if r.outcome is Outcome.OK]
    ids = [record_ids(r) for r in oks]
    if not oks or any(i is None for i in ids):
        return None
    distinct = sorted({", ".join(f"{k}={v}" for k, v in i or ()) for i in ids})
    if len(distinct) <= effects:
        return None
    return (
        f"lost writes: {len(oks)} acknowledged as {len(distinct)} different records "
        f"({excerpt('; '.join(distinct), 120)}), {effects} stored: {len(distinct) - effects} acknowledged "
        "write(s) lost"
    )


def refusal_problem(res: CallResult, what: str) -> str | None:
    """Why an answer to a call that cannot work (a forged or expired handle) is not a clear refusal, or
    None when it is one: a non-retryable tool error that keeps the error contract, or invalid params."""
    if res.outcome is Outcome.OK:
        return f"{what} got a success: {excerpt(json.dumps((res.result or {}).get('content')), 120)}"
    if res.outcome is Outcome.PROTOCOL_ERROR:
        if res.error_code == -32602:  # invalid params: clear, and not the server's fault
            return None
        message = excerpt(res.message or f"JSON-RPC error {res.error_code}", 80)
        return f"{what} got {message}: a model reads 'this tool is broken', not what to do"
    if res.outcome is not Outcome.TOOL_ERROR:
        return f"{what} got {said(res)}"
    if (problem := contract_problem(res)) is not None:
        return f"{what}: {problem}"
    if res.retryable:
        return f"{what} says retryable: retrying the same handle cannot succeed"
    return None


# -- the catalog


def catalog_findings(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a catalog breaks of the advice: keys where effects are, none where they are not, rules
    in the description, sentences (a few, not a page), few tools, no hidden session state."""
    keyless = []
    findings = []
    if len(tools) > MAX_TOOLS:
        findings.append(f"{len(tools)} tools: past {MAX_TOOLS}, tool selection degrades")
    for entry in tools:
        tool = Tool.of(entry)
        name, description, key = tool.name, tool.description, tool.key
        if tool.state.changes_state:
            if key is None:
                keyless.append(f"{name}{KEYLESS}")
            elif not RETRY_WORDS.search(description + " " + str(key.schema.get("description") or "")):
                findings.append(
                    f"{name}: nothing says to reuse {key.name} only for retries of the same intent"
                )
        elif key is not None:
            findings.append(f"{name} only reads but takes a key ({key.name}): schema noise")
        if not description:
            findings.append(f"{name} has no description")
        elif not (description[0].isupper() and description.endswith((".", "!", "?"))):
            findings.append(f"{name}: its description is not written as sentences")
        elif (sentences := len(SENTENCE_END.findall(description))) > MAX_SENTENCES:
            findings.append(
                f"{name}: {sentences} sentences; one of purpose and one of rules say it, the rest costs "
                "tokens and tool-selection accuracy"
            )
        if SESSION_STYLE.search(name.lower()):
            findings.append(f"{name} looks like a session-style tool that needs hidden state")
    return keyless + findings  # a retry that cannot be told from a new call matters most


def listing_problems(
    first: Mapping[str, Any],
    again: Mapping[str, Any],
    restarted: Mapping[str, Any],
    *,
    modern: bool,
    tokens: int,
    budget: int,
) -> list[str]:
    """What three ``tools/list`` results (twice, then after a restart) break: tools that change state
    and take no key first (what a retry costs), then the same tools every time, the 2026-07-28 cache
    fields, the token budget, and the rest of the catalog advice."""
    advice = catalog_findings([t for t in first.get("tools") or [] if isinstance(t, dict)])
    keyless = [a for a in advice if a.endswith(KEYLESS)]
    problems = keyless
    if first.get("tools") != again.get("tools"):
        problems.append("tools/list differs between two calls")
    if first.get("tools") != restarted.get("tools"):
        problems.append("tools/list differs after a restart")
    if modern and not ("ttlMs" in first and "cacheScope" in first):
        problems.append("no ttlMs/cacheScope on tools/list (2026-07-28 results carry them)")
    if tokens > budget:
        problems.append(f"the catalog costs {tokens} tokens, over the budget of {budget}")
    return problems + [a for a in advice if a not in keyless]


def snapshot_diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    """What changed in a catalog since a snapshot of it: tools added, removed, changed, reordered."""
    before, after = {str(t.get("name")): t for t in old}, {str(t.get("name")): t for t in new}
    changes = [f"{n} added" for n in after if n not in before] + [
        f"{n} removed" for n in before if n not in after
    ]
    changes += [f"{n} changed" for n in after if n in before and before[n] != after[n]]
    if not changes and [str(t.get("name")) for t in old] != [str(t.get("name")) for t in new]:
        changes.append("the order changed")
    return changes
