"""The base of every section of a scenario: unknown fields are errors, and a parsed scenario never changes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A part of a scenario. ``extra="forbid"`` turns a misspelt field into an error that names it
    instead of a default silently used; ``frozen`` lets every module share one scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)
