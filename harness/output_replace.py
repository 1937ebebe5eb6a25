"""Moving a command's new output into a folder that holds its earlier output, with no window between
checking a file and removing it.

Why: `report --overwrite` checked that kernel_report_files/ held only its own files, then moved the
folder away and deleted it whole: a file written there in between went with it (14 of 20 tries). A
check of a path says nothing of what the path holds a moment later. So nothing is removed where a
user can reach it: a file to be replaced or removed is first renamed into a private folder (made
here, in the same folder: the rename is atomic) and checked there, where nobody writes: a regular
file, never a link, with the non-empty sha256 the marker trusts. Only then is it removed; anything
else goes back to its name, never over a file that appeared there since. Folders are never removed
whole: only files checked this way go, then folders left empty. Every step works on open folders
(no path is resolved twice), so a folder swapped for a link meanwhile is never followed.
"""
from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from harness.output_marker import EMPTY_SHA256, fd_sha256

ASIDE_PREFIX = ".moe-harness-tmp-aside-"  # a staging name: `prepare_output` lists no such folder
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def move_no_replace(source: str | Path, target: str | Path, source_dir_fd: int | None = None,
                    target_dir_fd: int | None = None) -> None:
    """Rename source to target unless target exists (FileExistsError): one system call on Linux
    (renameat2 RENAME_NOREPLACE); elsewhere a hard link, which fails the same way, then an unlink."""
    if _renameat2 is not None:
        done = _renameat2(_AT_FDCWD if source_dir_fd is None else source_dir_fd, os.fsencode(source),
                          _AT_FDCWD if target_dir_fd is None else target_dir_fd, os.fsencode(target),
                          _RENAME_NOREPLACE)
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # not refused for want of support
            raise OSError(code, os.strerror(code), str(target))
    if stat.S_ISDIR(os.stat(source, dir_fd=source_dir_fd, follow_symlinks=False).st_mode):  # no hard link
        try:
            os.stat(target, dir_fd=target_dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(source, target, src_dir_fd=source_dir_fd, dst_dir_fd=target_dir_fd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    os.link(source, target, src_dir_fd=source_dir_fd, dst_dir_fd=target_dir_fd, follow_symlinks=False)
    os.unlink(source, dir_fd=source_dir_fd)


@dataclass
class Outcome:
    """What could not be done as asked: paths relative to the folder (kept_aside: absolute)."""
    left_alone: list[str] = field(default_factory=list)  # not the file the marker trusts: where it was
    not_placed: list[str] = field(default_factory=list)  # new files not moved in (their names not free)
    kept_aside: list[str] = field(default_factory=list)  # a user's file whose name was taken meanwhile

    def __bool__(self) -> bool:
        return bool(self.left_alone or self.not_placed or self.kept_aside)

    def line(self) -> str:
        taken = [p for p in self.not_placed if p not in self.left_alone]
        parts = [f"left alone, not as the command wrote it (changed since its check): {', '.join(self.left_alone)}"]
        parts += [f"not moved in, its name taken meanwhile: {', '.join(taken)}"]
        parts += [f"a file whose name was taken meanwhile is kept at {', '.join(self.kept_aside)}"]
        return "; ".join(part for part, given in zip(parts, (self.left_alone, taken, self.kept_aside)) if given)


class Replacer:
    """The one way files in an existing output folder are replaced or removed (module docstring):
    `place` a new file, `remove` an earlier one, `close` (removes the folders left empty)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.outcome = Outcome()
        self._fds: dict[str, int] = {"": os.open(folder, _OPEN_FOLDER)}
        while True:
            self._aside_name = f"{ASIDE_PREFIX}{secrets.token_hex(6)}"
            try:
                os.mkdir(self._aside_name, 0o700, dir_fd=self._fds[""])  # owner-only: nobody writes there
                break
            except FileExistsError:
                continue
        self._aside = os.open(self._aside_name, _OPEN_FOLDER, dir_fd=self._fds[""])
        self._slots = 0
        self._emptied: set[str] = set()

    def __enter__(self) -> Replacer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def place(self, relative: str, source: Path, earlier_sha256: str | None) -> bool:
        """source (a file of the command's staging folder) becomes folder/relative; what is there
        goes only when it is the file the marker trusts (earlier_sha256). False: not placed."""
        parent, name = self._folder_of(relative, create=True), relative.rpartition("/")[2]
        if parent is None:  # a folder of its path is a file or a link now
            self.outcome.left_alone.append(relative.rpartition("/")[0])
        if parent is None or not self._clear(parent, name, relative, earlier_sha256):
            self.outcome.not_placed.append(relative)
            return False
        try:
            move_no_replace(source, name, target_dir_fd=parent)
        except FileExistsError:  # written there since it was cleared: theirs stays, ours is not placed
            self.outcome.not_placed.append(relative)
            return False
        return True

    def remove(self, relative: str, sha256: str) -> None:
        """folder/relative goes when it is the file the marker trusts; else it stays where it is."""
        parent = self._folder_of(relative, create=False)
        if parent is not None and self._clear(parent, relative.rpartition("/")[2], relative, sha256):
            self._emptied.add(relative.rpartition("/")[0])

    def remove_emptied_folders(self) -> None:
        """Remove the folders that removals left empty, deepest first; one holding anything stays."""
        for folder in sorted(self._emptied_and_parents(), key=lambda f: -f.count("/")):
            parent = self._folder_of(folder, create=False)
            if parent is not None:
                try:
                    os.rmdir(folder.rpartition("/")[2], dir_fd=parent)
                except OSError:  # not empty (a file of the user's), or gone
                    continue
                if folder in self._fds:  # never written through again: made anew when needed
                    os.close(self._fds.pop(folder))
        self._emptied.clear()

    def close(self) -> None:
        """Remove the folders left empty, then the private folder, unless a user's file waits there
        (Outcome.kept_aside names it)."""
        try:
            self.remove_emptied_folders()
            if not self.outcome.kept_aside:
                os.rmdir(self._aside_name, dir_fd=self._fds[""])
        finally:
            os.close(self._aside)
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}

    def _emptied_and_parents(self) -> set[str]:
        found = set()
        for folder in self._emptied:
            while folder:
                found.add(folder)
                folder = folder.rpartition("/")[0]
        return found

    def _folder_of(self, relative: str, create: bool) -> int | None:
        """An open fd of the folder holding relative, each part opened inside the one before, never
        through a link; None when a part is not a real folder (or is missing and not `create`)."""
        path = ""
        for part in relative.split("/")[:-1]:
            inner = f"{path}/{part}" if path else part
            if inner not in self._fds:
                try:
                    if create:
                        try:
                            os.mkdir(part, dir_fd=self._fds[path])
                        except FileExistsError:
                            pass
                    self._fds[inner] = os.open(part, _OPEN_FOLDER, dir_fd=self._fds[path])
                except OSError:
                    return None
            path = inner
        return self._fds[path]

    def _clear(self, parent: int, name: str, relative: str, sha256: str | None) -> bool:
        """The name is free, or made free: what it held is moved aside, checked there, and removed
        when it is the file with `sha256`; else put back (False)."""
        try:
            if not stat.S_ISREG(os.lstat(name, dir_fd=parent).st_mode):
                self.outcome.left_alone.append(relative)  # a folder, link or device is never anyone's output
                return False
        except FileNotFoundError:
            return True
        if sha256 is None or sha256 == EMPTY_SHA256:
            self.outcome.left_alone.append(relative)
            return False
        slot = str(self._slots)
        self._slots += 1
        try:
            os.rename(name, slot, src_dir_fd=parent, dst_dir_fd=self._aside)
        except FileNotFoundError:
            return True
        if self._is(slot, sha256):
            os.unlink(slot, dir_fd=self._aside)
            return True
        self.outcome.left_alone.append(relative)
        try:
            move_no_replace(slot, name, source_dir_fd=self._aside, target_dir_fd=parent)
        except FileExistsError:
            self.outcome.kept_aside.append(str(self.folder / self._aside_name / slot))
        return False

    def _is(self, slot: str, sha256: str) -> bool:
        """The file moved aside is a regular file with this content (a link is never followed)."""
        try:
            fd = os.open(slot, _OPEN_FILE, dir_fd=self._aside)
        except OSError:
            return False
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode) and fd_sha256(fd) == sha256
        finally:
            os.close(fd)
