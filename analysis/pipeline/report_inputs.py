"""What `report` reads: an analysis folder's tables, or trace files analysed here."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING


from analysis.tables.kernel_table import KERNEL_TABLE
from analysis.errors import AnalysisError, TraceLoadError
from analysis.trace_paths import TRACE_SUFFIXES
from analysis.analysis_options import AnalysisOptions
from analysis.ingest.trace_loader import load_trace
from analysis.pipeline.analyze_traces import analyze
from analysis.pipeline.outputs import ANALYSIS_FILE

if TYPE_CHECKING:
    from analysis.report.report_pipeline import ReportSource


def report_reads(folder: str | Path) -> list[Path] | None:
    """The analysis files a report reads from a folder (its kernel table, and d4_detail.csv and
    analysis.json where present), for a caller to check before; None when the folder has no kernel
    table, so it is not an analysis folder the report can read."""
    from analysis.tables.kernel_table import kernel_table_in

    table = kernel_table_in(folder)
    if table is None:
        return None
    return [table, *(p for p in (Path(folder) / "d4_detail.csv", Path(folder) / ANALYSIS_FILE) if p.exists())]


def report_source(paths: list[Path], signature: str) -> ReportSource:
    """What `report` reads: one analysis folder's tables (report_reads), or trace files (the files
    given, or those under one folder) analysed with the signature. A bad input is an AnalysisError
    naming it."""
    from analysis.report.report_pipeline import source_from_analysis_dir

    paths = [Path(p) for p in paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AnalysisError(f"no such file or directory: {', '.join(missing)}")
    if len(paths) == 1 and paths[0].is_dir():
        if report_reads(paths[0]) is not None:
            return source_from_analysis_dir(paths[0])
        traces = sorted(p for p in paths[0].rglob("*") if p.name.endswith(TRACE_SUFFIXES) and p.is_file())
        if not traces:
            raise AnalysisError(f"{paths[0]}: neither {KERNEL_TABLE} (or analysis/{KERNEL_TABLE}, or an older "
                                "analysis's kernels_long.csv) nor trace files inside")
        paths = traces
    bad = [str(p) for p in paths if not p.name.endswith(TRACE_SUFFIXES)]
    if bad:
        raise AnalysisError(f"not trace files (.json/.json.gz): {', '.join(bad)}")
    return report_source_from_traces(paths, signature)


def report_source_from_traces(paths: list[Path], signature: str) -> ReportSource:
    """What `report` reads from trace files (analysis/report/report_pipeline.py): the traces analysed
    (steps, D4 rows); if no rank can be analysed, every kernel of each file counts."""
    from analysis.report.report_pipeline import ReportSource
    from analysis.report.top_kernels import samples_from_rows, samples_from_traces

    got = ReportSource()
    try:
        result = analyze([str(p) for p in paths], signature=signature, options=AnalysisOptions(run="report", jobs=1))
    except AnalysisError as exc:
        got.notes.append(f"The traces could not be analysed into steps ({exc}); every kernel in each file counts, "
                         "its stage from the file name, and there are no D4 rows.")
    else:
        got.kernel_rows = result.kernel_rows
        got.samples = samples_from_rows(result.kernel_rows)
        got.sources = [str(p) for p in paths if str(p) not in {pr.path for pr in result.problems}]
        got.d4_rows = [{"group": r.group, "module": r.module, "kernel": r.kernel, "value_us": r.value_us,
                        "layers": r.layers} for r in result.d4.rows]
        got.step_ms = result.d4.step_ms or None
        got.stage = result.d4.stage
        got.notes.append(f"Analysed here with the `{signature}` signature: {len(result.step_rows)} steps, "
                         f"stage {result.d4.stage}, step {result.d4.step_ms:.2f} ms (`moe-harness analyze` gives the D4 table).")
        got.notes += [f"Skipped {pr.path or pr.rank}: {pr.message}" for pr in result.problems]
        return got
    loaded = []
    for p in paths:
        try:
            loaded.append(load_trace(str(p)))
            got.sources.append(str(p))
        except TraceLoadError as exc:  # e.g. a .json side file in a trace directory
            got.notes.append(f"Skipped {exc}")
    if not loaded:
        raise AnalysisError("no readable trace among the inputs: " + "; ".join(got.notes))
    got.samples = samples_from_traces(loaded)
    return got
