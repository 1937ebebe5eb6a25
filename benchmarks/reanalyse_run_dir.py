"""Rewrite a bundled run directory's analysis/ and table.md with this checkout's code.

Why: tests/data keeps run directories written by real cluster runs, and CI holds
`moe-harness analyze RUN_DIR` to the tables stored there (tests/test_ray_job_real.py). When the
analysis changes on purpose, those tables are written again through the same path the command and
the run take (harness/reanalysis.py), not by hand. Only analysis/'s files and table.md are written;
the manifest, traces, logs and load records stay as the run left them (so the manifest's file list
keeps describing the node's output). A file equal to the new one (text, or every number within
1e-9: Python 3.12's sum on the node rounds a last digit otherwise than 3.11's) is left as is. The
first time table.md changes, the node's own is kept beside it as table.node-original.md. Files are
written into a hidden folder inside the run directory and each is renamed into place, with SIGINT
and SIGTERM held during the renames.

Usage:
    python benchmarks/reanalyse_run_dir.py RUN_DIR [RUN_DIR ...] [--leave-out kernels_long.parquet] [--check]
--leave-out: a file of analysis/ not written (the bundled runs leave the kernel table out: size);
--check: write nothing, list what would change, exit 1 if anything would.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TABLE = "table.md"
NODE_TABLE = "table.node-original.md"
REL_TOL = 1e-9


def same_cell(a: str, b: str) -> bool:
    """Equal text, or equal numbers to REL_TOL (a node's Python 3.12 adds floats with compensated
    summation, 3.11 does not, so the last digits may differ)."""
    if a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=REL_TOL)
    except ValueError:
        return False


def _same_json(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=REL_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    return a == b


def same_content(old: Path, new: Path) -> bool:
    """The same bytes, or (CSV, JSON, Parquet) the same cells with numbers equal to REL_TOL."""
    a, b = old.read_bytes(), new.read_bytes()
    if a == b:
        return True
    if new.suffix == ".parquet":
        from analysis.io.parquet_reader import read_parquet

        table_a, table_b = read_parquet(a, len(a) * 1000), read_parquet(b, len(b) * 1000)
        return table_a.kinds == table_b.kinds and table_a.rows == table_b.rows and all(
            all(same_cell(repr(x), repr(y)) for x, y in zip(table_a.columns[name], table_b.columns[name]))
            for name in table_a.kinds)
    if new.suffix == ".csv":
        rows_a, rows_b = (list(csv.reader(io.StringIO(x.decode()))) for x in (a, b))
        return len(rows_a) == len(rows_b) and all(
            len(ra) == len(rb) and all(same_cell(x, y) for x, y in zip(ra, rb)) for ra, rb in zip(rows_a, rows_b))
    if new.suffix == ".json":
        return _same_json(json.loads(a), json.loads(b))
    return False


def reanalyse_into(run_dir: Path, staging: Path) -> None:
    """analysis/ in staging/analysis and table.md in staging, as `moe-harness analyze RUN_DIR` writes them;
    the table names problems.csv where the run wrote it (the manifest's run_dir), as the node's does."""
    from harness.reanalysis import reanalyse
    from harness.recorded_run import read_run_dir

    run = read_run_dir(run_dir)
    shown = Path(str(run.manifest.get("run_dir") or run_dir)) / "analysis" / "problems.csv"
    (staging / "analysis").mkdir()
    written = reanalyse(run, staging / "analysis", problems_at=str(shown))
    (staging / TABLE).write_text(written.table, encoding="utf-8")


def plan_changes(run_dir: Path, staging: Path, leave_out: set[str]) -> list[tuple[str, str]]:
    """(path relative to the run directory, what happens) for every file the re-analysis wrote."""
    changes = []
    for new in sorted((staging / "analysis").iterdir()):
        rel = f"analysis/{new.name}"
        if new.name in leave_out:
            changes.append((rel, "left out"))
        elif not (run_dir / rel).exists():
            changes.append((rel, "new"))
        else:
            changes.append((rel, "unchanged" if same_content(run_dir / rel, new) else "rewritten"))
    table = run_dir / TABLE
    changes.append((TABLE, "new" if not table.exists() else
                    "unchanged" if same_content(table, staging / TABLE) else "rewritten"))
    return changes


def apply_changes(run_dir: Path, staging: Path, changes: list[tuple[str, str]]) -> None:
    """Each new or rewritten file renamed into place (signals held); the node's table.md kept first."""
    from harness.interrupts import signals_held

    moving = [rel for rel, what in changes if what in ("new", "rewritten")]
    if TABLE in moving and (run_dir / TABLE).exists() and not (run_dir / NODE_TABLE).exists():
        shutil.copyfile(run_dir / TABLE, staging / NODE_TABLE)
        moving.insert(0, NODE_TABLE)
    manifest = _manifest_after(run_dir, staging, moving)
    with signals_held():
        for rel in moving:
            (run_dir / rel).parent.mkdir(exist_ok=True)
            os.replace(staging / rel, run_dir / rel)
        if manifest is not None:
            os.replace(manifest, run_dir / "manifest.json")


def _manifest_after(run_dir: Path, staging: Path, moving: list[str]) -> Path | None:
    """The run's manifest with the entries (bytes, sha256) of the files this script writes (analysis/'s,
    table.md) brought up to what they hold after this run, and a `reanalysed` entry naming them,
    written into staging; None for a run without a manifest, or when every entry is already right."""
    import datetime
    import hashlib

    path = run_dir / "manifest.json"
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text(encoding="utf-8"))
    entries = {e.get("path"): e for e in manifest.get("files") or [] if isinstance(e, dict)}
    ours = ({rel for rel in entries if rel == TABLE or str(rel).startswith("analysis/")} | set(moving)) - {NODE_TABLE}
    updated = []
    for rel in sorted(ours):
        source = staging / rel if rel in moving else run_dir / rel
        if not source.is_file():
            continue  # left out of the bundle (kernels_long.csv): its entry stays the run's
        data = source.read_bytes()
        entry = {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if rel not in entries:
            manifest.setdefault("files", []).append(entry)
        elif entries[rel].get("sha256") != entry["sha256"]:
            entries[rel].update(entry)
        else:
            continue
        updated.append(rel)
    if not updated:
        return None
    manifest["reanalysed"] = {"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "by": "benchmarks/reanalyse_run_dir.py",
                              "files": sorted(set((manifest.get("reanalysed") or {}).get("files", [])) | set(updated))}
    out = staging / "manifest.json"
    out.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def reanalyse_run_dir(run_dir: Path, leave_out: set[str], check: bool) -> list[tuple[str, str]]:
    staging = Path(tempfile.mkdtemp(dir=run_dir, prefix=".reanalysis-"))
    try:
        reanalyse_into(run_dir, staging)
        changes = plan_changes(run_dir, staging, leave_out)
        if not check:
            apply_changes(run_dir, staging, changes)
        return changes
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=Path)
    parser.add_argument("--leave-out", action="append", default=[], metavar="NAME",
                        help="a file of analysis/ not written (repeatable)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    args = parser.parse_args(argv)
    from analysis.api import AnalysisError
    from harness.recorded_run import RunDirError

    changed = False
    for run_dir in args.run_dirs:
        try:
            changes = reanalyse_run_dir(run_dir, set(args.leave_out), args.check)
        except (AnalysisError, RunDirError) as exc:
            print(f"reanalyse_run_dir: {exc}", file=sys.stderr)
            return 2
        for rel, what in changes:
            print(f"{run_dir / rel}: {what}" + (" (would be)" if args.check and what in ("new", "rewritten") else ""))
        changed |= any(what in ("new", "rewritten") for _, what in changes)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
