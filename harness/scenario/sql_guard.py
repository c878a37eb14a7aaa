"""The SQL guard: an effect query must be one statement that only reads."""

from __future__ import annotations

import re

_SQL_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|;|[A-Za-z_]+", re.S)


def single_select(query: str) -> str:
    """Accept one SELECT (or WITH ... SELECT) statement; the audit must never run anything else.

    Stores are opened read-only as well; this check says what is wrong before a
    run starts instead of failing its audit. Quotes and comments are skipped, so
    a ``;`` or a keyword inside a string literal does not count.
    """
    words: list[str] = []
    statements = 1
    for token in _SQL_TOKENS.findall(query):
        if token == ";":
            statements += 1
        elif token[0].isalpha() or token[0] == "_":
            if statements > 1:
                raise ValueError("must be a single SELECT statement; it has more after a ';'")
            words.append(token.upper())
    if not words or words[0] not in ("SELECT", "WITH"):
        raise ValueError(
            "must be a single SELECT (or WITH ... SELECT) statement that reads effects; "
            f"got one starting with {words[0] if words else 'nothing'!r}"
        )
    writes = sorted(set(words) & {"INSERT", "UPDATE", "DELETE", "DROP", "ALTER", "CREATE", "ATTACH"})
    if writes:
        raise ValueError(f"must only read; it uses {', '.join(writes)}")
    return query
