"""Where a command's --out files go: never over a user's files, never half old and half new.

Why: `analyze|compare|report|calibrate|export --out DIR` used to write into any folder, replacing files
of the same names without a word, and a Ctrl-C while writing left old and new files mixed. Then a
marker that listed `../x` made `--out` delete files outside DIR. The rule, checked by
`prepare_output` before any work starts and again before anything is moved:

- DIR does not exist: it is created (with its parents) when the output is complete.
- DIR exists and is empty: the files are moved into it.
- DIR holds earlier output of the same command (files its marker lists, inside DIR, with the content
  they were written with: harness/output_marker.py): refused unless --overwrite, naming the files
  that would be replaced; with --overwrite they are replaced, and those the new output lacks are
  removed (`prune`, except for `export`, whose tables are chosen per call).
- DIR holds anything else (a user's file, or a file of the command's that changed since): refused,
  naming it, --overwrite or not. A command may leave other files alone beside its own (`beside`:
  the report next to its analysis files, an export in a run's folder); even then it replaces none.
- DIR is a file, or it (or the nearest existing parent) cannot be written: refused.
- DIR holds anything named like the command's marker that is not a marker of this project the user
  owns (a folder, a link, another's file): refused, --overwrite or not, and left as it is.

The files are written into a private folder (a sibling of a new DIR, a hidden folder inside an
existing one, so the final moves never cross file systems) and moved into place at the end, with
SIGINT and SIGTERM held back during the moves; into an existing DIR through harness/output_replace.py,
which removes an earlier file only once it is out of reach and checked again. Modes follow the umask,
as every other file of a run.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from harness.output_marker import (
    MARKER,
    Marker,
    MarkerError,
    files_in,
    marker_path,
    marker_text,
    owned_names,
    read_marker,
    trusted,
)
from harness.output_replace import Replacer, move_no_replace

_STAGING_PREFIX = ".moe-harness-tmp-"
T = TypeVar("T")


class OutputError(Exception):
    """The --out destination cannot be used; the message says which path and why."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _probe_writable(folder: Path, what: str) -> None:
    """Create and remove a folder in `folder`: the one test that also holds for root and read-only mounts."""
    try:
        probe = tempfile.mkdtemp(dir=folder, prefix=_STAGING_PREFIX)
        os.rmdir(probe)
    except OSError as exc:
        raise OutputError(f"{what}: cannot write in {folder}: {exc.strerror or exc}") from None


def check_destination_folder(path: str | Path, what: str) -> Path:
    """A folder that exists or can be created and written (for --runs-dir and the like)."""
    folder = Path(path).expanduser()
    if os.path.lexists(folder) and not folder.is_dir():
        raise OutputError(f"{what} {folder} is a file, not a folder")
    anchor = _nearest_existing(folder)
    if not anchor.is_dir():
        raise OutputError(f"{what} {folder}: {anchor} is a file, not a folder")
    _probe_writable(anchor, f"{what} {folder}")
    return folder


class PreparedOutput:
    """A checked --out destination; `write(fill)` runs fill(staging folder) and moves the result in."""

    def __init__(self, path: Path, command: str, overwrite: bool, beside: set[str] | None, given: str = "",
                 prune: bool = True):
        self.path = path
        self.given = given or str(path)  # --out as the user wrote it, for messages
        self.command = command
        self.overwrite = overwrite
        self.beside = beside
        self.prune = prune

    def write(self, fill: Callable[[Path], T]) -> T:
        """fill writes the command's files into the folder it is given; they are moved into place
        only when it returns. The destination is checked again (another program may have written
        there meanwhile), and nothing is moved over a file the command cannot show it wrote."""
        _check(self.path, self.command, self.overwrite, self.beside)
        exists = self.path.is_dir()
        if exists:
            staging = Path(tempfile.mkdtemp(dir=self.path, prefix=_STAGING_PREFIX))  # owner-only
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=self.path.parent, prefix=f".{self.path.name}{_STAGING_PREFIX}"))
        try:
            result = fill(staging)
            written = files_in(staging)
            tops = {name.partition("/")[0] for name in written} | {p.name for p in staging.iterdir()}
            marker_name = MARKER.format(command=self.command)
            if marker_name in tops:
                raise OutputError(f"`{self.command}` wrote a file named like its marker, {marker_name}: "
                                  "nothing was moved")
            with _signals_held():
                if exists:
                    self._replace(staging, written, tops)
                else:
                    marker_path(staging, self.command).write_text(marker_text(written))
                    os.chmod(staging, 0o777 & ~_umask())  # the folder itself is the output: as a new one
                    try:
                        move_no_replace(staging, self.path)
                    except FileExistsError:
                        raise OutputError(f"--out {self.path} was made by another program while `{self.command}` "
                                          "was writing: nothing was written there; run it again") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # the command's own private folder (gone once moved)
        return result

    def _replace(self, staging: Path, written: dict[str, str], tops: set[str]) -> None:
        """The staged output into the existing folder, its earlier output replaced or removed only
        through the Replacer (harness/output_replace.py), the marker last: it lists what was placed."""
        marker = _read_marker(self.path, self.command)
        earlier = trusted(marker, self.command)
        own = owned_names(self.path, earlier)
        _refuse_clashes(self.path, self.command, tops, own, self.overwrite)
        kept = {} if self.prune else {n: d for n, d in earlier.items() if n.partition("/")[0] in own - tops}
        stale_tops = own if self.prune else own & tops  # a replaced folder's files the new output lacks go too
        new_marker = marker_path(staging, self.command)
        new_marker.write_text(marker_text({**kept, **written}))
        with Replacer(self.path) as replacer:
            for relative, digest in sorted(earlier.items()):
                if relative.partition("/")[0] in stale_tops and relative not in written:
                    replacer.remove(relative, digest)
            replacer.remove_emptied_folders()  # before the placing: a folder of old may be a file now
            for root, _, files in os.walk(staging):
                for source in sorted(Path(root) / name for name in files):
                    relative = source.relative_to(staging).as_posix()
                    if source != new_marker:
                        replacer.place(relative, source, earlier.get(relative))
            if replacer.outcome.not_placed:  # the marker lists only what is there
                new_marker.write_text(marker_text({n: d for n, d in {**kept, **written}.items()
                                                   if n not in replacer.outcome.not_placed}))
            replacer.place(new_marker.name, new_marker, marker.sha256)
        if replacer.outcome:
            raise OutputError(f"--out {self.path}: the new output is in place, except: {replacer.outcome.line()}")

    def check_names(self, names: Iterable[str]) -> None:
        """Before any work, when the names are known: none is a file the command cannot show it wrote,
        nor its own earlier output without --overwrite (write() checks again before moving)."""
        if self.path.is_dir():
            own = owned_names(self.path, trusted(_read_marker(self.path, self.command), self.command))
            _refuse_clashes(self.path, self.command, set(names), own, self.overwrite)

    def write_or_say(self, fill: Callable[[Path], T]) -> tuple[bool, T | None]:
        """write(fill); a failure is one line on stderr naming the command and --out: (False, None)."""
        try:
            return True, self.write(fill)
        except (OutputError, OSError) as exc:
            print(f"moe-harness {self.command}: --out {self.given}: {exc}", file=sys.stderr)
            return False, None


