"""Whether a successful reply reads as a failure: "Database error: no such table ..." with isError false.

A server that answers a failure as a success loses the intent while the client
counts an ok. The client (which keeps a flag on such replies in the history)
and the auditor (which blames a lost intent on it: ``error_as_success``) ask
this one pure function, so both read a reply the same way.

Two signals, and words are only one of them. A structured reply says it in any
language: a JSON object whose ``error`` is set, whose ``errors`` are not empty, whose
``success`` or ``ok`` is false, whose ``status`` is an error's, or whose ``isError`` is
true (``{"success": false, "message": "写入失败"}``). Words: English error text, since
that is what most servers answer in.

It errs on precision: a false "failure" would blame a lost write on the wrong
cause. So by its words a reply counts only when a failure word opens it ("Error: ...",
"Failed to ...", "Sorry, ...", '{"error": ...', "Write failed"), or when it names what failed
the way error text does ("Database error: ...", "ValueError: ...", "no such
table", "permission denied"); a failure word inside ordinary text does not
count: "Created note 'Error handling tips'" is a success.

What no reply's text can say in any language, the audit and the preflight judge from
evidence instead: a lost intent whose reply differs from every reply of the tool's stored
intents (:func:`reply_shape`), a preflight call that changed nothing in the store.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

READ_CHARS = 200
"""A reply is judged by its first characters: a failure says so at once."""

_OPENER = (
    r"(?:fatal|internal|unexpected|unhandled|server|database|db|runtime)?\s*"
    r"(?:error|exception|failure|failed|fail)\b"
    r"|sorry\b|unable\s+to\b|cannot\b|can't\b|could\s+not\b|couldn't\b"
    r"|no\s+such\b|not\s+found\b|(?:access|permission)\s+denied\b|denied\b|forbidden\b"
    r"|invalid\b|traceback\b"
)
_FAILURE = re.compile(
    # A failure word that opens the reply, after any brackets or quotes ("[ERROR] ...", '{"error": ...'),
    rf"^[\W_]*(?:{_OPENER})"
    # or whose first words are what failed ("Write failed", "Upload error"),
    r"|^[\W_]*\w+(?:\s+\w+)?\s+(?:failed|error)\b"
    # or a subject that failed, anywhere in the first characters: "... Database error: ...",
    # "ValueError: ...", "no such table", "permission denied".
    r"|\b\w*(?:error|exception)\s*:"
    r"|\bno\s+such\s+(?:table|file|column|key|entity|entities|record|directory|index|relation)\b"
    r"|\b(?:access|permission)\s+denied\b",
    re.IGNORECASE,
)


_HINTS = (
    "err", "fail", "exception", "sorry", "unable", "can", "could", "such", "found", "denied", "forbidden",
    "invalid", "traceback",
)  # fmt: skip
"""A word of each of the pattern's alternatives: a reply with none of them cannot match it. Every ok
reply is judged on the driver's hot path, and most say nothing of the kind: the substring checks
cost a quarter of the pattern's search."""
_HINTED = re.compile("|".join(_HINTS))
"""The hints as one search (in C): a generator over them cost a Python step per hint and reply."""


_STRUCTURED_KEYS = ('"error', '"success"', '"ok"', '"status"', '"isError"')
"""A key of a structured failure, quoted as JSON writes it: a reply with none of them is not parsed."""
FAILED_STATUSES = frozenset({"error", "failed", "failure", "fail", "err"})


def structured_failure(data: Any) -> bool:
    """Whether a structured reply (a JSON object) says the call failed, whatever language its text is in."""
    if not isinstance(data, dict):
        return False
    error, errors, status = data.get("error"), data.get("errors"), data.get("status")
    return (
        (error is not None and error is not False and error != "" and error != {})
        or (isinstance(errors, list | dict) and len(errors) > 0)
        or data.get("success") is False
        or data.get("ok") is False
        or data.get("isError") is True
        or (isinstance(status, str) and status.strip().lower() in FAILED_STATUSES)
    )


def _structured(text: str) -> bool:
    """The reply is a JSON object (whole, not cut) that says the call failed."""
    if not text.startswith("{") or not any(key in text for key in _STRUCTURED_KEYS):
        return False
    try:
        return structured_failure(orjson.loads(text))
    except orjson.JSONDecodeError:
        return False


def reads_as_failure(text: str) -> bool:
    """True when a successful reply's text says the call failed: its structure, in any language, or its
    English words (judged on its first characters)."""
    if _structured(text):
        return True
    head = text[:READ_CHARS]
    # ASCII only: the pattern ignores case the Unicode way (a long s matches "s"), lower() does not.
    if head.isascii() and _HINTED.search(head.lower()) is None:
        return False
    return _FAILURE.search(head) is not None


_VARIABLE = re.compile(r"[A-Za-z0-9]+-m[0-9]{7}|[0-9a-fA-F]{8,}|\d+")
"""What differs between replies of one kind: markers, ids, hashes, numbers."""


def reply_shape(text: str) -> str:
    """A reply with what varies between calls blanked: replies of one kind share it, in any language
    ("已创建笔记 #" for every note created; "错误 #" for the failure that is not one of them)."""
    return _VARIABLE.sub("#", text)
