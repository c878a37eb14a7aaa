"""Whether a successful reply reads as a failure: "Database error: no such table ..." with isError false.

A server that answers a failure as a success loses the intent while the client
counts an ok. The client (which keeps a flag on such replies in the history)
and the auditor (which blames a lost intent on it: ``error_as_success``) ask
this one pure function, so both read a reply the same way.

It errs on precision: a false "failure" would blame a lost write on the wrong
cause. So a reply counts only when a failure word opens it ("Error: ...",
"Failed to ...", "Sorry, ...", '{"error": ...', "Write failed"), or when it names what failed
the way error text does ("Database error: ...", "ValueError: ...", "no such
table", "permission denied"); a failure word inside ordinary text does not
count: "Created note 'Error handling tips'" is a success.
"""

from __future__ import annotations

import re

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


def reads_as_failure(text: str) -> bool:
    """True when a successful reply's text says the call failed (judged on its first characters)."""
    head = text[:READ_CHARS]
    # ASCII only: the pattern ignores case the Unicode way (a long s matches "s"), lower() does not.
    if head.isascii() and _HINTED.search(head.lower()) is None:
        return False
    return _FAILURE.search(head) is not None
