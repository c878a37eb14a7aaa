"""``audit.effects.tool``: a read-only tool of the target, called once at the end of the run, whose
structured result holds ``effects``: an object marker -> count, or a list of ``{marker, effects}`` (its
``structuredContent``, or without one its text, a JSON object)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from harness.effects.base import EffectSource, LiveIO, whole_count
from harness.errors import AuditError
from harness.scenario import READ_TOOL_PLACEHOLDERS, ToolEffects
from harness.template import render_text


class ToolSource(EffectSource, field="tool", live=True):
    """The target's own read tool."""

    section: ToolEffects

    def describe(self) -> str:
        return f"tool {self.section.tool}"

    async def read_live(self, run_dir: Path, io: LiveIO) -> Counter[str]:
        name = self.section.tool
        arguments = {
            k: render_text(
                v, {"namespace": io.namespace}, READ_TOOL_PLACEHOLDERS, f"audit.effects.tool.arguments.{k}"
            )
            if isinstance(v, str)
            else v
            for k, v in self.section.arguments.items()
        }
        return effects_of(name, await io.call_tool(name, arguments))


def effects_of(name: str, structured: Any) -> Counter[str]:
    """Effects per marker from a read tool's structured content; AuditError naming what is wrong."""
    effects = structured.get("effects") if isinstance(structured, dict) else None
    try:
        if isinstance(effects, dict):
            return Counter({str(k): whole_count(v) for k, v in effects.items()})
        if isinstance(effects, list) and all(isinstance(e, dict) and "marker" in e for e in effects):
            counts: Counter[str] = Counter()
            for e in effects:
                counts[str(e["marker"])] += whole_count(e.get("effects", 1))
            return counts
    except ValueError as exc:
        raise AuditError(f"read tool {name!r} answered {exc}") from None
    raise AuditError(
        f"read tool {name!r} must return structured content (or a JSON text) with 'effects': "
        "an object marker -> count, or a list of {marker, effects}"
    )
