"""What a command wrote into a folder: each file's path and sha256, in a hidden marker beside them.

Why: a command may replace or delete only files it can show it wrote. A name alone proves nothing: a
shared results folder can carry a marker that lists `../x`, an absolute path or a user's own file,
and deleting what it lists deleted files outside the folder. A file counts as the command's own only
when its path, read from the marker, stays inside the folder and its content still has the sha256
the command recorded when it wrote it; a folder counts when every file in it does. Symbolic links,
devices and FIFOs are never anyone's output.

A marker is itself a file anyone who can write the folder can write, so before it may authorise a
replacement (`read_marker`, `trusted`) it must be a regular file of the user running the command, in
a format of this project; and an entry authorises nothing when it names content anyone has (the
sha256 of empty content: a user's empty file matched it), a name the command never writes
(harness/output_names.yaml), or a marker or staging folder of this project. `recorded` is the
lenient reading for a command that only reads the files back (harness/recorded_files.py).
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

MARKER = ".moe-harness-{command}.json"  # in a folder a command wrote: what it wrote there
PROJECT_PREFIX = ".moe-harness-"  # markers and staging folders: never anyone's output
FORMAT = "moe-harness output 2"  # 1 (a list of names, no hashes) proves nothing and is read as empty
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
OUTPUT_NAMES = Path(__file__).with_name("output_names.yaml")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_OPEN_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs


class MarkerError(Exception):
    """The marker's name holds something the command cannot take for its own marker; one line."""


@dataclass(frozen=True)
class Marker:
    """A marker as read: `sha256` of its bytes (None: there is none), its entries inside the folder."""
    sha256: str | None = None
    entries: dict[str, str] = field(default_factory=dict)


def marker_path(folder: Path, command: str) -> Path:
    return folder / MARKER.format(command=command)


def is_inside(relative: str) -> bool:
    """A marker's path names a file inside its folder: relative, no `..`, `.` or empty parts, no NUL."""
    if not relative or "\0" in relative or relative.startswith("/") or "\\" in relative:
        return False
    return all(part not in ("", ".", "..") for part in relative.split("/"))


