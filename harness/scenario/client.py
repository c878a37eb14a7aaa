"""``client``: the retry policy under test, the protocol it speaks and where the idempotency key travels."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.scenario.headers import HEADER_NAME, RESERVED_HEADERS
from harness.scenario.section import Section


class Backoff(Section):
    """Exponential backoff between attempts of one intent."""

    initial_s: float = Field(default=0.05, ge=0, le=60)
    """The first retry's delay."""
    max_s: float = Field(default=1.0, ge=0, le=600)
    """No delay is longer than this."""
    multiplier: float = Field(default=2.0, ge=1, le=10)
    """Each retry's delay is the last one's times this."""
    jitter: Literal["full", "equal", "none"] = "full"
    """Seeded jitter of each delay: ``full`` (0 to the delay), ``equal`` (half to all of it) or ``none``."""


class ClientPolicy(Section):
    """What the client does when an attempt fails: the retry policy under test."""

    attempt_timeout_s: float = Field(default=5.0, gt=0, le=600)
    """An attempt with no answer after this long is a ``timeout``, and is retried."""
    max_attempts: int = Field(default=20, ge=1, le=1000)
    """Attempts per intent before the client gives up (``gave_up``)."""
    give_up_after_s: float | None = Field(default=None, gt=0, le=86_400)
    """Stop retrying an intent this long after it began, whatever ``max_attempts`` still allows (no
    new attempt starts past it). Crash point explorations set it: their attempts are many, to span a
    restart, and a server that hangs must not take each to its ``attempt_timeout_s``."""
    backoff: Backoff = Field(default_factory=Backoff)
    """The delay before each retry."""
    key_reuse: Literal["same", "fresh"] = "same"
    """``same``: every attempt of an intent carries its key (correct). ``fresh``: a buggy client."""
    retry_tool_errors: Literal["retryable", "never"] = "retryable"
    """Retry a tool error whose contract says ``retryable: true`` (honouring ``retry_after_ms``)."""
    protocol: Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"] = "auto"
    """``auto`` asks ``server/discover`` (2026-07-28) and falls back to the 2025 ``initialize``
    handshake, as current clients do; a version pins it. stdio targets always use the handshake."""
    sessions: Literal["shared", "per_worker"] = "shared"
    """2025 protocol: one session for the whole driver, or one per concurrent worker."""
    resume: bool | None = None
    """2025 protocol: when an event stream with event ids breaks or is closed before its answer, first
    resume it (GET with ``Last-Event-ID``, after the interval its ``retry:`` field asked for), and
    re-issue the call (with a new id) only if that fails. Unset: on in every 2025 session, as the SDK
    clients do (whatever version the server chose); ``false`` shows what a client without it does."""
    key_in: Literal["argument", "meta", "header"] = "argument"
    """Where the intent's idempotency key travels: in an argument (the template's ``{key}``), in the
    request's ``_meta``, or in an HTTP header."""
    key_name: str | None = Field(default=None, min_length=1)
    """The ``_meta`` field or header name (defaults: ``idempotencyKey``, ``Idempotency-Key``)."""
    balance: Literal["round_robin", "random", "sticky"] = "round_robin"
    """With several replicas, which one an attempt goes to, as a health-checked load balancer
    sends it (replicas that are not ready get none): ``round_robin`` across attempts (a retry goes
    to the next replica), ``random`` (seeded), or ``sticky`` (an intent's attempts stay on one
    replica while it is ready, like session affinity)."""
    max_input_rounds: int = Field(default=3, ge=1, le=10)
    """MRTR: questions (``input_required`` answers) one intent may be asked before the client stops
    answering and ends it as rejected; the client's own bound on a server that never stops asking."""
    elicitation: Literal["accept", "decline"] = "accept"
    """What the client does with a form the server asks a person to fill in (``elicitation/create``,
    2025): ``accept`` it with each field's default when those fill every required field (decline it
    otherwise), as a person accepting what the form proposes; ``decline`` every form. 2026-07-28's
    questions are answered from ``workload.answers``."""
    trace: bool = False
    """Send a W3C ``traceparent`` with every attempt (the HTTP header and ``params._meta.traceparent``;
    stdio: ``_meta`` only): one trace per intent, one span per attempt, ids derived from the run and
    the intent (``harness.tracecontext``), recorded in the history, ``intents.csv`` and the stories."""

    @field_validator("protocol", mode="before")
    @classmethod
    def _version_as_written(cls, v: Any) -> Any:
        """YAML reads an unquoted 2025-11-25 as a date; the version is meant."""
        return v.isoformat() if isinstance(v, dt.date) else v

    @property
    def key_meta(self) -> str | None:
        return (self.key_name or "idempotencyKey") if self.key_in == "meta" else None

    @property
    def key_header(self) -> str | None:
        return (self.key_name or "Idempotency-Key") if self.key_in == "header" else None

    @model_validator(mode="after")
    def _resume_needs_2025(self) -> ClientPolicy:
        if self.resume and self.protocol == "2026-07-28":
            raise ValueError("client.resume is a 2025-protocol feature; 2026-07-28 removed resumability")
        return self

    @model_validator(mode="after")
    def _key_name(self) -> ClientPolicy:
        if self.key_in == "argument" and self.key_name is not None:
            raise ValueError(
                "client.key_name names a _meta field or header; with key_in: argument the "
                "template's {key} says where the key goes"
            )
        header = self.key_name or "Idempotency-Key"
        if self.key_in == "header" and (not HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS):
            raise ValueError(
                f"client.key_name {self.key_name!r} cannot be the key's header: use another name"
            )
        return self
