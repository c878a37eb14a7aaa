"""Whether a successful reply reads as a failure: "Database error: no such table ..." with isError false.

A server that answers a failure as a success loses the intent while the client
counts an ok. The client (which keeps a flag on such replies in the history)
and the auditor (which blames a lost intent on it: ``error_as_success``) ask
this one pure function, so both read a reply the same way.

It errs on precision: a false "failure" would blame a lost write on the wrong
cause. So a reply counts only when a failure word opens it ("Error: ...",
"Failed to ...", "Sorry, ...", '{"error": ...'), or when it names what failed
the way error text does ("Database error: ...", "ValueError: ...", "no such
table", "permission denied"); a failure word inside ordinary text does not
count: "Created note 'Error handling tips'" is a success.
"""

from __future__ import annotations

import re

READ_CHARS = 200
"""A reply is judged by its first characters: a failure says so at once."""

_OPENER = (
    r"(?:(?:fatal|internal|unexpected|unhandled|server|database|db|runtime)\s+){0,2}"
    r"(?:error|exception|failure|failed|fail)\b"
    r"|sorry\b|unable\s+to\b|cannot\b|can't\b|could\s+not\b|couldn't\b"
    r"|no\s+such\b|not\s+found\b|(?:access|permission)\s+denied\b|denied\b|forbidden\b"
    r"|invalid\b|traceback\b"
)
_FAILURE = re.compile(
    # A failure word that opens the reply, after any brackets or quotes ("[ERROR] ...", '{"error": ...'),
    rf"^[\W_]*(?:{_OPENER})"
    # or a subject that failed, anywhere in the first characters: "... Database error: ...",
    # "ValueError: ...", "no such table", "permission denied".
    r"|\b\w*(?:error|exception)\s*:"
    r"|\bno\s+such\s+(?:table|file|column|key|entity|entities|record|directory|index|relation)\b"
    r"|\b(?:access|permission)\s+denied\b",
    re.IGNORECASE,
)


def reads_as_failure(text: str) -> bool:
    """True when a successful reply's text says the call failed (judged on its first characters)."""
    return _FAILURE.search(text[:READ_CHARS]) is not None
