"""The harness's one door into analysis: the verbs it asks analysis for, the few types they take or give,
and how it reads and writes files (analysis/io/). harness/ imports analysis only through this module;
tests/test_layout.py checks it and keeps the number of verbs from growing.

Every name is written here, so an editor or a static tool follows it to its definition. The file names
(analysis/io/) and the two types are imported when this module is: they are light, and nearly every
command reads a file. Each verb imports its module when first called, so the `report` command does not
import the attribution pipeline, nor `analyze` the report and calibration code.

    analyse:    analyze (traces -> Analysis: .markdown(), .check_profiled_batch()), write_outputs,
                AnalysisOptions, AnalysisError
    nodes:      attribute (one node's ranks, digested), combine_nodes (every node's, the same tail as analyze)
    saved:      open_saved (a saved analysis, with its kernels when asked), write_view
    compare:    compare_columns (tables, changes, files)
    report:     report_reads, report_source, kernel_report (.write), ReportOptions
    calibrate:  calibrate (.markdown()), learn_signature
    inputs:     list_builtins (signatures, models, hardware, step statistics, the Nsight Compute
                metrics the report reads), check_input, sol_settings (checked against an engine's
                model config where given)
    run files:  ncu_launches, write_expert_load (the file the run makes of SGLang's expert-distribution
                dump, in the form analysis reads)
    io:         bounded reads (read_input*, read_json*, parsed_json, input_sha256, open_input_text and
                their limits), atomic writes (write_atomically, written_aside), load_yaml, Parquet
                (read_parquet_table, write_parquet_columns), shown_path
"""
from __future__ import annotations

from analysis.analysis_options import AnalysisOptions
from analysis.errors import AnalysisError, shown_path
from analysis.io.atomic_files import write_atomically, written_aside
from analysis.io.data_files import load_yaml
from analysis.io.input_files import (
    CONFIG_LIMIT_BYTES,
    DOCUMENT_LIMIT_BYTES,
    TABLE_LIMIT_BYTES,
    InputFileError,
    JsonLineError,
    input_sha256,
    open_input_text,
    parsed_json,
    read_input,
    read_input_range,
    read_input_text,
    read_json,
    read_json_lines,
)
from analysis.io.parquet_reader import read_parquet_file as read_parquet_table
from analysis.io.parquet_writer import write_columns as write_parquet_columns

__all__ = ["AnalysisError", "AnalysisOptions", "CONFIG_LIMIT_BYTES", "DOCUMENT_LIMIT_BYTES", "InputFileError",
           "JsonLineError", "ReportOptions", "TABLE_LIMIT_BYTES", "analyze", "attribute", "calibrate",
           "check_input", "combine_nodes", "compare_columns", "input_sha256", "kernel_report", "learn_signature",
           "list_builtins", "load_yaml", "ncu_launches", "open_input_text", "open_saved", "parsed_json",
           "read_input", "read_input_range", "read_input_text", "read_json", "read_json_lines",
           "read_parquet_table", "report_reads", "report_source", "shown_path", "sol_settings", "write_atomically",
           "write_expert_load", "write_outputs", "write_parquet_columns", "write_view", "written_aside"]


def analyze(*args, **kwargs):
    """Traces -> Analysis (analysis/pipeline/analyze_traces.py analyze)."""
    from analysis.pipeline.analyze_traces import analyze as run

    return run(*args, **kwargs)


def write_outputs(*args, **kwargs):
    """An Analysis's files into a folder (analysis/pipeline/outputs.py write_outputs)."""
    from analysis.pipeline.outputs import write_outputs as run

    return run(*args, **kwargs)


def attribute(*args, **kwargs):
    """One node's ranks loaded and attributed, no tables (analysis/pipeline/attribute_ranks.py attribute)."""
    from analysis.pipeline.attribute_ranks import attribute as run

    return run(*args, **kwargs)


def combine_nodes(*args, **kwargs):
    """Every node's attributed ranks into one Analysis (analysis/pipeline/combine.py combine_nodes)."""
    from analysis.pipeline.combine import combine_nodes as run

    return run(*args, **kwargs)


def report_reads(*args, **kwargs):
    """The files a report reads from an analysis folder (analysis/pipeline/report_inputs.py report_reads)."""
    from analysis.pipeline.report_inputs import report_reads as run

    return run(*args, **kwargs)


def report_source(*args, **kwargs):
    """What `report` reads: a folder's tables or traces analysed (analysis/pipeline/report_inputs.py report_source)."""
    from analysis.pipeline.report_inputs import report_source as run

    return run(*args, **kwargs)


def learn_signature(*args, **kwargs):
    """A signature learned from a trace's module ranges (analysis/pipeline/attribute_ranks.py learn_signature_from)."""
    from analysis.pipeline.attribute_ranks import learn_signature_from as run

    return run(*args, **kwargs)


def open_saved(*args, **kwargs):
    """A saved analysis (analysis/saved_analysis.py open_saved)."""
    from analysis.saved_analysis import open_saved as run

    return run(*args, **kwargs)


def write_view(*args, **kwargs):
    """`view`'s page and annotated traces (analysis/saved_analysis.py write_view)."""
    from analysis.saved_analysis import write_view as run

    return run(*args, **kwargs)


def compare_columns(*args, **kwargs):
    """Saved analyses side by side (analysis/tables/comparison.py compare_columns)."""
    from analysis.tables.comparison import compare_columns as run

    return run(*args, **kwargs)


def ReportOptions(*args, **kwargs):  # noqa: N802 - it makes the report's options object
    """The kernel report's options (analysis/report/report_pipeline.py ReportOptions)."""
    from analysis.report.report_pipeline import ReportOptions as options

    return options(*args, **kwargs)


def kernel_report(*args, **kwargs):
    """The kernel report's blocks (analysis/report/report_pipeline.py kernel_report)."""
    from analysis.report.report_pipeline import kernel_report as run

    return run(*args, **kwargs)


def calibrate(*args, **kwargs):
    """A trace's attribution against its own module ranges (analysis/attribution/rank/calibration.py)."""
    from analysis.attribution.rank.calibration import calibrate as run

    return run(*args, **kwargs)


def list_builtins(*args, **kwargs):
    """The built-in names of a kind (analysis/catalog.py list_builtins)."""
    from analysis.catalog import list_builtins as run

    return run(*args, **kwargs)


def check_input(*args, **kwargs):
    """A reference checked as its kind (analysis/catalog.py check_input)."""
    from analysis.catalog import check_input as run

    return run(*args, **kwargs)


def sol_settings(*args, **kwargs):
    """SOL settings checked against a model config (analysis/sol/settings.py sol_settings)."""
    from analysis.sol.settings import sol_settings as run

    return run(*args, **kwargs)


def ncu_launches(*args, **kwargs):
    """(kernel symbol, duration us) of an ncu CSV export (analysis/report/ncu.py ncu_launches)."""
    from analysis.report.ncu import ncu_launches as run

    return run(*args, **kwargs)


def write_expert_load(*args, **kwargs):
    """expert_load.json from a recorder's counts (analysis/ingest/expert_load.py write_expert_load)."""
    from analysis.ingest.expert_load import write_expert_load as run

    return run(*args, **kwargs)
