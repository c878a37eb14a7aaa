"""``audit.effects.command``: a command run once at the end of the run that prints the effects, one
``marker,effects`` CSV line each (a header line is allowed): for stores no SQL reaches (a file of the
target's own format, a remote API)."""

from __future__ import annotations

import csv
import io as text_io
import sys
from collections import Counter
from pathlib import Path

from harness import rundir
from harness.effects.base import EffectSource, LiveIO
from harness.errors import AuditError
from harness.history import excerpt
from harness.scenario import AUDIT_PLACEHOLDERS, CommandEffects
from harness.template import render_text


class CommandSource(EffectSource, field="command", live=True):
    """The user's command; a failing command is an audit error with its last line of stderr."""

    section: CommandEffects

    def describe(self) -> str:
        return "command " + " ".join(self.section.command)

    def argv(self, run_dir: Path, postgres_url: str | None) -> list[str]:
        values = {
            "python": sys.executable,
            "data_dir": run_dir.resolve() / rundir.DATA,
            "run_dir": run_dir.resolve(),
            "scenario_dir": "{scenario_dir}",
            "postgres_url": postgres_url or "{postgres_url}",
        }
        return [
            render_text(part, values, AUDIT_PLACEHOLDERS | {"python"}, "audit.effects.command")
            for part in self.section.command
        ]

    async def read_live(self, run_dir: Path, io: LiveIO) -> Counter[str]:
        timeout_s = self.section.timeout_s
        try:
            code, out, err = await io.run(self.argv(run_dir, io.postgres_url), timeout_s)
        except TimeoutError:
            raise AuditError(
                f"the effects command ran longer than {timeout_s:g}s (audit.effects.command.timeout_s)"
            ) from None
        if code != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(nothing on stderr)"]
            raise AuditError(f"the effects command exited with {code}: {tail[0]}")
        return parse_lines(out)


def parse_lines(out: bytes) -> Counter[str]:
    """Effects per marker from the command's output: CSV lines ``marker,effects`` (the count may be left
    out: 1), an optional header."""
    try:
        rows = list(csv.reader(text_io.StringIO(out.decode("utf-8", "replace"))))
    except csv.Error as exc:
        raise AuditError(f"the effects command's output is not CSV lines 'marker,effects': {exc}") from None
    if rows and [c.strip().lower() for c in rows[0]] == ["marker", "effects"]:
        rows = rows[1:]
    counts: Counter[str] = Counter()
    for number, row in enumerate(rows, 1):
        if not row:
            continue
        try:
            marker, effects = row[0].strip(), int(row[1]) if len(row) > 1 else 1
        except ValueError:
            effects = -1
        if effects < 0:
            shown = excerpt(",".join(row), 80)
            raise AuditError(
                f"the effects command's line {number} is not 'marker,effects' (a count >= 0): {shown}"
            )
        counts[marker] += effects
    return counts
