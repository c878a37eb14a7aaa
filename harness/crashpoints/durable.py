"""What a power loss keeps of a data directory: the file tracer's model of it, and the rollback to it.

The file tracer (:mod:`harness.crashpoints.fstrace`) tells :class:`Durable` each durable operation of
the pod as it returns; a crash planned as a power loss then calls :meth:`Durable.rollback`, which makes
the directory what the model says a power loss leaves. The model is the one ALICE and LazyFS take, on
POSIX's promises and a journaling file system's (ext4, xfs, btrfs) one step per rename:

- What is in the directory when it is first seen (the tracer's first attach, or the last rollback) is
  durable.
- A file's bytes are durable as of its last ``fsync``/``fdatasync`` (or ``msync(MS_SYNC)`` of a mapping
  of it); until then a power loss keeps the bytes of the one before.
- A directory's names are durable as of its last ``fsync``, each with what it named then: a file, a
  directory, a symbolic link, a FIFO, a socket, a device. A name made since (a file created, a link, a
  socket bound) is gone after a power loss, and a name removed since is back.
- A rename is one step on two directories: durable (the new name there, the old one gone) once either
  directory was fsynced after it, else the old name holds. A journal commits both entries together
  and an fsync of either directory commits it, so after a power loss the file is never under neither.
- ``sync``/``syncfs`` make everything durable.
- Outside the directory nothing is watched, so nothing there is rolled back or made up, but for one
  thing a power loss keeps: a file a rename (or a hard link, its old name since removed) brought in
  from outside, and never made durable here, is put back under its old name. What comes in from
  outside is taken as durable as it came. What a rename took out is left where it went (the rollback
  removes nothing outside), so it may then be found under both names, never under none.

Files and directories are known by their inode, through a *key* given anew each time the tracer sees
an inode made (a number may be reused): a rename carries a file's durable bytes and a directory's
durable names with it, and the names of one inode (hard links) stay one file.

The rollback changes only what differs from the model: a name never made durable is removed, a
durable one that is missing is made again, a file whose bytes differ from its durable ones is
rewritten in place; everything else is left as it is. It never follows a symbolic link and opens
nothing but regular files: a FIFO, a socket, a device or a link to ``/dev/zero`` is an entry, kept or
made, never read. A file is read a chunk at a time and never past the size it had when it was found,
so no read waits for a writer or runs on without end.

Standard library only: the tracer is a program of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 1 << 20
"""The most of a file held in memory at once."""


class RollbackRefused(Exception):
    """A rollback that would destroy what a power loss keeps: refused before it changed anything."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A name in a directory as a power loss keeps it: what the name is of."""

    kind: str
    """``dir``, ``file``, ``symlink``, or ``special`` (a FIFO, a socket, a device: kept, never opened)."""
    key: int
    """Its inode's key: a file's durable bytes and a directory's durable names are kept under it."""
    mode: int
    uid: int
    gid: int
    target: str = ""
    """A symbolic link's target (read, never followed)."""
    rdev: int = 0
    """A device's number."""

    def same(self, now: Entry) -> bool:
        """Whether ``now`` (what the name holds now) is this entry, so that the rollback leaves it alone:
        the same file or directory, or a link, FIFO, socket or device of the same kind and target."""
        if self.kind != now.kind:
            return False
        if self.kind in ("dir", "file"):
            return self.key == now.key
        if self.kind == "symlink":
            return self.target == now.target
        return (stat.S_IFMT(self.mode), self.rdev) == (stat.S_IFMT(now.mode), now.rdev)


@dataclass(frozen=True, slots=True)
class _Rename:
    """A rename that is not durable yet: no directory it changed was fsynced since."""

    source: int | None
    """The key of the old name's directory; None: the old name is outside the data directory (a rename
    or a hard link from there)."""
    old: str
    """The old name in that directory (outside: its whole path, where the rollback puts it back; empty
    where the tracer could not read it)."""
    target: int
    """The key of the new name's directory."""
    new: str
    entry: Entry


