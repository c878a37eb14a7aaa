"""``audit.effects.files``: the markers in the files of a directory the target writes (a directory of
records, a JSON document), found by their shape, so no field needs naming."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from harness.effects.base import Drafted, EffectSource, SeenStore, place
from harness.errors import AuditError, StoreNotMade
from harness.scenario import FilesEffects
from harness.workload import MARKER_SHAPE


class FilesSource(EffectSource, field="files"):
    """Each marker in a file's bytes is one effect (``marker_in: content``), or each file whose name holds
    one (``name``)."""

    section: FilesEffects

    def count(self, run_dir: Path, *, torn: list[int] | None = None) -> Counter[str]:
        directory = Path(place(self.section.dir, run_dir, "audit.effects"))
        return count_files(directory, self.section.pattern, self.section.marker_in)

    @classmethod
    def drafts(cls, stores: Sequence[SeenStore], marker_field: str | None) -> Iterable[Drafted]:
        """A JSON document or another file a trial call's marker was found in (its records counted by
        the markers in it), then a directory of files."""
        if (document := next((s for s in stores if s.kind in ("json", "file")), None)) is not None:
            directory, _, name = document.where.rpartition("/")
            section = {"files": {"dir": directory, "pattern": name, "marker_in": "content"}}
            what = "JSON file" if document.kind == "json" else "file"
            yield Drafted(
                section, None, f"the server keeps its records in the {what} {document.where}", rank=2
            )
        if (folder := next((s for s in stores if s.kind == "dir"), None)) is not None:
            section = {"files": {"dir": folder.where, "pattern": "**/*", "marker_in": "content"}}
            yield Drafted(section, None, f"the server writes files into the directory {folder.where}", rank=4)


VERSION_CONTROL = frozenset({".git", ".hg", ".svn"})
"""Directories of a version-control system's own records, which the files source passes over unless
its pattern names them: they keep copies of what the store holds (a git repository logs every
commit's message in ``.git/logs`` and the last in ``COMMIT_EDITMSG``), so a pattern such as ``**/*``
counted every commit two or three times, and the audit blamed the server for duplicates it never
made. A repository's commits are counted by a ``command`` source (``git log``)."""


def count_files(directory: Path, pattern: str, marker_in: str) -> Counter[str]:
    """Markers in the files of a directory: each occurrence in a file's bytes (``content``), or each
    file whose name holds one (``name``); a version-control directory's records are not the store's."""
    where = f"audit.effects.files.dir {directory}"
    if not directory.is_dir():
        raise StoreNotMade(f"{where} is not a directory (the target never made it, or another path)")
    named = VERSION_CONTROL & set(Path(pattern).parts)
    counts: Counter[str] = Counter()
    for path in sorted(directory.glob(pattern)):
        if not path.is_file() or (VERSION_CONTROL - named) & set(path.relative_to(directory).parts):
            continue
        if marker_in == "name":
            found = MARKER_SHAPE.findall(path.name.encode())
        else:
            try:
                found = MARKER_SHAPE.findall(path.read_bytes())
            except OSError as exc:
                raise AuditError(f"cannot read {path} ({where}): {exc.strerror or exc}") from None
        counts.update(m.decode() for m in found)
    return counts
