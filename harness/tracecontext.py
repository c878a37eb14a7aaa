"""W3C trace context for attempts: one trace per intent, one span per attempt, derived rather than drawn.

With ``client.trace`` every attempt carries a ``traceparent``
(``00-<trace id>-<span id>-01``), so a server that traces its calls files each
attempt of an intent under one trace, and a duplicate the report names can be
found in the server's own traces. The ids are a hash of the run's namespace and
the intent's index (and the attempt's number): the same run directory gives the
same ids to the history, the report, ``export --format otlp`` and a re-read of the
server's logs, with nothing to store but the ids the history already records;
and two runs (two namespaces) never share a trace.

Span 0 of a trace is the intent's own span (the root ``export --format otlp`` writes);
span ``n`` is its attempt ``n``, a child of the root, and the ``traceparent``
an attempt sends names that span as the caller's, so the server's span is a
child of it. Pure: no I/O.
"""

from __future__ import annotations

from hashlib import blake2b

ROOT_SPAN = 0
"""The span number of the intent itself; attempts are numbered from 1, as in the history."""
_VERSION = "00"
_SAMPLED = "01"
"""trace-flags: sampled. The caller recorded the span (the history is the record), so a server that
samples by its parent's decision keeps its side of every attempt."""


def trace_id(namespace: str, intent: int) -> str:
    """The 32 lowercase hex digits of an intent's trace (the chance of W3C's invalid all-zero id is 2⁻¹²⁸)."""
    return blake2b(f"{namespace}:{intent}".encode(), digest_size=16).hexdigest()


def span_id(trace: str, number: int) -> str:
    """The 16 lowercase hex digits of span ``number`` of a trace (:data:`ROOT_SPAN` or an attempt's)."""
    return blake2b(f"{trace}:{number}".encode(), digest_size=8).hexdigest()


def traceparent(trace: str, span: str) -> str:
    """The ``traceparent`` header value (and ``_meta.traceparent``) of a span sent to a server."""
    return f"{_VERSION}-{trace}-{span}-{_SAMPLED}"
