"""The ``files`` effect source: markers counted in the files of a directory store or a JSON document,
by their shape, with no field to name; and the scenario section that asks for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness import rundir
from harness.effects.files import count_files
from harness.effects.registry import source_of
from harness.errors import AuditError
from harness.scenario import Effects

A, B = "ab12cd34-m0000001", "ab12cd34-m0000002"


def test_every_file_holding_a_marker_is_an_effect(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text(A)
    (tmp_path / "twice-over.txt").write_text(f"{A}\n")  # the same intent written twice: a duplicate
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "two.md").write_text(f"# {B}")
    (tmp_path / "other.txt").write_text("no marker; xab12cd34-m00000012 is not one either")
    assert count_files(tmp_path, "**/*", "content") == {A: 2, B: 1}
    assert count_files(tmp_path, "*.txt", "content") == {A: 2}  # only what the pattern names


def test_a_version_control_directory_is_not_the_store(tmp_path: Path) -> None:
    """A git repository as the store: its commit message lives in the tracked file and again in the
    repository's own logs; only a pattern that names .git reads them."""
    (tmp_path / "note.txt").write_text(A)
    (tmp_path / ".git" / "logs" / "refs" / "heads").mkdir(parents=True)
    (tmp_path / ".git" / "logs" / "HEAD").write_text(f"0000 1111 a <a> 1 +0000\tcommit: {A}\n")
    (tmp_path / ".git" / "logs" / "refs" / "heads" / "main").write_text(f"commit: {A}\n")
    (tmp_path / ".git" / "COMMIT_EDITMSG").write_text(A)
    (tmp_path / "sub" / ".hg").mkdir(parents=True)
    (tmp_path / "sub" / ".hg" / "last-message.txt").write_text(B)
    assert count_files(tmp_path, "**/*", "content") == {A: 1}
    assert count_files(tmp_path, ".git/COMMIT_EDITMSG", "content") == {A: 1}
    assert count_files(tmp_path, ".git/**/*", "content") == {A: 3}


def test_a_json_document_counts_each_record() -> None:
    records = [{"title": A}, {"title": B}, {"title": A}]
    text = json.dumps({"notes": records}).encode()
    from harness.workload import MARKER_SHAPE

    assert [m.decode() for m in MARKER_SHAPE.findall(text)] == [A, B, A]


def test_markers_in_names(tmp_path: Path) -> None:
    (tmp_path / f"{A}.txt").write_text("x")
    (tmp_path / f"{A}-copy.txt").write_text("x")
    (tmp_path / "b.txt").write_text(B)  # in the content, not the name
    assert count_files(tmp_path, "*", "name") == {A: 2}


def test_a_missing_directory_is_an_audit_error(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match="is not a directory"):
        count_files(tmp_path / "nope", "*", "content")


def test_the_section_resolves_data_dir_and_stays_inside_it(tmp_path: Path) -> None:
    (tmp_path / rundir.DATA).mkdir()
    (tmp_path / rundir.DATA / "note").write_text(A)
    effects = Effects.model_validate({"files": {"dir": "{data_dir}"}})
    assert effects.files is not None
    assert (effects.files.pattern, effects.files.marker_in) == ("**/*", "content")
    assert not source_of(effects).live  # read offline, like a JSON-lines file
    assert source_of(effects).count(tmp_path) == {A: 1}
    for pattern in ("/etc/*", "../*"):
        with pytest.raises(ValidationError, match="must stay inside dir"):
            Effects.model_validate({"files": {"dir": "{data_dir}", "pattern": pattern}})
    with pytest.raises(
        ValidationError, match="exactly one of sql, sink, downstream, tool, command, jsonl, files"
    ):
        Effects.model_validate({"files": {"dir": "{data_dir}"}, "jsonl": {"path": "x"}})
