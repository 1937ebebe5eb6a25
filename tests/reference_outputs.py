"""Reference outputs: the small tables `moe-harness analyze` writes for every bundled real trace set,
kept under tests/reference so that a change which moves a number shows in review and fails CI.

Shared by the check (tests/test_reference_outputs.py) and the command that writes them again
after a deliberate change (benchmarks/update_reference_outputs.py), so both analyse alike.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

from tests.bundled_traces import bundled_inputs

REPO_ROOT = Path(__file__).resolve().parent.parent
REFERENCE_DIR = REPO_ROOT / "tests" / "reference"
REGENERATE = "python benchmarks/update_reference_outputs.py"
# Every table the analysis writes except the per-kernel one (kernels_long.parquet: large, and each
# of its numbers reaches these), d4.md (d4.csv rendered) and analysis.json (d4.csv and checks.csv as JSON).
TABLES = ("d4.csv", "d4_detail.csv", "steps.csv", "streams.csv", "comm.csv", "checks.csv", "problems.csv")


class AnalysisFailed(RuntimeError):
    """`moe-harness analyze` exited non-zero on a bundled input."""


def reference_inputs() -> dict[str, list[Path]]:
    """Stable name (the folder under tests/reference) -> the trace files analysed together."""
    return bundled_inputs(REPO_ROOT)


def analyse_tables(traces: list[Path], work_dir: Path) -> dict[str, bytes]:
    """The TABLES that `python -m harness.cli analyze TRACES --out WORK_DIR --jobs 1` writes, by name.
    Run in this process through the command's own entry (same defaults, column name, writers), from
    the repository root with paths relative to it, so a path that reaches a table (problems.csv has a
    column for one) reads the same on every machine; one job, as parallel ranks only cost start-up
    on inputs this small."""
    from harness.cli import main

    relative = [str(Path(trace).resolve().relative_to(REPO_ROOT)) for trace in traces]
    printed, said = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO_ROOT), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
        code = main(["analyze", *relative, "--out", str(Path(work_dir).resolve()), "--jobs", "1"])
    if code != 0:
        raise AnalysisFailed(f"analyze exited {code}: {said.getvalue().strip()}")
    return {name: (work_dir / name).read_bytes() for name in TABLES if (work_dir / name).is_file()}


def stored_tables(name: str) -> dict[str, bytes]:
    """The tables kept for one input, by file name."""
    folder = REFERENCE_DIR / name
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def stored_names() -> set[str]:
    """Every input name that has a folder of tables under tests/reference."""
    return {p.parent.relative_to(REFERENCE_DIR).as_posix() for p in REFERENCE_DIR.rglob("*")
            if p.is_file() and p.name in TABLES}


def first_difference(stored: bytes, current: bytes) -> str:
    """Where two versions of a table first part, as `line N: stored ... / now ...`."""
    old, new = stored.decode().splitlines(), current.decode().splitlines()
    for number, (a, b) in enumerate(zip(old, new), start=1):
        if a != b:
            return f"line {number}: stored {a!r} / now {b!r}"
    if len(old) != len(new):
        number = min(len(old), len(new)) + 1
        shorter = "stored" if len(old) < len(new) else "now"
        return f"line {number}: {shorter} ends after {number - 1} lines ({len(old)} stored, {len(new)} now)"
    return "same lines, different line endings or final newline"
