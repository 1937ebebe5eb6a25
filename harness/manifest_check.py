"""The files a run directory's analysis reads again, checked against the size and sha256 its manifest lists.

Why: `analyze`, `report`, `compare` and `export` of a run directory analyse the traces it kept again
(harness/reanalysis.py); a trace replaced by another run's (or cut, or edited) was analysed as this
run's, although manifest.json holds each file's sha256 (harness/run_dir.py writes it last). Each file
read that the manifest lists must be there with its listed size and sha256, else a one-line error
names it; a file the manifest does not list is read as before (a run from before manifests listed
files). The tables a command reads back are checked by harness/recorded_files.py.

The sha256 is its own streamed pass before the analysis, not taken while loading (the loader stays
a reader of trace events, and a run directory's check one place). A run keeps
its traces as .json.gz, so the pass reads about a tenth of what the loader inflates: 0.011 s for a
12.7 MB .json.gz (154 MB of trace) against 1.2-1.3 s for `analyze RUN_DIR` of it, under 1% (2 cores).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from harness.run_dir import MANIFEST


def listed_files(manifest: dict) -> dict[str, dict]:
    """Relative path -> the manifest's entry (bytes, sha256) for each well-formed entry of `files`."""
    entries = manifest.get("files")
    if not isinstance(entries, list):
        return {}
    return {e["path"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str)
            and isinstance(e.get("sha256"), str)}


def first_mismatch(run_dir: Path, manifest: dict, paths: Iterable[str | Path]) -> str | None:
    """The one-line problem of the first of `paths` (inside run_dir) that the manifest lists but that is
    missing, of another size or another sha256; None where every listed one matches."""
    from analysis.api import InputFileError, input_sha256

    listed = listed_files(manifest)
    if not listed:
        return None
    record = run_dir / MANIFEST
    for path in map(Path, paths):
        try:
            entry = listed.get(path.relative_to(run_dir).as_posix())
        except ValueError:  # outside the run directory: not the run's file
            continue
        if entry is None:
            continue
        try:
            size_bytes = os.stat(path).st_size
        except FileNotFoundError:
            return f"{path}: missing, though the run's {record} lists it: the run directory does not match its manifest"
        except OSError as exc:
            return f"{path}: cannot be checked against the run's {record}: {exc.strerror or exc}"
        if isinstance(entry.get("bytes"), int) and size_bytes != entry["bytes"]:
            return (f"{path}: {size_bytes} bytes, {record} lists {entry['bytes']}: it does not match the manifest "
                    "(cut, edited or replaced since the run)")
        try:
            actual = input_sha256(path, None, "a run file")
        except InputFileError as exc:
            return str(exc)
        if actual != entry["sha256"]:
            return (f"{path}: its sha256 differs from the one {record} lists: it does not match the manifest "
                    "(edited or replaced since the run)")
    return None


def saved_run_mismatch(given: str | Path) -> str | None:
    """For `view` of a run directory (or its analysis/ folder): the first of the run's
    traces and analysis.json that does not match its manifest, else None (no manifest: nothing to check).
    The page annotates those traces and analyses them again where the kernel table was left out."""
    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, read_json

    given = Path(given)
    run_dir = given.parent if given.name == "analysis" else given
    if not (run_dir / MANIFEST).is_file():
        return None
    try:
        manifest = read_json(run_dir / MANIFEST, CONFIG_LIMIT_BYTES, "a run manifest")
    except InputFileError as exc:
        return str(exc)
    if not isinstance(manifest, dict):
        return f"{run_dir / MANIFEST}: not a run manifest"
    traces = sorted((run_dir / "traces").glob("*.trace.json*")) if (run_dir / "traces").is_dir() else []
    return first_mismatch(run_dir, manifest, [*traces, run_dir / "analysis" / "analysis.json"])
