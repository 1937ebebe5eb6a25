"""The analysis written to a run's analysis/ folder, and the D4 table as the run prints it.

Why one place: every engine ends its analysis the same way (the table, then why SOL columns are
missing, the engine's own notes, and how many problems the analysis reported), so the printed
table and table.md read alike whichever engine ran.
"""
from __future__ import annotations

from pathlib import Path


def write_table_files(result, out_dir: Path, no_sol_reason: str | None, notes: str = "") -> tuple[str, dict[str, str]]:
    """analysis.api.write_outputs into out_dir; returns the table with its notes and {file name: path}.

    no_sol_reason: why the table has no SOL columns (None when it has them); notes: the engine's
    own lines, printed before the problem count."""
    from analysis.api import write_outputs

    files = write_outputs(result, out_dir)
    table = Path(files["d4.md"]).read_text(encoding="utf-8")
    if no_sol_reason is not None:
        table += f"\nNo SOL columns: {no_sol_reason}.\n"
    table += notes
    if result.problems:
        table += f"\n{len(result.problems)} problem(s) reported by the analysis: see {files['problems.csv']}\n"
    return table, {name: str(path) for name, path in files.items()}