def prepare_output(path: str | Path, command: str, overwrite: bool = False,
                   beside: Iterable[str] | None = (), prune: bool = True) -> PreparedOutput:
    """Check an --out folder before any work (module docstring: the rule); raises OutputError.

    beside: names left alone next to the command's own; None: any (the report in its analysis folder).
    prune: earlier output the new one lacks is removed (False: kept, as export's other tables)."""
    folder = Path(path).expanduser()
    near = None if beside is None else set(beside)
    _check(folder, command, overwrite, near)
    return PreparedOutput(folder, command, overwrite, near, given=str(path), prune=prune)


def _check(folder: Path, command: str, overwrite: bool, beside: set[str] | None) -> None:
    check_destination_folder(folder, "--out")
    if not folder.is_dir():
        return
    marker = MARKER.format(command=command)
    entries = trusted(_read_marker(folder, command), command)
    own = owned_names(folder, entries)
    changed = {name.partition("/")[0] for name in entries} - own
    present = sorted(p.name for p in folder.iterdir() if not p.name.startswith(_STAGING_PREFIX) and p.name != marker)
    # beside None: other files may stay (a changed one of its own too, now someone else's); none is replaced
    foreign = [n for n in present if n not in own and beside is not None and n not in beside]
    earlier = [n for n in present if n in own]
    if foreign:
        edited = [n for n in foreign if n in changed]
        others = [n for n in foreign if n not in changed]
        what = [f"files that `{command}` did not write: {_names(others)}"] if others else []
        what += [f"files changed since `{command}` wrote them: {_names(edited)}"] if edited else []
        raise OutputError(f"--out {folder} holds {'; and '.join(what)}; give a new or empty folder "
                          "(nothing there is replaced)")
    if earlier and not overwrite:
        raise OutputError(
            f"--out {folder} already holds `{command}` output that would be replaced: {_names(earlier)}; "
            f"give a new folder, or --overwrite to replace it")


def _refuse_clashes(folder: Path, command: str, tops: set[str], own: set[str], overwrite: bool) -> None:
    """Nothing is moved over a name the command cannot show it wrote, nor over its own without --overwrite."""
    taken = sorted(n for n in tops if os.path.lexists(folder / n))
    foreign = [n for n in taken if n not in own]
    if foreign:
        raise OutputError(f"--out {folder} holds {_names(foreign)}, which `{command}` did not write (or which "
                          "changed since it did): nothing was replaced; move them away or give another folder")
    if taken and not overwrite:
        raise OutputError(f"--out {folder} already holds `{command}` output that would be replaced: "
                          f"{_names(taken)}; give a new folder, or --overwrite to replace it")


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _read_marker(folder: Path, command: str) -> Marker:
    """read_marker, its refusal an OutputError."""
    try:
        return read_marker(folder, command)
    except MarkerError as exc:
        raise OutputError(f"--out {exc}") from None


class _signals_held:
    """SIGINT and SIGTERM wait until the files are in place (main thread only; a no-op elsewhere)."""

    def __enter__(self):
        self._held = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
        if self._held:
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        return self

    def __exit__(self, *exc):
        if self._held:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
        return False
