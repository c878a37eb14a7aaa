"""What a power loss leaves (the file tracer's model): a file's bytes as of its last fsync, a directory's
names as of its last fsync, everything as it was at the start; checked on real files."""

from __future__ import annotations

import os
from pathlib import Path

from harness.crashpoints.fstrace import Durable


def model(tmp_path: Path) -> tuple[Durable, Path]:
    root = tmp_path / "data"
    root.mkdir()
    (root / "old.json").write_text("old")
    (root / "sub").mkdir()
    (root / "sub" / "kept.txt").write_text("kept")
    durable = Durable(root, tmp_path / "shadow")
    durable.baseline()
    return durable, root


def fsync_file(durable: Durable, path: Path) -> None:
    durable.synced_file(str(path), os.stat(path).st_ino)


def test_what_was_there_at_the_start_survives_and_what_came_after_unsynced_does_not(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    (root / "old.json").write_text("rewritten in place, never synced")
    (root / "new.json").write_text("made, never synced")
    (root / "sub" / "kept.txt").unlink()
    changed = durable.rollback()
    assert (root / "old.json").read_text() == "old"
    assert not (root / "new.json").exists()
    assert (root / "sub" / "kept.txt").read_text() == "kept"
    assert changed == ["new.json", "old.json", "sub/kept.txt"]


def test_a_synced_file_keeps_its_bytes_but_its_new_name_needs_its_directory_synced(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    tmp = root / "old.json.tmp"
    tmp.write_text("new")
    durable.created(os.stat(tmp).st_ino)
    fsync_file(durable, tmp)
    tmp.rename(root / "old.json")  # no directory fsync: the rename is not durable
    durable.rollback()
    assert (root / "old.json").read_text() == "old"
    assert not tmp.exists()  # nor was the temporary file's name


def test_temp_fsync_rename_and_directory_fsync_is_durable(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    tmp = root / "old.json.tmp"
    tmp.write_text("new")
    durable.created(os.stat(tmp).st_ino)
    fsync_file(durable, tmp)
    tmp.rename(root / "old.json")
    durable.synced_dir(root)
    assert durable.rollback() == []
    assert (root / "old.json").read_text() == "new"


def test_a_name_made_durable_before_its_bytes_holds_none_of_them(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    made = root / "made.json"
    made.write_text("unsynced bytes")
    durable.created(os.stat(made).st_ino)
    durable.synced_dir(root)
    durable.rollback()
    assert made.read_bytes() == b""


def test_bytes_synced_then_changed_again_roll_back_to_the_synced_ones(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    path = root / "old.json"
    path.write_text("first sync")
    fsync_file(durable, path)
    path.write_text("after the sync")
    durable.rollback()
    assert path.read_text() == "first sync"


def test_a_rollback_is_the_new_start(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    (root / "new.json").write_text("x")
    durable.rollback()
    (root / "old.json").write_text("changed after the rollback")
    durable.rollback()
    assert sorted(os.listdir(root)) == ["old.json", "sub"]
    assert (root / "old.json").read_text() == "old"
