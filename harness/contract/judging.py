"""What the contract checks conclude from what they saw: pure functions, no server, no I/O.

A check (:mod:`harness.contract.checks`) makes the calls; what an answer says
(its error body, whether it keeps the error contract, whether it is a clear
refusal, whether two answers are the same) and what a catalog breaks of the
advice (keys where effects are, sentences, few tools, stable listings) is
judged here, so every judgement is tested on answers written by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.catalog import Tool
from harness.client.messages import CallResult
from harness.history import Outcome, excerpt

MAX_TOOLS = 15
MAX_SENTENCES = 3
"""One sentence of purpose, one of rules (the first article's FAQ), and one to spare."""
SENTENCE_END = re.compile(r"[.!?](\s|$)")
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
APOLOGY = re.compile(r"\b(sorry|something went wrong|unable to|could not|couldn't|failed to)\b", re.I)
JSONRPC_STANDARD = {-32700, -32600, -32601, -32602, -32603}
SESSION_STYLE = re.compile(
    r"^(start|begin|open|end|close)_?session|^(log_?in|connect|set_?context|use_|select_)"
)
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


def error_body(res: CallResult) -> Mapping[str, Any] | None:
    """A tool error's machine-readable body: structuredContent, or JSON in its first text block."""
    result = res.result or {}
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]  # type: ignore[no-any-return]
    for block in result.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "text":
            try:
                body = json.loads(block.get("text", ""))
            except (ValueError, TypeError):
                return None
            return body if isinstance(body, dict) else None
    return None


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


def apology(res: CallResult) -> str | None:
    """A success's content when it apologises (``sorry``, ``could not``): a failure dressed as success."""
    text = json.dumps((res.result or {}).get("content"))
    return text if APOLOGY.search(text) else None


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
    findings = []
    if len(tools) > MAX_TOOLS:
        findings.append(f"{len(tools)} tools: past {MAX_TOOLS}, tool selection degrades")
    for entry in tools:
        tool = Tool.of(entry)
        name, description, key = tool.name, tool.description, tool.key
        if tool.state.changes_state:
            if key is None:
                findings.append(f"{name} changes state but takes no idempotency key")
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
    return findings


def listing_problems(
    first: Mapping[str, Any],
    again: Mapping[str, Any],
    restarted: Mapping[str, Any],
    *,
    modern: bool,
    tokens: int,
    budget: int,
) -> list[str]:
    """What three ``tools/list`` results (twice, then after a restart) break: the same tools every
    time, the 2026-07-28 cache fields, the token budget; then the catalog advice."""
    problems = []
    if first.get("tools") != again.get("tools"):
        problems.append("tools/list differs between two calls")
    if first.get("tools") != restarted.get("tools"):
        problems.append("tools/list differs after a restart")
    if modern and not ("ttlMs" in first and "cacheScope" in first):
        problems.append("no ttlMs/cacheScope on tools/list (2026-07-28 results carry them)")
    if tokens > budget:
        problems.append(f"the catalog costs {tokens} tokens, over the budget of {budget}")
    return problems + catalog_findings([t for t in first.get("tools") or [] if isinstance(t, dict)])


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
