"""The ``files`` effect source: markers counted in the files of a directory store or a JSON document,
by their shape, with no field to name, each file read in the format its server reads it in; and the
scenario section that asks for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness import rundir
from harness.effects.files import count_files, guess_format, read_files
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


# Each file read as its server reads it: a file that does not parse counts nothing, and is reported.

C = "ab12cd34-m0000003"


def read(tmp_path: Path, name: str, data: bytes, fmt: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    (tmp_path / name).write_bytes(data)
    found = read_files(tmp_path, name, "content", fmt, tmp_path)
    return dict(found.counts), [(u.path, u.error) for u in found.unreadable]


def test_a_json_document_with_an_older_one_s_tail_is_unreadable_not_duplicates(tmp_path: Path) -> None:
    """A rewrite in place of a shorter document, killed before its truncate: the new document whole, then
    the tail of the old one (which repeats two of its records). As bytes that is two duplicates; as the
    server reads it, a document that does not parse, whose markers are the effects it held."""
    old = json.dumps(
        {"notes": [{"title": A, "body": "x" * 40}, {"title": B, "body": "y" * 40}, {"title": C}]}
    )
    new = json.dumps({"notes": [{"title": A}, {"title": B}]})
    torn = new.encode() + old.encode()[len(new) :]
    assert count_files(tmp_path, "*", "content") == {}  # nothing written yet
    (tmp_path / "notes.json").write_bytes(torn)
    assert count_files(tmp_path, "*", "content") == {A: 1, B: 2, C: 1}  # text: the bytes, as before
    found = read_files(tmp_path, "notes.json", "content", "json", tmp_path)
    assert found.counts == {}
    (unreadable,) = found.unreadable
    assert unreadable.path == "notes.json"
    assert unreadable.format == "json"
    assert unreadable.error.startswith("Extra data: line 1 column ")  # as Python's json says it
    assert unreadable.held == {A: 1, B: 2, C: 1}
    assert unreadable.changed == (tmp_path / "notes.json").stat().st_mtime
    whole = read(tmp_path, "whole.json", new.encode(), "json")
    assert whole == ({A: 1, B: 1}, [])


@pytest.mark.parametrize(
    ("fmt", "good", "bad", "error"),
    [
        (
            "jsonl",
            f'{{"t": "{A}"}}\n\n{{"t": "{B}", "k": {{"{A}": 1}}}}\n',
            f'{{"t": "{A}"}}\n{{"t": "{B}',
            "line 2: ",
        ),
        (
            "yaml",
            f"notes:\n- title: {A}\n- {{title: {B}, again: {A}}}\n",
            f"notes:\n- title: {A}\n- [{B}\n",
            "while ",
        ),
        ("csv", f'title,body\n{A},x\n"{B}, quoted",{A}\n', f"title,body\n{A},x\n{B}\n", "row 3 has 1 fields"),
        ("lines", f"- {A}\n- {B} and {A}\n", f"- {A}\n\0\0\0\0", "a NUL byte on line 2"),
    ],
)
def test_each_format_counts_what_it_parses_to_and_refuses_what_does_not(
    tmp_path: Path, fmt: str, good: str, bad: str, error: str
) -> None:
    assert read(tmp_path, f"good.{fmt}", good.encode(), fmt) == ({A: 2, B: 1}, [])
    counts, ((path, said),) = read(tmp_path, f"bad.{fmt}", bad.encode(), fmt)
    assert counts == {}
    assert path == f"bad.{fmt}"
    assert said.startswith(error), said
    assert "\n" not in said


def test_an_empty_file_holds_nothing_in_any_format_and_bad_utf8_does_not_parse(tmp_path: Path) -> None:
    """What a truncate leaves is an empty store (what it lost is lost, not unreadable)."""
    for fmt in ("json", "jsonl", "yaml", "csv", "lines", "text"):
        assert read(tmp_path, f"empty.{fmt}", b"", fmt) == ({}, [])
    assert read(tmp_path, "latin.txt", f"{A} caf\xe9".encode("latin-1"), "lines")[1] == [
        ("latin.txt", "not UTF-8: unexpected end of data at byte 21")
    ]


def test_a_yaml_alias_is_one_record_and_markers_in_keys_count(tmp_path: Path) -> None:
    text = f"first: &note {{title: {A}}}\nagain: *note\n{B}: done\n"
    assert read(tmp_path, "s.yaml", text.encode(), "yaml") == ({A: 1, B: 1}, [])


@pytest.mark.parametrize(
    ("fmt", "data"),
    [
        ("json", json.dumps({"requests": [{"originalRequest": A, "splitDetails": A, "tasks": [{"t": B}]}]})),
        ("jsonl", json.dumps({"name": A, "summary": f"about {A}", "tags": [B]})),
        ("yaml", f"- {{title: {A}, body: 'copy of {A}', sub: {{title: {B}}}}}\n"),
        ("csv", f"title,body\n{A},{A}\nx,{B}\n"),
        ("lines", f"- {A} (was {A})\n- {B}\n"),
    ],
)
def test_a_record_holding_its_marker_in_two_fields_is_one_effect(tmp_path: Path, fmt: str, data: str) -> None:
    """@kazuph/mcp-taskmanager copies a request's text into splitDetails: one call, one record, and the
    preflight counted two effects. A record nested in it, or a list of strings, is a record of its own."""
    assert read(tmp_path, f"store.{fmt}", data.encode(), fmt) == ({A: 1, B: 1}, [])


def test_a_name_counted_file_that_does_not_parse_counts_nothing(tmp_path: Path) -> None:
    (tmp_path / f"{A}.json").write_text("{}")
    (tmp_path / f"{B}.json").write_text("{")
    found = read_files(tmp_path, "*.json", "name", "json")
    assert found.counts == {A: 1}
    assert [u.path for u in found.unreadable] == [str(tmp_path / f"{B}.json")]
    assert found.unreadable[0].held == {}  # its name held the marker, not its bytes


def test_a_checkpoint_read_of_an_unreadable_file_is_torn(tmp_path: Path) -> None:
    """Mid-rewrite a document does not parse: a read then proves nothing by what it did not see."""
    run_dir = tmp_path / "run"
    (run_dir / rundir.DATA).mkdir(parents=True)
    (run_dir / rundir.DATA / "notes.json").write_text(json.dumps([{"title": A}])[:-3])
    effects = Effects.model_validate({"files": {"dir": "{data_dir}", "pattern": "*.json", "format": "json"}})
    torn: list[int] = []
    assert source_of(effects).count(run_dir, torn=torn) == {}
    assert torn
    (unreadable,) = source_of(effects).reading(run_dir).unreadable
    assert unreadable.path == "data/notes.json"


@pytest.mark.parametrize(
    ("name", "data", "fmt"),
    [
        ("notes.json", b'[{"t": 1}]', "json"),
        ("notes.json", b'{"t": 1}\n{"t": 2}\n', "jsonl"),  # named .json, written as JSON lines
        ("store", b'{"t": 1}', "json"),
        ("todo.txt", b"- milk\n- bread\n", "lines"),
        ("todo", b"- milk\n- bread\n", "lines"),
        ("tasks.yaml", b"- a\n- b\n", "yaml"),
        ("rows.csv", b"a,b\n1,2\n", "csv"),
        ("blob.bin", b"\x00\x01\x02", "text"),
        ("empty.yml", b"", "yaml"),
    ],
)
def test_init_guesses_the_format_from_the_name_then_the_content(name: str, data: bytes, fmt: str) -> None:
    assert guess_format(name, data) == fmt
