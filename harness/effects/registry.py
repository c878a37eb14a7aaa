"""Every kind of effect source, and the one dispatch from a scenario's ``audit.effects`` to its source."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from harness.effects.base import Drafted, EffectSource, SeenStore
from harness.effects.command import CommandSource
from harness.effects.downstream import DownstreamSource
from harness.effects.files import FilesSource
from harness.effects.jsonl import JsonlSource
from harness.effects.sink import SinkSource
from harness.effects.sql import PostgresSource, SqliteSource
from harness.effects.tool import ToolSource
from harness.scenario import Effects, SqlEffects

KINDS: tuple[type[EffectSource], ...] = (
    SqliteSource,
    PostgresSource,
    SinkSource,
    DownstreamSource,
    JsonlSource,
    FilesSource,
    ToolSource,
    CommandSource,
)
"""Every kind of source, in the order ``init`` prefers their drafts when two rank alike."""


def source_of(effects: Effects) -> EffectSource:
    """The source the scenario's ``audit.effects`` names (exactly one, as the model validated)."""
    field, section = effects.chosen
    if isinstance(section, SqlEffects):
        return SqliteSource(section) if section.is_sqlite else PostgresSource(section)
    for kind in KINDS:
        if kind.field == field:
            return kind(section)
    raise AssertionError(f"no effect source for audit.effects.{field}")


def drafts(stores: Sequence[SeenStore], marker_field: str | None) -> Iterator[Drafted]:
    """Every source's drafts of an ``audit.effects`` section from the stores ``init`` saw."""
    fields: set[str] = set()
    for kind in KINDS:
        if kind.field not in fields:  # the two SQL kinds share one section, and its drafts
            fields.add(kind.field)
            yield from kind.drafts(stores, marker_field)
