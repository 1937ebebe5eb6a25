"""The analysis written to a run's analysis/ folder, and the D4 table as the run prints it.

Why one place: every engine ends its analysis the same way (the table, then why SOL columns are
missing, the engine's own notes, and how many problems the analysis reported), so the printed
table and table.md read alike whichever engine ran, and `moe-harness analyze RUN_DIR` (which runs
the engine's own end again, harness/reanalysis.py) prints what the run printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class WrittenAnalysis:
    """An engine's finished analysis: the result, the table with its notes, {file name: path} written,
    and the manifest entries the analysis decided (the profiled batch, the calibration)."""

    result: Any  # analysis.api.Analysis
    table: str
    files: dict[str, str]
    manifest: dict[str, Any] = field(default_factory=dict)


def write_table_files(result, out_dir: Path, no_sol_reason: str | None, notes: str = "",
                      problems_at: str | None = None) -> tuple[str, dict[str, str]]:
    """analysis.api.write_outputs into out_dir; returns the table with its notes and {file name: path}.

    no_sol_reason: why the table has no SOL columns (None when it has them); notes: the engine's
    own lines, printed before the problem count; problems_at: where the line under the table says
    problems.csv is (default: where it was written; a command writing into a staging folder names
    the folder it moves it to)."""
    from analysis.api import write_outputs

    files = write_outputs(result, out_dir)
    table = Path(files["d4.md"]).read_text(encoding="utf-8")
    if no_sol_reason is not None:
        table += f"\nNo SOL columns: {no_sol_reason}.\n"
    table += notes
    if result.problems:
        table += (f"\n{len(result.problems)} problem(s) reported by the analysis: "
                  f"see {problems_at or files['problems.csv']}\n")
    return table, {name: str(path) for name, path in files.items()}
