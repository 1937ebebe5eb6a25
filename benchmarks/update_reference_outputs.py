"""Write tests/reference again from this checkout's analysis, after a deliberate change of outputs.

Why: tests/test_reference_outputs.py holds every bundled real trace set's small tables to the ones
stored in tests/reference. When a change is meant to move numbers, this writes them again through the
same path the check takes (tests/reference_outputs.py), and lists each file that changed, so the diff
under review is the change's effect on every bundled trace. Every input is analysed before anything
is written (a failing input writes nothing). Only tables this script writes are touched, and only
under tests/reference: a table no input writes any more is removed, its README stays.

Usage:
    python benchmarks/update_reference_outputs.py [--check]
--check: write nothing, list what would change, exit 1 if anything would.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.reference_outputs import (REFERENCE_DIR, REPO_ROOT, TABLES, AnalysisFailed,  # noqa: E402
                                     analyse_tables, reference_inputs)


class OutsideReference(ValueError):
    """A path to write that does not lie under tests/reference."""


def current_tables() -> dict[Path, bytes]:
    """Every table the analysis writes now, keyed by where it is stored under tests/reference."""
    tables = {}
    with tempfile.TemporaryDirectory(prefix="reference-outputs-") as work:
        for index, (name, traces) in enumerate(reference_inputs().items()):
            try:
                written = analyse_tables(traces, Path(work) / f"{index:03d}")
            except AnalysisFailed as exc:
                raise AnalysisFailed(f"{name}: {exc}") from exc
            for table, data in written.items():
                tables[REFERENCE_DIR / name / table] = data
    return tables


def stored_table_files() -> set[Path]:
    """The tables tests/reference holds now (its README aside)."""
    return {p for p in REFERENCE_DIR.rglob("*") if p.is_file() and p.name in TABLES and p.parent != REFERENCE_DIR}


def inside_reference(path: Path) -> Path:
    """path, once it is known to resolve (links followed) under tests/reference."""
    if not path.resolve().is_relative_to(REFERENCE_DIR.resolve()) or path.parent == REFERENCE_DIR:
        raise OutsideReference(f"refusing to write {path}: not a table under {REFERENCE_DIR}")
    return path


def plan(tables: dict[Path, bytes], stored: set[Path]) -> dict[Path, str]:
    """What happens to each file that changes: new, rewritten or removed (unchanged ones left out)."""
    changes = {inside_reference(p): "removed" for p in stored - tables.keys()}
    for path, data in tables.items():
        if path not in stored:
            changes[inside_reference(path)] = "new"
        elif path.read_bytes() != data:
            changes[inside_reference(path)] = "rewritten"
    return dict(sorted(changes.items()))


def apply_changes(changes: dict[Path, str], tables: dict[Path, bytes]) -> None:
    """Each new or rewritten table written aside and renamed into place; removed ones deleted, with
    the folders they leave empty."""
    for path, what in changes.items():
        if what == "removed":
            path.unlink()
            folder = path.parent
            while folder != REFERENCE_DIR and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.new")
        aside.write_bytes(tables[path])
        os.replace(aside, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    args = parser.parse_args(argv)
    try:
        tables = current_tables()
        changes = plan(tables, stored_table_files())
    except (AnalysisFailed, OutsideReference) as exc:
        print(f"update_reference_outputs: {exc}", file=sys.stderr)
        return 2
    if not args.check:
        apply_changes(changes, tables)
    for path, what in changes.items():
        print(f"{path.relative_to(REPO_ROOT)}: {what}" + (" (would be)" if args.check else ""))
    inputs = len({path.parent for path in tables})
    print(f"{inputs} inputs, {len(tables)} tables: {len(changes)} changed", file=sys.stderr)
    return 1 if args.check and changes else 0


if __name__ == "__main__":
    sys.exit(main())
