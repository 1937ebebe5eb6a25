"""The files of `moe-harness view`: the page, each trace annotated with its rows, and the kernel table
when the kernels were derived from the traces (so the page's link to it holds).

Why here: which rows belong to which trace (its rank label), annotating a trace and writing the
kernel table are analysis steps; the command (harness/commands/view.py) finds the runs, says which
of their files the page links to, and asks for write_view_files. One verb for the harness.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PAGE = "view.html"


@dataclass
class ViewRun:
    """What the page shows beside the columns: the first run's kernels, where they came from, its traces."""

    analysis_dir: Path
    kernel_rows: list | None
    step_rows: list | None
    kernels_from: str = ""
    traces: list[Path] = field(default_factory=list)
    no_kernels_why: str = "not recorded"


def write_view_files(folder: Path, columns: list, run: ViewRun, changes: list, links: list[tuple[str, str]],
                     notes: list[str], lang: str = "en", rank: str | None = None, step: int | None = None,
                     annotated: bool = True) -> list[str]:
    """Write the page (and the annotated traces, and the derived kernel table) into folder; the names
    written. `links`: (text, relative path) of the analysis files the page points to."""
    from analysis.io.atomic_files import write_atomically
    from analysis.ingest.rank_id import rank_id_for
    from analysis.report.annotated_trace import annotate_trace, annotated_name
    from analysis.report.page.page import PageInputs, render_page
    from analysis.tables.kernel_table import KERNEL_TABLE, kernel_table_in, write_kernel_table

    written: list[str] = []
    notes = list(notes)
    own_links: list[tuple[str, str]] = []
    if run.kernel_rows and kernel_table_in(run.analysis_dir) is None:
        write_atomically(folder / KERNEL_TABLE, lambda fh: write_kernel_table(fh, run.kernel_rows))
        written.append(KERNEL_TABLE)
        own_links.append((f"{KERNEL_TABLE} (derived from the traces)", KERNEL_TABLE))
    if run.kernel_rows and annotated:
        for index, trace in enumerate(run.traces):
            label = rank_id_for(str(trace), None, index).label
            rows = [r for r in run.kernel_rows if r.rank == label]
            if not rows:
                notes.append(f"{trace.name}: no kernel rows of its rank: no annotated trace")
                continue
            name = annotated_name(trace)
            annotate_trace(trace, rows, folder / name)
            written.append(name)
            own_links.append((f"{name} (Perfetto, chrome://tracing)", name))
    inputs = PageInputs(columns=columns, kernel_rows=run.kernel_rows, step_rows=run.step_rows, changes=changes,
                        links=links + own_links, notes=notes, kernels_from=run.kernels_from,
                        no_kernels_why=run.no_kernels_why, lang=lang, rank=rank, step=step)
    write_atomically(folder / PAGE, render_page(inputs))
    return [PAGE, *written]