@dataclass
class Durable:
    """What a power loss would leave of the watched directory (``root``), kept as the pod runs."""

    root: Path
    shadow: Path
    """Where the durable bytes of each file are kept, one file per key."""
    listings: dict[int, dict[str, Entry]] = field(default_factory=dict)
    """A directory's key -> its names as last made durable."""
    pending: list[_Rename] = field(default_factory=list)
    """Renames across two directories, or into the data directory from outside, not durable yet."""
    _keys: dict[tuple[int, int], int] = field(default_factory=dict)
    """A live inode (device, number) -> its key."""
    _next: int = 0
    _top: int = 0
    """The root's key."""

    # -- what the tracer tells
    def baseline(self) -> None:
        """Everything as it is now is durable (the first attach, or after a rollback)."""
        shutil.rmtree(self.shadow, ignore_errors=True)
        self.shadow.mkdir(parents=True)
        self.listings.clear()
        self.pending.clear()
        self._keys.clear()
        self._top = self._take(self.root, fresh=False).key

    def created(self, info: os.stat_result) -> None:
        """An inode was made (a file, a directory, a link, a FIFO): a new key, as its number may be one a
        removed file had."""
        self._next += 1
        self._keys[(info.st_dev, info.st_ino)] = self._next

    def synced_file(self, path: str) -> None:
        """A file's fsync returned: its bytes now are durable. ``path`` is followed (the tracer names the
        file by the tracee's ``/proc/<pid>/fd/<n>``)."""
        self._keep_bytes(path, follow=True)

    def synced_dir(self, directory: Path) -> None:
        """A directory's fsync returned: its names now are durable, each with what it names, and so is
        every rename that changed it since, in its other directory too."""
        key = self._key(os.lstat(directory))
        self.listings[key] = self._scan(directory)
        still = []
        for rename in self.pending:
            if key not in (rename.source, rename.target):
                still.append(rename)
                continue
            if rename.source is not None and rename.source != key:
                listing = self.listings.get(rename.source, {})
                if rename.old in listing and listing[rename.old].key == rename.entry.key:
                    del listing[rename.old]
            if rename.target != key:
                self.listings.setdefault(rename.target, {})[rename.new] = rename.entry
        self.pending = still

    def synced_all(self) -> None:
        """A ``sync`` or ``syncfs`` returned: every file's bytes and every directory's names are durable."""
        self._top = self._take(self.root, fresh=False).key
        self.pending.clear()

    def renamed(self, old: str, new: str) -> None:
        """A rename returned (both paths as this process finds them; one may be outside the directory).
        Within one directory, that directory's fsync says it all. Across two, it waits for either's fsync.
        Into the directory from outside, it waits for the fsync of the directory it went into, and until
        then the rollback puts it back; what it brought is taken as durable as it came. Out of the
        directory, the fsync of the directory it left says."""
        if not self._inside(new):
            return
        if not self._inside(old):
            self._came_in(old, new)
            return
        source = self._key(os.lstat(os.path.dirname(old)))
        target = self._key(os.lstat(os.path.dirname(new)))
        if source != target:
            entry = self._entry(Path(new), os.lstat(new))
            self.pending.append(_Rename(source, os.path.basename(old), target, os.path.basename(new), entry))

    def linked(self, old: str, new: str) -> None:
        """A hard link returned. To a file inside, it is another name of a file the model knows, durable
        with its directory. To a file outside (``old``; empty: not known), it comes in as by a rename,
        though its old name stays: the rollback puts it back only where that name is gone since."""
        if not old or not self._inside(old):
            self._came_in(old, new)

    def _came_in(self, old: str, new: str) -> None:
        """A file (or a tree) came into the directory from outside: taken as durable as it came, and
        waiting for the fsync of the directory it went into."""
        entry = self._take(Path(new), fresh=True)
        target = self._key(os.lstat(os.path.dirname(new)))
        self.pending.append(_Rename(None, old, target, os.path.basename(new), entry))

    # -- the rollback
    def rollback(self) -> list[str]:
        """Make the directory what a power loss leaves, and put back what renames brought in from outside
        and never made durable; the paths changed (relative, or absolute outside the directory; a
        directory's ending in ``/``). RollbackRefused, before anything changed, where a put back would
        overwrite something or has no directory to go to."""
        back = [rename for rename in self.pending if rename.source is None and self._gone(rename)]
        for rename in back:
            taken = os.path.lexists(rename.old)
            if taken or not os.path.isdir(os.path.dirname(rename.old)):
                why = "something else is there now" if taken else "its directory is gone"
                raise RollbackRefused(
                    f"cannot put back {rename.old}, moved into the data directory and not durable there (the "
                    f"directory it went into was not fsynced after): {why}; nothing was rolled back"
                )
        changed: list[str] = []
        for rename in back:
            self._make(rename.entry, Path(rename.old), {}, changed)
        kept: dict[int, Path] = {}
        self._prune(self._top, self.root, kept, changed)
        self._fill(self._top, self.root, kept, changed)
        self.baseline()
        return sorted(set(changed))

    def _gone(self, rename: _Rename) -> bool:
        """Whether what came in from outside is gone from its old name (a hard link's source still
        there, or a file moved back out, needs nothing put back)."""
        if not rename.old:
            return False
        with contextlib.suppress(OSError):
            return self._key(os.lstat(rename.old)) != rename.entry.key
        return True

    def _prune(self, key: int, directory: Path, kept: dict[int, Path], changed: list[str]) -> None:
        """Remove what ``directory`` (the directory ``key``) holds that a power loss would not have kept,
        give the files it keeps their durable bytes, and note them in ``kept`` for their other names."""
        durable = self.listings.get(key, {})
        for name, now in self._scan(directory).items():
            path = directory / name
            want = durable.get(name)
            if want is None or not want.same(now):
                self._remove(path, now, changed)
            elif want.kind == "dir":
                self._prune(want.key, path, kept, changed)
            elif want.kind == "file":
                kept.setdefault(want.key, path)
                if self._rewrite(want.key, path):
                    changed.append(self._label(path, want))

    def _fill(self, key: int, directory: Path, kept: dict[int, Path], changed: list[str]) -> None:
        """Make again what a power loss would have kept of ``directory`` and is not there."""
        for name, want in self.listings.get(key, {}).items():
            path = directory / name
            if not os.path.lexists(path):
                self._make(want, path, kept, changed)
            elif want.kind == "dir":
                self._fill(want.key, path, kept, changed)

    def _make(self, entry: Entry, path: Path, kept: dict[int, Path], changed: list[str]) -> None:
        """Make ``entry`` at ``path``, where nothing is: a directory with its durable names, a file with
        its durable bytes (or a hard link to another name of it already there), a link, a FIFO, a socket,
        a device; with its owner and permissions."""
        changed.append(self._label(path, entry))
        if entry.kind == "file" and entry.key in kept:
            os.link(kept[entry.key], path)
            return
        if entry.kind == "dir":
            path.mkdir()
            for name, child in self.listings.get(entry.key, {}).items():
                self._make(child, path / name, kept, changed)
        elif entry.kind == "file":
            self._write(entry.key, path, exclusive=True)
            kept[entry.key] = path
        elif entry.kind == "symlink":
            os.symlink(entry.target, path)
        else:
            os.mknod(path, entry.mode, entry.rdev)
        with contextlib.suppress(PermissionError):  # the tracer may run as the pod's user, not root
            os.chown(path, entry.uid, entry.gid, follow_symlinks=False)
        if entry.kind != "symlink":
            os.chmod(path, stat.S_IMODE(entry.mode))

    def _remove(self, path: Path, now: Entry, changed: list[str]) -> None:
        """Remove a name a power loss would not have kept (a directory with everything under it, never
        following a link)."""
        changed.append(self._label(path, now))
        if now.kind != "dir":
            os.unlink(path)
            return
        changed.extend(self._below(path))
        shutil.rmtree(path)

    def _below(self, directory: Path) -> list[str]:
        """The labels of everything under a directory (links not followed)."""
        found = []
        for name, now in self._scan(directory).items():
            found.append(self._label(directory / name, now))
            if now.kind == "dir":
                found += self._below(directory / name)
        return found

    # -- bytes: regular files only, a chunk at a time, never past the size found
    def _keep_bytes(self, path: str | Path, *, follow: bool) -> None:
        """Copy a regular file's bytes, as many as it has now, to its key's place in the shadow."""
        fd = _open_regular(path, follow=follow)
        if fd is None:
            return
        try:
            info = os.fstat(fd)
            with open(self.shadow / str(self._key(info)), "wb") as out:
                _copy(fd, out.fileno(), info.st_size)
        finally:
            os.close(fd)

    def _rewrite(self, key: int, path: Path) -> bool:
        """Give a file that is kept its durable bytes, where it has others; whether it had."""
        fd = _open_regular(path, follow=False)
        if fd is None:
            return False
        try:
            if _same_bytes(fd, self.shadow / str(key)):
                return False
        finally:
            os.close(fd)
        self._write(key, path, exclusive=False)
        return True

    def _write(self, key: int, path: Path, *, exclusive: bool) -> None:
        """Write the durable bytes of ``key`` (none, where its name was made durable before its bytes
        were) to ``path``: a new file, or the one there, rewritten in place (so its other names see it)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags | (os.O_EXCL if exclusive else os.O_TRUNC), 0o600)
        try:
            durable = self.shadow / str(key)
            if durable.exists():
                source = os.open(durable, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _copy(source, fd, os.fstat(source).st_size)
                finally:
                    os.close(source)
        finally:
            os.close(fd)

    # -- names
    def _key(self, info: os.stat_result) -> int:
        if (info.st_dev, info.st_ino) not in self._keys:
            self.created(info)
        return self._keys[(info.st_dev, info.st_ino)]

    def _entry(self, path: Path, info: os.stat_result) -> Entry:
        """What ``path`` (not followed, ``info`` its ``lstat``) is, as an entry of its directory."""
        mode = info.st_mode
        kind = (
            "dir"
            if stat.S_ISDIR(mode)
            else "file"
            if stat.S_ISREG(mode)
            else "symlink"
            if stat.S_ISLNK(mode)
            else "special"
        )
        target = os.readlink(path) if kind == "symlink" else ""
        rdev = info.st_rdev if kind == "special" else 0
        return Entry(kind, self._key(info), mode, info.st_uid, info.st_gid, target, rdev)

    def _scan(self, directory: Path) -> dict[str, Entry]:
        """A directory's names now, each with what it is (nothing followed, nothing opened)."""
        with os.scandir(directory) as items:
            return {i.name: self._entry(Path(i.path), i.stat(follow_symlinks=False)) for i in items}

    def _take(self, path: Path, *, fresh: bool) -> Entry:
        """``path`` and everything under it made durable as it is now; ``fresh``: inodes the model has not
        seen (they came from outside), though their numbers may be ones it knows."""
        info = os.lstat(path)
        if fresh:
            self.created(info)
        entry = self._entry(path, info)
        if entry.kind == "file":
            self._keep_bytes(path, follow=False)
        elif entry.kind == "dir":
            with os.scandir(path) as items:
                names = [item.name for item in items]
            self.listings[entry.key] = {name: self._take(path / name, fresh=fresh) for name in names}
        return entry

    def _inside(self, path: str) -> bool:
        return path == str(self.root) or path.startswith(str(self.root) + os.sep)

    def _label(self, path: Path, entry: Entry | None) -> str:
        """How the rollback names a path it changed: relative to the directory, else whole."""
        text = os.path.relpath(path, self.root) if self._inside(str(path)) else str(path)
        return f"{text}/" if entry is not None and entry.kind == "dir" else text


def _open_regular(path: str | Path, *, follow: bool) -> int | None:
    """A regular file opened for reading, or None: anything else is not opened for good (the caller
    looked first; the open never blocks, should something else have taken the name since)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _copy(source: int, out: int, size: int) -> None:
    """Up to ``size`` bytes from ``source`` to ``out`` (fewer if it shrank meanwhile), in the kernel."""
    offset = 0
    while offset < size:
        sent = os.sendfile(out, source, offset, min(CHUNK, size - offset))
        if sent == 0:
            return
        offset += sent


def _same_bytes(fd: int, durable: Path) -> bool:
    """Whether the open file holds exactly the bytes kept at ``durable`` (none, where it is missing)."""
    size = os.fstat(fd).st_size
    if not durable.exists():
        return size == 0
    with open(durable, "rb") as kept:
        if os.fstat(kept.fileno()).st_size != size:
            return False
        offset = 0
        while offset < size:
            chunk = kept.read(CHUNK)
            if not chunk or os.pread(fd, len(chunk), offset) != chunk:
                return False
            offset += len(chunk)
    return True
