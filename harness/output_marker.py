"""What a command wrote into a folder: each file's path and sha256, in a hidden marker beside them.

Why: a command may replace or delete only files it can show it wrote. A name alone proves nothing: a
shared results folder can carry a marker that lists `../x`, an absolute path or a user's own file,
and deleting what it lists deleted files outside the folder. A file counts as the command's own only
when its path, read from the marker, stays inside the folder and its content still has the sha256
the command recorded when it wrote it; a folder counts when every file in it does. Symbolic links,
devices and FIFOs are never anyone's output.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

MARKER = ".moe-harness-{command}.json"  # in a folder a command wrote: what it wrote there
FORMAT = "moe-harness output 2"  # 1 (a list of names, no hashes) proves nothing and is read as empty


def marker_path(folder: Path, command: str) -> Path:
    return folder / MARKER.format(command=command)


def is_inside(relative: str) -> bool:
    """A marker's path names a file inside its folder: relative, no `..`, `.` or empty parts, no NUL."""
    if not relative or "\0" in relative or relative.startswith("/") or "\\" in relative:
        return False
    return all(part not in ("", ".", "..") for part in relative.split("/"))


def file_sha256(path: Path) -> str | None:
    """sha256 of a regular file, never following a link (None for anything else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def recorded(folder: Path, command: str) -> dict[str, str]:
    """The marker's entries whose paths stay inside the folder; {} when there is no readable marker."""
    from analysis.files import CONFIG_LIMIT_BYTES, read_json
    from analysis.api import AnalysisError

    path = marker_path(folder, command)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return {}
        data = read_json(path, CONFIG_LIMIT_BYTES, "an output marker")
    except (OSError, AnalysisError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return {}
    return {name: digest for name, digest in data["files"].items()
            if isinstance(name, str) and isinstance(digest, str) and is_inside(name) and name != path.name}


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