def fd_sha256(fd: int) -> str:
    """sha256 of what an open file holds, read from its start."""
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while block := os.read(fd, 1 << 20):
        digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path, dir_fd: int | None = None) -> str | None:
    """sha256 of a regular file, never following a link (None for anything else)."""
    try:
        fd = os.open(path, _OPEN_NO_FOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return fd_sha256(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def files_in(folder: Path) -> dict[str, str]:
    """Every regular file under folder (its own fresh output): relative path -> sha256."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            digest = file_sha256(path)
            if digest is not None:
                found[path.relative_to(folder).as_posix()] = digest
    return found


def _entries(data: object, marker_name: str) -> dict[str, str] | None:
    """The entries of a marker document inside its folder; None when it is no marker of this project
    ({} for format 1, whose names prove nothing)."""
    if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("files"), dict):
        return {name: digest for name, digest in data["files"].items()
                if isinstance(name, str) and isinstance(digest, str) and is_inside(name) and name != marker_name}
    if isinstance(data, dict) and set(data) == {"files"} and isinstance(data["files"], list):
        return {}  # format 1: the names a command wrote, before hashes were recorded
    return None


def recorded(folder: Path, command: str) -> dict[str, str]:
    """The marker's entries whose paths stay inside the folder; {} when there is no readable marker.
    For reading a file back only: what may be replaced is `trusted(read_marker(...))`."""
    from analysis.api import CONFIG_LIMIT_BYTES, read_json
    from analysis.api import AnalysisError

    path = marker_path(folder, command)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return {}
        data = read_json(path, CONFIG_LIMIT_BYTES, "an output marker")
    except (OSError, AnalysisError):
        return {}
    return _entries(data, path.name) or {}


def read_marker(folder: Path, command: str) -> Marker:
    """The command's marker in folder, read without following a link; MarkerError when the name holds
    anything but a marker of this project that the user running the command owns (a folder, a link,
    a device, another user's file, other content): that is never replaced, nor believed."""
    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, parsed_json

    path = marker_path(folder, command)
    refused = (f"{path} is {{}}, not a marker `{command}` wrote: nothing there is replaced or believed; "
               "move it away or give another folder")
    try:
        kind = _kind(os.lstat(path).st_mode)  # a device is never opened, a link never followed
        if kind:
            raise MarkerError(refused.format(kind))
        fd = os.open(path, _OPEN_NO_FOLLOW)
    except FileNotFoundError:
        return Marker()
    except OSError as exc:
        raise MarkerError(refused.format(f"unreadable ({exc.strerror or exc})")) from None
    try:
        info = os.fstat(fd)
        if _kind(info.st_mode):  # swapped since the lstat
            raise MarkerError(refused.format(_kind(info.st_mode)))
        if info.st_uid != os.geteuid():
            raise MarkerError(refused.format(f"owned by another user (uid {info.st_uid})"))
        data = b""
        while len(data) <= CONFIG_LIMIT_BYTES and (block := os.read(fd, 1 << 20)):
            data += block
        if len(data) > CONFIG_LIMIT_BYTES:
            raise MarkerError(refused.format(f"larger than a marker can be ({CONFIG_LIMIT_BYTES} bytes)"))
    finally:
        os.close(fd)
    try:  # opened above without following a link; parsed as every JSON input is (its depth bounded)
        entries = _entries(parsed_json(data, path), path.name)
    except InputFileError:
        entries = None
    if entries is None:
        raise MarkerError(refused.format("a file of other content"))
    return Marker(hashlib.sha256(data).hexdigest(), entries)


def _kind(mode: int) -> str:
    """What a path that is not a regular file is, for a message ("" for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    return "a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"


@functools.cache
def output_names(command: str) -> tuple[str, ...] | None:
    """The command's output name patterns (harness/output_names.yaml); None for a command not listed."""
    from analysis.api import load_yaml

    names = load_yaml(OUTPUT_NAMES.read_text(encoding="utf-8")).get(command)
    return None if names is None else tuple(names)


def _named(relative: str, patterns: tuple[str, ...]) -> bool:
    parts = relative.split("/")
    return any(len(p := pattern.split("/")) == len(parts) and all(map(fnmatch.fnmatchcase, parts, p))
               for pattern in patterns)


def trusted(marker: Marker, command: str) -> dict[str, str]:
    """The entries that may authorise replacing or removing a file (module docstring): a sha256 of
    non-empty content, for a name the command writes, no marker or staging folder of this project."""
    patterns = output_names(command)
    return {name: digest for name, digest in marker.entries.items()
            if _SHA256.fullmatch(digest) and digest != EMPTY_SHA256
            and not any(part.startswith(PROJECT_PREFIX) for part in name.split("/"))
            and (patterns is None or _named(name, patterns))}


def owned_names(folder: Path, entries: dict[str, str]) -> set[str]:
    """The top-level names in folder that are wholly the recorded output: a file with its recorded
    hash, or a real folder whose every file has one (and that holds nothing else)."""
    tops: dict[str, dict[str, str]] = {}
    for name, digest in entries.items():
        top, _, rest = name.partition("/")
        tops.setdefault(top, {})[rest] = digest
    owned = set()
    for top, inside in tops.items():
        path = folder / top
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode):
            if "" in inside and file_sha256(path) == inside[""]:
                owned.add(top)
        elif stat.S_ISDIR(mode) and _folder_is(path, {k: v for k, v in inside.items() if k}):
            owned.add(top)
    return owned


def _folder_is(folder: Path, entries: dict[str, str]) -> bool:
    """Every entry under folder is a real folder or a regular file whose hash is recorded."""
    if not entries:
        return False
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                return False
        for name in files:
            path = Path(root) / name
            digest = file_sha256(path)
            if digest is None or entries.get(path.relative_to(folder).as_posix()) != digest:
                return False
    return True


def marker_text(entries: dict[str, str]) -> str:
    return json.dumps({"format": FORMAT, "files": dict(sorted(entries.items()))}, indent=1) + "\n"
