"""``workload``: the business intents to replay, their argument template, the answers to questions."""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

from pydantic import Field, field_validator

from harness.scenario.headers import ToolName
from harness.scenario.section import Section
from harness.template import Template, parse_template


class WorkloadSpec(Section):
    """The business intents to replay and how many run at once."""

    intents: int = Field(gt=0, le=10_000_000)
    """How many business intents to replay."""
    concurrency: int = Field(default=16, gt=0, le=4096)
    """How many intents are in flight at once."""
    tool: ToolName
    """The tool each intent calls."""
    arguments: dict[str, Any]
    """The argument template of every call: ``{marker}`` (required, in a field the target stores),
    ``{key}``, ``{index}``, ``{seed}``, ``{random_int: [LOW, HIGH]}``, ``{choice: [...]}``."""
    request_progress: bool = False
    """Send a ``progressToken`` with each call: servers that report progress then answer with an
    event stream (the SSE response form), which stream faults can cut between events."""
    max_duration_s: float = Field(default=900.0, gt=0, le=86_400)
    """A hard bound: intents not started by then are not started at all."""
    answers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """MRTR: what to answer when the tool asks (``resultType: input_required``). Keyed by the name of
    the server's input request (its ``inputRequests`` key), the form's content: ``{customer:
    {customer_id: acme-inc}}`` accepts the elicitation ``customer`` with that content. Also what
    ``mcp-chaos contract``'s ``mrtr`` check answers with."""

    @field_validator("arguments")
    @classmethod
    def _arguments_template(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "marker" not in parse_template(v).placeholders:
            raise ValueError(
                "no argument holds the intent's {marker}: put it in a field the target stores "
                "(a memo, a description), so the audit can find each intent's effects"
            )
        return v

    @field_validator("answers")
    @classmethod
    def _answers_are_forms(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for request, form in v.items():
            if not request or not form or "" in form:
                raise ValueError(
                    "an answer names the server's input request and gives its form's fields: "
                    "{request: {field: value}}, no empty names or forms"
                )
            for name, value in form.items():
                # What JSON (and the client's encoder) can carry: 64-bit integers, finite numbers.
                scalar = isinstance(value, str | bool) or (
                    isinstance(value, int | float) and math.isfinite(value) and -(2**63) <= value < 2**63
                )
                if not (scalar or (isinstance(value, list) and all(isinstance(x, str) for x in value))):
                    raise ValueError(
                        f"answer {request}.{name}: a form field is a string, number, true/false or a "
                        f"list of strings (got {value!r})"
                    )
        return v

    @cached_property
    def template(self) -> Template:
        """The argument template, compiled (it was checked when the model was validated)."""
        return parse_template(self.arguments)
