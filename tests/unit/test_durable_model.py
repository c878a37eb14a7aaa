"""What a power loss leaves (the file tracer's model, :mod:`harness.crashpoints.durable`): a file's bytes
as of its last fsync, a directory's names as of its last fsync, everything as it was at the start, and
nothing else touched; checked on real files. The shapes a traced program makes are in
``tests/integration/test_power_loss_shapes.py``."""

from __future__ import annotations

import os
from pathlib import Path

from harness.crashpoints.durable import Durable


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
    durable.synced_file(str(path))


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
    durable.created(os.lstat(tmp))
    fsync_file(durable, tmp)
    tmp.rename(root / "old.json")  # no directory fsync: the rename is not durable
    durable.rollback()
    assert (root / "old.json").read_text() == "old"
    assert not tmp.exists()  # nor was the temporary file's name


def test_temp_fsync_rename_and_directory_fsync_is_durable(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    tmp = root / "old.json.tmp"
    tmp.write_text("new")
    durable.created(os.lstat(tmp))
    fsync_file(durable, tmp)
    tmp.rename(root / "old.json")
    durable.synced_dir(root)
    assert durable.rollback() == []
    assert (root / "old.json").read_text() == "new"


def test_a_name_made_durable_before_its_bytes_holds_none_of_them(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    made = root / "made.json"
    made.write_text("unsynced bytes")
    durable.created(os.lstat(made))
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


def test_what_was_durable_is_left_as_it_is_not_rewritten(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    for path in (root / "old.json", root / "sub" / "kept.txt"):
        os.utime(path, ns=(10**18, 10**18))
    before = {p: os.lstat(p) for p in (root / "old.json", root / "sub", root / "sub" / "kept.txt")}
    (root / "new.json").write_text("never synced")
    assert durable.rollback() == ["new.json"]
    for path, info in before.items():
        now = os.lstat(path)
        assert (now.st_ino, now.st_mtime_ns) == (info.st_ino, info.st_mtime_ns), path


def test_names_of_one_file_stay_one_file(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    os.link(root / "old.json", root / "again.json")
    durable.synced_dir(root)
    (root / "again.json").unlink()  # not durable: back as the same file
    (root / "old.json").write_text("rewritten in place, never synced")
    durable.rollback()
    assert os.lstat(root / "again.json").st_ino == os.lstat(root / "old.json").st_ino
    assert (root / "again.json").read_text() == "old"


def test_a_file_made_again_has_its_permissions(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    (root / "old.json").chmod(0o640)
    durable.baseline()
    (root / "old.json").unlink()
    durable.rollback()
    assert (root / "old.json").stat().st_mode & 0o777 == 0o640


def test_a_link_swapped_to_a_new_version_is_durable_with_its_directory(tmp_path: Path) -> None:
    """The versioned store: ``current -> v1``; v2 written and fsynced, the link swapped by a rename."""
    durable, root = model(tmp_path)
    (root / "v1").mkdir()
    (root / "v1" / "notes").write_text("v1")
    (root / "current").symlink_to("v1")
    durable.baseline()
    (root / "v2").mkdir()
    durable.created(os.lstat(root / "v2"))
    (root / "v2" / "notes").write_text("v2")
    durable.created(os.lstat(root / "v2" / "notes"))
    fsync_file(durable, root / "v2" / "notes")
    durable.synced_dir(root / "v2")
    (root / "current.tmp").symlink_to("v2")
    durable.created(os.lstat(root / "current.tmp"))
    os.rename(root / "current.tmp", root / "current")
    durable.rollback()  # the root never fsynced: still v1, and v2 never made
    assert os.readlink(root / "current") == "v1"
    assert (root / "current" / "notes").read_text() == "v1"
    assert not (root / "v2").exists()
    (root / "v2").mkdir()
    durable.created(os.lstat(root / "v2"))
    (root / "v2" / "notes").write_text("v2")
    durable.created(os.lstat(root / "v2" / "notes"))
    fsync_file(durable, root / "v2" / "notes")
    durable.synced_dir(root / "v2")
    (root / "current.tmp").symlink_to("v2")
    os.rename(root / "current.tmp", root / "current")
    durable.synced_dir(root)
    assert durable.rollback() == []
    assert (root / "current" / "notes").read_text() == "v2"


def test_a_file_renamed_in_from_outside_goes_back_unless_made_durable(tmp_path: Path) -> None:
    durable, root = model(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("b.txt", "a.txt"):
        (outside / name).write_text(name)
        os.rename(outside / name, root / name)
        durable.renamed(str(outside / name), str(root / name))
        if name == "b.txt":
            durable.synced_dir(root)  # makes b's rename durable, not a's, which came after
    changed = durable.rollback()
    assert (outside / "a.txt").read_text() == "a.txt"  # as a power loss leaves it: under its old name
    assert not (root / "a.txt").exists()
    assert (root / "b.txt").read_text() == "b.txt"  # its new name durable: nothing to put back
    assert not (outside / "b.txt").exists()
    assert changed == [str(outside / "a.txt"), "a.txt"]
