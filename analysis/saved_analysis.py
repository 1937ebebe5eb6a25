"""A saved analysis opened for `view` and `compare`: its D4 column, and its kernels when asked.

Why one place: both commands take a run directory (analysis/ inside) or an analysis folder, and
both may need what analysis.json does not hold: per-kernel timing (the page's timeline, layer bars
and heat map, the annotated trace) and, for an analysis saved before they were recorded, the rows'
per-step spreads. The kernels come from, in this order:

1. the folder's kernel table with its steps.csv (what `analyze --out` writes: kernels_long.parquet,
   or kernels_long.csv in an analysis written before it);
2. the run directory's traces (traces/*.trace.json[.gz]), analysed again with the saved column's
   signature, statistic and rank policy (and the run's capture traces where it kept them:
   capture_traces/ or its per-node folders). Bundled and
   older runs leave the kernel table out. Rows this does not reproduce keep no spread, and the
   disagreement is said (notes), never hidden.

Without either, the column is used as saved: no spreads, and no per-kernel pictures.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.pipeline import ANALYSIS_FILE, AnalysisOptions, analyze, load_column, saved_rows
from analysis.tables.d4_diff import has_spreads
from analysis.tables.d4_spread import with_spreads

TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")


@dataclass
class SavedAnalysis:
    given: Path  # the path as the user gave it
    analysis_dir: Path
    run_dir: Path | None  # the run directory around analysis/, when the user gave one
    column: object  # a D4Column
    kernel_rows: list | None = None
    step_rows: list | None = None
    kernels_from: str = ""  # where the kernels came from, for the page and the notes
    traces: list[Path] = field(default_factory=list)  # the run's trace files (for the annotated trace)
    notes: list[str] = field(default_factory=list)


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(analysis folder, run directory or None) for a run directory or an analysis folder."""
    given = Path(path)
    if not given.exists():
        raise AnalysisError(f"{given}: no such file or directory")
    found = saved_file(given)
    if found is not None and found.parent == given:
        run_dir = given.parent if (given.parent / "traces").is_dir() and given.name == "analysis" else None
        return given, run_dir
    if found is not None:
        return found.parent, given
    raise AnalysisError(f"{given}: neither an analysis folder ({ANALYSIS_FILE} inside) nor a run directory "
                        f"(analysis/{ANALYSIS_FILE} inside)")


def saved_file(path: str | Path) -> Path | None:
    """The analysis.json a path stands for (an analysis folder's, or a run directory's analysis/), or None."""
    for folder in (Path(path), Path(path) / "analysis"):
        if (folder / ANALYSIS_FILE).is_file():
            return folder / ANALYSIS_FILE
    return None


def run_traces(run_dir: Path | None) -> list[Path]:
    if run_dir is None or not (run_dir / "traces").is_dir():
        return []
    return sorted(p for p in (run_dir / "traces").iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def capture_folders(run_dir: Path | None) -> list[str]:
    """The run's CUDA-graph capture folders that hold traces: capture_traces/ or, for a run over several
    nodes, its node0/, node1/ ... (a bundled run may keep the folders and leave the traces out)."""
    root = run_dir / "capture_traces" if run_dir else None
    if root is None or not root.is_dir():
        return []
    folders = [root, *sorted(p for p in root.iterdir() if p.is_dir())]
    return [str(f) for f in folders if any(p.is_file() and p.name.endswith((".json", ".json.gz")) for p in f.iterdir())]


def open_saved(path: str | Path, kernels: bool = False, check: Callable[[Path], None] | None = None,
               required: bool = True) -> SavedAnalysis | None:
    """The saved column (with spreads derived when it lacks them and kernels are at hand); with
    `kernels`, its kernel and step rows too. `check` is called with the analysis.json before it is
    read (the caller's check that it is the file written); not `required`: None where the path holds
    no saved analysis (an AnalysisError otherwise)."""
    if not required and saved_file(path) is None:
        return None
    analysis_dir, run_dir = locate(path)
    if check is not None:
        check(analysis_dir / ANALYSIS_FILE)
    saved = SavedAnalysis(given=Path(path), analysis_dir=analysis_dir, run_dir=run_dir,
                          column=load_column(analysis_dir), traces=run_traces(run_dir))
    if kernels or not has_spreads(saved.column):
        _load_kernels(saved)
    return saved


def _load_kernels(saved: SavedAnalysis) -> None:
    column = saved.column
    from_table = saved_rows(saved.analysis_dir, like=column)
    if from_table is not None:
        saved.kernel_rows, saved.step_rows, saved.kernels_from, rebuilt = from_table
    elif saved.traces:
        options = AnalysisOptions(run=column.name, stat=column.stat, rank_policy=column.rank_policy,
                                  accept_length=column.accept_length, jobs=1, capture_traces=capture_folders(saved.run_dir))
        try:
            result = analyze([str(p) for p in saved.traces], signature=column.signature or "generic", options=options)
        except AnalysisError as exc:
            saved.notes.append(f"{saved.given}: the run's traces could not be analysed again ({exc}): "
                               "no per-kernel timing")
            return
        saved.kernel_rows, saved.step_rows = result.kernel_rows, result.step_rows
        saved.kernels_from = f"{len(saved.traces)} trace(s) in {saved.run_dir / 'traces'}, analysed again"
        rebuilt = result.d4
    else:
        saved.notes.append(f"{saved.given}: no kernel table (kernels_long.parquet) and no traces/: no per-kernel "
                           "timing or per-step spread")
        return
    merged, disagree = with_spreads(column, rebuilt)
    if not has_spreads(column):
        saved.column = merged
    if disagree:
        saved.notes.append(f"{saved.given}: the kernels ({saved.kernels_from}) do not reproduce "
                           f"{len(disagree)} saved row(s) of analysis.json: {', '.join(disagree[:5])}"
                           + (" ..." if len(disagree) > 5 else ""))


# What the page links of the first run's analysis folder, where present.
ANALYSIS_FILES = ("d4.md", "d4.csv", "d4_detail.csv", "kernels_long.parquet", "kernels_long.csv", "steps.csv",
                  "streams.csv", "comm.csv", "checks.csv", "problems.csv", ANALYSIS_FILE)


def write_view(folder: Path, final: Path, runs: list[SavedAnalysis], lang: str = "en", rank: str | None = None,
               step: int | None = None, annotated: bool = True) -> list[str]:
    """`view`'s files in folder (moved to `final` afterwards): the page of the first run against the
    others (analysis/report/page/view_files.py), its annotated traces; the names written. The page
    links the first run's analysis files by their path from `final`."""
    import os

    from analysis.report.page.view_files import ViewRun, write_view_files
    from analysis.tables.d4_diff import diff_columns

    run = runs[0]
    changes = [diff_columns(run.column, other.column) for other in runs[1:]]
    links = [(name, os.path.relpath(run.analysis_dir / name, final)) for name in ANALYSIS_FILES
             if (run.analysis_dir / name).is_file()]
    view_run = ViewRun(analysis_dir=run.analysis_dir, kernel_rows=run.kernel_rows, step_rows=run.step_rows,
                       kernels_from=run.kernels_from, traces=run.traces,
                       no_kernels_why="; ".join(run.notes) or "not recorded")
    return write_view_files(folder, [saved.column for saved in runs], view_run, changes, links,
                            [n for saved in runs for n in saved.notes], lang=lang, rank=rank, step=step,
                            annotated=annotated)
