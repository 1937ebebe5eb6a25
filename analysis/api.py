"""The harness's door into analysis: the verbs it asks analysis for, and the few types and file
facts those verbs take or give. harness/ imports analysis only through this module and
analysis/files.py (its own file input and output); tests/test_layout.py checks both and keeps the
number of names that cross from growing.

Each name loads from its module on first use (module __getattr__), so the `report` command does not
import the attribution pipeline, nor `analyze` the report and calibration code.

    analyse:    analyze (traces -> Analysis: .markdown(), .check_profiled_batch()), write_outputs,
                AnalysisOptions, AnalysisError
    nodes:      attribute (one node's ranks), combine_nodes (every node's rows, the same tail as analyze)
    saved:      open_saved (a saved analysis, with its kernels when asked), write_view
    compare:    compare_columns (tables, changes, files)
    report:     report_reads, report_source, kernel_report (.write), ReportOptions
    calibrate:  calibrate (.markdown()), learn_signature
    inputs:     list_builtins (signatures, models, hardware, step statistics, the Nsight Compute
                metrics the report reads), check_input, sol_settings (checked against an engine's
                model config where given)
    files:      read_parquet_table, ncu_launches, write_expert_load (the file the
                run makes of SGLang's expert-distribution dump, in the form analysis reads)
"""
from __future__ import annotations

_DOOR: dict[str, tuple[str, str]] = {
    "AnalysisError": ("analysis.errors", "AnalysisError"),
    "AnalysisOptions": ("analysis.analysis_options", "AnalysisOptions"),
    **{name: ("analysis.pipeline", name) for name in (
        "analyze", "write_outputs", "attribute", "combine_nodes", "report_reads", "report_source")},
    "learn_signature": ("analysis.pipeline", "learn_signature_from"),
    **{name: ("analysis.saved_analysis", name) for name in ("open_saved", "write_view")},
    "compare_columns": ("analysis.tables.comparison", "compare_columns"),
    **{name: ("analysis.report.report_pipeline", name) for name in ("ReportOptions", "kernel_report")},
    "calibrate": ("analysis.attribution.rank.calibration", "calibrate"),
    **{name: ("analysis.catalog", name) for name in ("list_builtins", "check_input")},
    "sol_settings": ("analysis.sol.settings", "sol_settings"),
    "read_parquet_table": ("analysis.tables.parquet_reader", "read_parquet_file"),
    "ncu_launches": ("analysis.report.ncu", "ncu_launches"),
    "write_expert_load": ("analysis.ingest.expert_load", "write_expert_load"),
}


def __getattr__(name: str):
    """A door name (_DOOR), imported from its module on first use and kept here."""
    where = _DOOR.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_DOOR)
