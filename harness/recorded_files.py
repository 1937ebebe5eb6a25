"""A file a command reads back is the file that was written: checked against the record its writer left.

Why: `export` and `report` of a run whose tables had been cut (a copy that stopped, a full disk, an
edit) read fewer rows without a word and exited 0. Every writer leaves a record: a run directory's
manifest.json lists each file with its size and sha256, and `analyze --out` (like every --out
command) leaves a marker with each file's sha256 (harness/output_marker.py). Before a table is read,
`check_as_written` finds the nearest record that lists it (the folder's own marker first, then the
run's manifest) and compares; a difference is an error naming the file and the record. A run
directory without a manifest has no record: `run_record` says so for the commands that need one.
"""
from __future__ import annotations

from pathlib import Path

from harness.output_marker import file_sha256, recorded

MANIFEST = "manifest.json"
RUN_MARKS = ("scenario.yaml", MANIFEST, ".running")  # files only a run directory holds
MARKER_COMMANDS = ("analyze",)  # whose output other commands read back


class RecordError(Exception):
    """A file read back differs from its record, or the record itself cannot be read; names both."""


def run_dir_of(folder: Path) -> Path | None:
    """The run directory a folder is, or holds as its analysis/ (None: not inside a run)."""
    for candidate in (folder, folder.parent):
        if any((candidate / mark).exists() for mark in RUN_MARKS):
            return candidate
    return None


def manifest_files(run_dir: Path) -> dict[str, str]:
    """path -> sha256 of every file the run's manifest lists; RecordError when it is not a manifest."""
    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, read_json

    path = run_dir / MANIFEST
    try:
        data = read_json(path, CONFIG_LIMIT_BYTES, "a run manifest")
    except InputFileError as exc:
        raise RecordError(str(exc)) from None
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("sha256"), str)
            for e in entries):
        raise RecordError(f"{path}: not a run manifest (no list of files with path and sha256)")
    return {e["path"]: e["sha256"] for e in entries}


def run_record(run_dir: Path) -> dict[str, str]:
    """The run's manifest entries; a run without a manifest (still running, cut short, or its manifest
    lost) is a RecordError: its files cannot be shown to be the ones it wrote."""
    if not (run_dir / MANIFEST).is_file():
        raise RecordError(f"{run_dir}: no {MANIFEST}: the run has not finished, was cut short or lost its manifest, "
                          "so its files cannot be checked against what it wrote")
    return manifest_files(run_dir)


def check_as_written(path: Path, need_record: bool = False) -> None:
    """path's content is what its writer recorded (module docstring). need_record: a file inside a run
    directory without a manifest is an error too (export, report)."""
    folder = path.parent
    for command in MARKER_COMMANDS:
        entries = recorded(folder, command)
        if path.name in entries:
            _compare(path, entries[path.name], folder / f".moe-harness-{command}.json")
            return
    run_dir = run_dir_of(folder)
    if run_dir is None:
        return  # a folder no command wrote: only its rows are checked, by its reader
    if not (run_dir / MANIFEST).is_file() and not need_record:
        return
    entries = run_record(run_dir)
    relative = path.relative_to(run_dir).as_posix()
    if relative not in entries:
        raise RecordError(f"{path}: not among the files the run's {run_dir / MANIFEST} lists: not written by the run")
    _compare(path, entries[relative], run_dir / MANIFEST)


def _compare(path: Path, expected: str, record: Path) -> None:
    actual = file_sha256(path)
    if actual != expected:
        raise RecordError(f"{path}: not the file that was written: its sha256 differs from the one {record} holds "
                          "(cut, edited or replaced since)")
