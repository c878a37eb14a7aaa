"""One sanitizer per kind of output: what a server said, made safe for the place it is written.

A server under test is untrusted, and its text (a tool error's code and message,
a reply, a handle, a log tail, contract evidence) ends up on terminals, CI job
pages and in CI artifacts. Each writer passes such text through the function for
its kind, after secrets are redacted (:mod:`harness.redaction`):

- :func:`terminal`: no control characters (an ESC sequence clears a screen,
  retitles a window or forges an OSC 8 link), no lone surrogates;
- :func:`markdown` / :func:`cell`: raw HTML and link or image syntax escaped (a
  tracking image or a fake badge on a job page), and for a table cell ``|`` and
  line breaks too;
- HTML: Jinja2's autoescape (:mod:`harness.report.pages`);
- :func:`xml`: the characters XML 1.0 cannot carry dropped (a JUnit file must parse);
- :func:`json_safe`: lone surrogates replaced, so the document can be written as UTF-8.

:func:`bounded` and :func:`bounded_data` cut a field to an excerpt first: a
server may send a megabyte where a word was expected.
"""

from __future__ import annotations

import re
from typing import Any

FIELD_LIMIT = 300
"""How much of one server-derived field an output shows (a message, a code, a handle)."""
EVIDENCE_LIMIT = 2000
"""How much of one string of contract evidence an output keeps."""

_TERMINAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""Control characters (C0 but tab and newline, DEL, C1), the Unicode line separators, lone surrogates."""
_XML_INVALID = re.compile(r"[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""What XML 1.0 cannot carry, even escaped: most C0 controls, U+FFFE, U+FFFF, lone surrogates."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_MARKDOWN = re.compile(r"[\\`*_\[\]<>!|]|&(?=[#A-Za-z0-9]+;)")
"""What can start markup in CommonMark or GitHub's Markdown: links and images (``[``, ``]``, ``!``),
raw HTML and autolinks (``<``, ``>``), entities, emphasis, code spans, table cells."""


def bounded(text: str, limit: int = FIELD_LIMIT) -> str:
    """At most ``limit`` characters, the cut marked."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bounded_data(value: Any, limit: int = EVIDENCE_LIMIT) -> Any:
    """JSON-like data with every string (keys too) cut to ``limit`` and every list to 50 items."""
    if isinstance(value, str):
        return bounded(value, limit)
    if isinstance(value, dict):
        return {bounded(str(k), FIELD_LIMIT): bounded_data(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [bounded_data(v, limit) for v in value[:50]]
        return items + ([f"… {len(value) - 50} more"] if len(value) > 50 else [])
    return value


def terminal(text: str) -> str:
    """Text for a terminal: no control character but tab and newline, no lone surrogate."""
    return _TERMINAL.sub("", text)


def xml(text: str) -> str:
    """Text XML can carry (ElementTree escapes ``&<>"``; it does not drop what XML forbids)."""
    return _XML_INVALID.sub("", text)


def json_safe(value: Any) -> Any:
    """JSON-like data whose strings can be written as UTF-8 (lone surrogates become U+FFFD)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def markdown(text: str) -> str:
    """Inline Markdown text that renders as the text it is: markup characters backslash-escaped,
    control characters dropped (a line break stays)."""
    return _MARKDOWN.sub(lambda m: "\\" + m[0], terminal(text))


def cell(text: str) -> str:
    """A Markdown table cell: :func:`markdown` on one line (a line break would end the row)."""
    return markdown(" ".join(text.split()))


def plain(text: str) -> str:
    """A server's text on a terminal: one line, no control characters, an excerpt."""
    return terminal(bounded(" ".join(text.split())))


def in_markdown(text: str) -> str:
    """A server's text in Markdown (a list item or a table cell): one line, no markup, an excerpt."""
    return cell(bounded(text))


def terminal_line(text: str) -> str:
    """A line of the harness's own that may quote a server (a headline naming why a run is
    inconclusive): one line, no control characters, not cut (what it quotes was cut already)."""
    return terminal(" ".join(text.split()))
