"""The run tests' check that `moe-harness analyze RUN_DIR --out DIR` writes what the run wrote into
RUN_DIR/analysis (every file, numbers to 1e-9) and prints the run's table.md, notes included."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.reanalyse_run_dir import same_content
from harness.cli import main

REPORT_FILES = {"kernel_report.md", "kernel_report.html"}  # `report` writes beside the analysis; not the run's


def assert_analyze_reproduces(run_dir: Path, out: Path, capsys, left_out: frozenset[str] = frozenset()) -> str:
    """Runs `analyze RUN_DIR --out out`; asserts the same files and table; returns what it printed.

    left_out: files the run directory does not keep (the bundled real runs leave the kernel table out)."""
    capsys.readouterr()
    assert main(["analyze", str(run_dir), "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    stored = sorted(p.name for p in (run_dir / "analysis").iterdir()
                    if not p.name.startswith(".") and p.name not in REPORT_FILES and not p.name.endswith(".png"))
    written = sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name not in left_out)
    assert written == stored
    different = [name for name in stored if not same_content(run_dir / "analysis" / name, out / name)]
    assert not different, different
    ran_in = Path(json.loads((run_dir / "manifest.json").read_text())["run_dir"])
    table = (run_dir / "table.md").read_text()
    table = table.replace(str(ran_in / "analysis" / "problems.csv"), str(out / "problems.csv"))
    assert printed.startswith(table), (printed[:2000], table[:2000])
    return printed
